// Package localcopy keeps whole local copies of large objects, one plain
// file each, for FUSE passthrough: the kernel then reads such a file from
// the copy's own page cache and filesystem (large folios, no request to the
// mount), as fast as a local disk.
//
// It owns the copies' directory, their byte budget and their lifetime: a
// copy in use (pinned) is never removed, an unpinned one is removed least
// recently used first when a new copy needs room, and all are removed when
// the Copies closes (they are rebuilt from the block cache by the next
// mount). It does not fetch: the bytes come from an Opener (the prefetch
// loader, with its caches, read-ahead and checks), and it does not decide
// which files get a copy (the fuse layer does).
package localcopy

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/dataccel/dataccel/store"
)

// Reader reads one object version; the prefetch loader's readers satisfy it.
type Reader interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Close() error
}

// viewReader is a Reader that can hand out its bytes without a copy (the
// prefetch loader's can, for a read within one block): the copy is then
// written straight from the loader's block.
type viewReader interface {
	ReadView(ctx context.Context, p []byte, off int64) ([]byte, error)
}

// Opener opens a Reader for an object version.
type Opener interface {
	Open(obj store.Object) Reader
}

// ErrNoRoom: the copy would not fit the budget beside the copies in use.
var ErrNoRoom = errors.New("localcopy: no room in the budget")

// Stats are the copies' counters.
type Stats struct {
	Made     atomic.Int64 // copies made
	Reused   atomic.Int64 // acquires served by a copy made before
	Failed   atomic.Int64 // copies that could not be made (no room, a read or write failed)
	Evicted  atomic.Int64 // copies removed for room
	Bytes    atomic.Int64 // bytes the copies hold on disk now
	Written  atomic.Int64 // bytes written into copies
	Inflight atomic.Int64 // copies being made now
}

// Options configures Copies.
type Options struct {
	// Budget bounds the bytes the copies hold on disk.
	Budget int64
	// Chunk is how much one read of the Opener asks for (default 8 MiB).
	Chunk  int
	Logger *slog.Logger
	Stats  *Stats
}

// Copies makes and keeps local copies in one directory.
//
// Lock order: mu only; no I/O under it.
type Copies struct {
	dir    string
	src    Opener
	opts   Options
	log    *slog.Logger
	stats  *Stats
	ctx    context.Context // ends with Close: copies being made stop
	stop   context.CancelFunc
	wg     sync.WaitGroup
	seq    atomic.Int64 // names temporary files
	bufs   sync.Pool    // of *[]byte, Options.Chunk long
	warned atomic.Bool  // a failed copy was logged at warn level

	mu     sync.Mutex
	byKey  map[string]*entry // guarded by mu: one entry per object version
	lru    list.List         // guarded by mu: unpinned complete entries, least recently used first
	used   int64             // guarded by mu: bytes reserved by every entry
	closed bool              // guarded by mu
}

// entry is one object version's copy, being made or made.
type entry struct {
	key  string
	size int64
	done chan struct{} // closed when the copy is made or failed
	path string        // set before done closes; "" if it failed
	err  error         // set before done closes
	pins int           // guarded by Copies.mu
	elem *list.Element // guarded by Copies.mu: in lru while unpinned and made
}

