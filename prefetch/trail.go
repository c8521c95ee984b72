package prefetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dataccel/dataccel/store"
)

// ErrNotRead: a trailing reader waited for a block that no one fetched.
var ErrNotRead = errors.New("prefetch: block not read by anyone")

// trailPoll is how often a trailing reader looks for the block it waits on.
const trailPoll = 10 * time.Millisecond

// OpenTrailing returns a Reader of obj that fetches nothing: it reads a
// block once another reader has fetched it (or is fetching it), or the
// cache tier holds it, and waits for that up to stall, then fails with
// ErrNotRead. A local copy made through it trails the job's own read of the
// file, at no fetch of its own: a job that reads only part of the file
// leaves the copy unfinished, not the loader fetching the rest.
func (l *Loader) OpenTrailing(obj store.Object, stall time.Duration) Reader {
	return &trailReader{l: l, obj: obj, stall: stall}
}

type trailReader struct {
	l     *Loader
	obj   store.Object
	stall time.Duration
}

func (r *trailReader) Close() error { return nil }

// ReadAt reads p at off, block by block (ReadView).
func (r *trailReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		data, err := r.ReadView(ctx, p[n:], off+int64(n))
		n += copy(p[n:], data)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ReadView returns the bytes at off, up to len(p) and the end of off's
// block, as a slice of the block.
func (r *trailReader) ReadView(ctx context.Context, p []byte, off int64) ([]byte, error) {
	if off >= r.obj.Size {
		return nil, io.EOF
	}
	l := r.l
	i := l.blockOf(r.obj, off)
	bOff, _ := l.blockRange(r.obj, i)
	idle := time.NewTimer(r.stall)
	defer idle.Stop()
	tick := time.NewTicker(trailPoll)
	defer tick.Stop()
	for {
		data, ok, err := l.present(ctx, r.obj, i)
		if err != nil {
			return nil, err
		}
		if ok {
			data = data[off-bOff:]
			data = data[:min(len(data), len(p))]
			if off+int64(len(data)) == r.obj.Size {
				return data, io.EOF
			}
			return data, nil
		}
		select {
		case <-tick.C:
		case <-idle.C:
			return nil, fmt.Errorf("prefetch: read %q block at %d: %w within %s", r.obj.Key, bOff, ErrNotRead, r.stall)
		case <-ctx.Done():
			return nil, fmt.Errorf("prefetch: read %q: %w", r.obj.Key, ctx.Err())
		case <-l.ctx.Done():
			return nil, fmt.Errorf("prefetch: read %q: %w", r.obj.Key, ErrClosed)
		}
	}
}

// present returns block i of obj if a fetch of it is in flight (waiting
// for it), it is held ready, or the cache tier holds it; it never starts a
// fetch, and counts no hit or use.
func (l *Loader) present(ctx context.Context, obj store.Object, i int64) ([]byte, bool, error) {
	k := l.key(obj, i)
	_, n := l.blockRange(obj, i)
	l.mu.Lock()
	f := l.ready[k]
	if f == nil {
		f = l.flights[k]
	}
	if f != nil {
		f.refs++
	}
	l.mu.Unlock()
	if f != nil {
		data, err := l.wait(ctx, handle{f: f})
		l.release(handle{f: f}, relDrop)
		return data, err == nil, err
	}
	if l.tier == nil {
		return nil, false, nil
	}
	data, ok := l.tier.Get(k)
	if !ok || int64(len(data)) != n {
		return nil, false, nil
	}
	return data, true, nil
}