// New empties dir (copies left by an earlier mount are not trusted: a crash
// may have left one half written) and returns Copies that keep their files
// there.
func New(dir string, src Opener, opts Options) (*Copies, error) {
	if opts.Chunk <= 0 {
		opts.Chunk = 8 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stats == nil {
		opts.Stats = &Stats{}
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("local copies: clear %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("local copies: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Copies{dir: dir, src: src, opts: opts, log: opts.Logger, stats: opts.Stats,
		ctx: ctx, stop: stop, byKey: map[string]*entry{}}, nil
}

// Acquire returns a read-only file that holds all of obj (this version),
// making the copy first if there is none; it waits for a copy being made.
// The copy stays until release is called (release must be called once).
// An error means there is no copy: the caller reads obj another way.
func (c *Copies) Acquire(ctx context.Context, obj store.Object) (*os.File, func(), error) {
	e, err := c.pin(obj)
	if err != nil {
		c.stats.Failed.Add(1)
		return nil, nil, err
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		c.unpin(e)
		return nil, nil, ctx.Err()
	}
	if e.err != nil {
		c.unpin(e)
		return nil, nil, e.err
	}
	f, err := os.Open(e.path)
	if err != nil {
		c.unpin(e)
		return nil, nil, fmt.Errorf("local copy of %s: %w", obj.Key, err)
	}
	var once sync.Once
	return f, func() { once.Do(func() { f.Close(); c.unpin(e) }) }, nil
}

// pin finds or starts obj's copy and pins it.
func (c *Copies) pin(obj store.Object) (*entry, error) {
	key := obj.Key + "\x00" + obj.ETag + "\x00" + strconv.FormatInt(obj.Size, 10)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("local copies: closed")
	}
	if e := c.byKey[key]; e != nil {
		if e.elem != nil {
			c.lru.Remove(e.elem)
			e.elem = nil
		}
		e.pins++
		select {
		case <-e.done:
			c.stats.Reused.Add(1)
		default:
		}
		return e, nil
	}
	if !c.roomLocked(obj.Size) {
		return nil, fmt.Errorf("local copy of %s (%d bytes, budget %d): %w", obj.Key, obj.Size, c.opts.Budget, ErrNoRoom)
	}
	e := &entry{key: key, size: obj.Size, done: make(chan struct{}), pins: 1}
	c.byKey[key] = e
	c.used += obj.Size
	c.wg.Add(1)
	c.stats.Inflight.Add(1)
	go c.make(e, obj)
	return e, nil
}

// roomLocked removes unpinned copies, least recently used first, until n
// more bytes fit the budget; false if they cannot (a copy larger than the
// whole budget removes none).
func (c *Copies) roomLocked(n int64) bool {
	if n > c.opts.Budget {
		return false
	}
	for c.used+n > c.opts.Budget {
		front := c.lru.Front()
		if front == nil {
			return false
		}
		c.removeLocked(front.Value.(*entry))
		c.stats.Evicted.Add(1)
	}
	return true
}

// removeLocked forgets a made, unpinned entry and removes its file (an open
// descriptor, the kernel's included, keeps reading it).
func (c *Copies) removeLocked(e *entry) {
	c.lru.Remove(e.elem)
	e.elem = nil
	delete(c.byKey, e.key)
	c.used -= e.size
	c.stats.Bytes.Add(-e.size)
	os.Remove(e.path)
}

func (c *Copies) unpin(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.pins--
	if e.pins > 0 {
		return
	}
	select {
	case <-e.done:
	default:
		return // the maker settles it
	}
	if e.err != nil || c.closed {
		return
	}
	e.elem = c.lru.PushBack(e)
}

// make writes obj into a new file, under the Copies' own context: a waiter
// that gives up does not stop it for the others.
func (c *Copies) make(e *entry, obj store.Object) {
	defer c.wg.Done()
	defer c.stats.Inflight.Add(-1)
	path, err := c.write(obj)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.stats.Failed.Add(1)
		switch {
		case c.ctx.Err() != nil: // closing
		case c.warned.CompareAndSwap(false, true):
			c.log.Warn("local copy not made; the file is read through the mount (further failures are logged at debug level)", "key", obj.Key, "err", err)
		default:
			c.log.Debug("local copy not made; the file is read through the mount", "key", obj.Key, "err", err)
		}
		e.err = err
		delete(c.byKey, e.key)
		c.used -= e.size
	} else {
		e.path = path
		c.stats.Made.Add(1)
		c.stats.Bytes.Add(e.size)
		if e.pins == 0 && !c.closed {
			e.elem = c.lru.PushBack(e)
		}
	}
	close(e.done)
}

// write copies obj into a temporary file and renames it into place.
func (c *Copies) write(obj store.Object) (string, error) {
	name := strconv.FormatUint(xxhash.Sum64String(obj.Key+"\x00"+obj.ETag), 16)
	tmp := filepath.Join(c.dir, "tmp-"+strconv.FormatInt(c.seq.Add(1), 10))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("local copy of %s: %w", obj.Key, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	r := c.src.Open(obj)
	defer r.Close()
	bp, _ := c.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, c.opts.Chunk)
		bp = &b
	}
	defer c.bufs.Put(bp)
	buf := *bp
	view, isView := r.(viewReader)
	var off int64
	for off < obj.Size {
		p := buf[:min(int64(len(buf)), obj.Size-off)]
		var data []byte
		var err error
		if isView {
			data, err = view.ReadView(c.ctx, p, off)
		} else {
			var n int
			n, err = r.ReadAt(c.ctx, p, off)
			data = p[:n]
		}
		if n := len(data); n > 0 {
			if _, werr := f.WriteAt(data, off); werr != nil {
				return "", fmt.Errorf("local copy of %s: %w", obj.Key, werr)
			}
			c.stats.Written.Add(int64(n))
			off += int64(n)
		}
		if err != nil && !(errors.Is(err, io.EOF) && off == obj.Size) {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: %d of %d bytes", store.ErrChanged, off, obj.Size)
			}
			return "", fmt.Errorf("local copy of %s: read at %d: %w", obj.Key, off, err)
		}
		if len(data) == 0 && err == nil {
			return "", fmt.Errorf("local copy of %s: read at %d: %w", obj.Key, off, io.ErrNoProgress)
		}
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("local copy of %s: %w", obj.Key, err)
	}
	path := filepath.Join(c.dir, name)
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("local copy of %s: %w", obj.Key, err)
	}
	ok = true
	return path, nil
}

// Close stops the copies being made, waits for them and removes every
// copy. Files acquired before stay readable until released.
func (c *Copies) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	return os.RemoveAll(c.dir)
}
