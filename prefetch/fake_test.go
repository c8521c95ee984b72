package prefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// pattern is the content source of fake objects: byte off of an object with
// seed s is pattern[(s+off) % len(pattern)]. Read-only after init; a prime
// length keeps objects from lining up with block sizes.
var pattern = func() []byte {
	b := make([]byte, 1<<20+7)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

func content(seed, off, n int64) []byte {
	out := make([]byte, n)
	fill(out, seed, off)
	return out
}

func fill(p []byte, seed, off int64) {
	for len(p) > 0 {
		i := (seed + off) % int64(len(pattern))
		k := copy(p, pattern[i:])
		p, off = p[k:], off+int64(k)
	}
}

// getEvent is one ReadRange seen by fakeStore, in the test's global sequence.
type getEvent struct {
	key     string
	off, n  int64
	seq     int64
	started time.Time
}

// fakeStore is an in-memory store.Store whose objects are generated from
// pattern (so a thousand 64 MiB objects cost nothing). It counts and logs
// GETs, can delay them, hold them behind a gate, or fail them.
type fakeStore struct {
	seq *atomic.Int64 // shared with the test to order opens against GETs

	mu      sync.Mutex
	objs    map[string]store.Object // guarded by mu
	seeds   map[string]int64        // guarded by mu
	log     []getEvent              // guarded by mu
	latency func(key string) time.Duration
	gate    chan struct{}                // when non-nil, GETs wait for it to close
	fail    func(obj store.Object) error // when non-nil and returning non-nil, the GET fails
	gets    atomic.Int64
	waiting atomic.Int64 // GETs blocked at the gate
	active  atomic.Int64 // GETs from request to body Close
	peak    atomic.Int64 // high-water mark of active
}

func newFakeStore() *fakeStore {
	return &fakeStore{seq: &atomic.Int64{}, objs: map[string]store.Object{}, seeds: map[string]int64{}}
}

// setDown makes every GET fail as Retrying fails one that gave up on a
// store that is down (store.ErrGaveUp), or, with false, succeed again.
func (s *fakeStore) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = nil
	if down {
		s.fail = func(store.Object) error {
			return fmt.Errorf("get: %w (io timeout 1m): %w", store.ErrGaveUp, errors.New("connection refused"))
		}
	}
}

// add creates an object of size bytes and returns its metadata.
func (s *fakeStore) add(key string, size int64) store.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	seed := int64(len(s.objs))*7919 + 13
	obj := store.Object{Key: key, Size: size, ETag: fmt.Sprintf("etag-%d", seed), ModTime: time.Unix(1, 0)}
	s.objs[key], s.seeds[key] = obj, seed
	return obj
}

// data is the full content of key.
func (s *fakeStore) data(key string) []byte {
	s.mu.Lock()
	obj, seed := s.objs[key], s.seeds[key]
	s.mu.Unlock()
	return content(seed, 0, obj.Size)
}

func (s *fakeStore) Stat(ctx context.Context, key string) (store.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objs[key]
	if !ok {
		return store.Object{}, fmt.Errorf("stat %q: %w", key, store.ErrNotExist)
	}
	return obj, nil
}

func (s *fakeStore) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	s.mu.Lock()
	var objs []store.Object
	for k, o := range s.objs {
		if strings.HasPrefix(k, prefix) {
			objs = append(objs, o)
		}
	}
	s.mu.Unlock()
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
	for _, o := range objs {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

func (s *fakeStore) ReadRange(ctx context.Context, obj store.Object, off, n int64) (rc io.ReadCloser, err error) {
	s.gets.Add(1)
	storeMax(&s.peak, s.active.Add(1))
	defer func() {
		if err != nil {
			s.active.Add(-1)
		}
	}()
	s.mu.Lock()
	cur, ok := s.objs[obj.Key]
	seed := s.seeds[obj.Key]
	s.log = append(s.log, getEvent{key: obj.Key, off: off, n: n, seq: s.seq.Add(1), started: time.Now()})
	gate, fail, latency := s.gate, s.fail, s.latency
	s.mu.Unlock()
	if gate != nil {
		s.waiting.Add(1)
		select {
		case <-gate:
			s.waiting.Add(-1)
		case <-ctx.Done():
			s.waiting.Add(-1)
			return nil, ctx.Err()
		}
	}
	if latency != nil {
		if d := latency(obj.Key); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
	}
	if fail != nil {
		if err := fail(obj); err != nil {
			return nil, err
		}
	}
	if !ok {
		return nil, fmt.Errorf("read %q: %w", obj.Key, store.ErrNotExist)
	}
	if cur.ETag != obj.ETag {
		return nil, fmt.Errorf("read %q: etag %s, want %s: %w", obj.Key, cur.ETag, obj.ETag, store.ErrChanged)
	}
	if n < 0 || off+n > cur.Size {
		n = cur.Size - off
	}
	return &fakeBody{patternReader{seed: seed, off: off, left: n}, &s.active}, nil
}

type fakeBody struct {
	patternReader
	active *atomic.Int64
}

func (b *fakeBody) Close() error {
	if b.active != nil {
		b.active.Add(-1)
		b.active = nil
	}
	return nil
}

type patternReader struct{ seed, off, left int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.left)]
	fill(p, r.seed, r.off)
	r.off += int64(len(p))
	r.left -= int64(len(p))
	return len(p), nil
}

// getsOf returns the logged GETs of key.
// fetched returns the bytes the store sent so far and in how many GETs.
func (s *fakeStore) fetched() (bytes int64, gets int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.log {
		bytes += e.n
	}
	return bytes, len(s.log)
}

func (s *fakeStore) getsOf(key string) []getEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []getEvent
	for _, e := range s.log {
		if e.key == key {
			out = append(out, e)
		}
	}
	return out
}

func (s *fakeStore) countByKey() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for _, e := range s.log {
		m[e.key]++
	}
	return m
}

// mapTier is a cache.Tier in a map; it can be told to drop every Put, like
// ristretto may.
type mapTier struct {
	mu   sync.Mutex
	m    map[cache.Key][]byte // guarded by mu
	drop bool                 // guarded by mu
	puts atomic.Int64
}

func newMapTier() *mapTier { return &mapTier{m: map[cache.Key][]byte{}} }

func (t *mapTier) Get(k cache.Key) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.m[k]
	return b, ok
}

// Contains answers from the map, as a disk tier answers from its index.
func (t *mapTier) Contains(k cache.Key) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[k]
	return ok
}

func (t *mapTier) Put(k cache.Key, b []byte) {
	t.puts.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.drop {
		t.m[k] = b
	}
}

// dirSiblings implements Siblings over a sorted list of objects.
type dirSiblings struct{ objs []store.Object }

func (d dirSiblings) Next(key string, n int) []store.Object {
	i := sort.Search(len(d.objs), func(i int) bool { return d.objs[i].Key > key })
	return d.objs[i:min(i+n, len(d.objs))]
}

func (d dirSiblings) Files(dir string) []store.Object {
	var out []store.Object
	for _, o := range d.objs {
		if parentOf(o.Key) == dir {
			out = append(out, o)
		} else if out == nil && strings.HasPrefix(o.Key, dir) {
			out = []store.Object{} // listed: it holds directories, no file
		}
	}
	return out
}

func (d dirSiblings) Dirs(dir string) []string {
	var out []string
	for _, o := range d.objs {
		if rest, ok := strings.CutPrefix(o.Key, dir); ok {
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				if sub := dir + rest[:i+1]; len(out) == 0 || out[len(out)-1] != sub {
					out = append(out, sub)
				}
			}
		}
	}
	return out
}

// newTestLoader builds a loader closed at the end of the test. Its pool
// poisons each buffer given back, so that a holder reading a block after
// its release sees garbage.
func newTestLoader(t testing.TB, st store.Store, tier cache.Tier, opts Options) *Loader {
	t.Helper()
	if opts.Stats == nil {
		opts.Stats = &Stats{}
	}
	opts.poisonPool = true
	l := NewLoader(st, tier, opts)
	t.Cleanup(func() { l.Close() })
	return l
}

// readAll reads obj through a new Reader in chunks of chunk bytes.
func readAll(ctx context.Context, l *Loader, obj store.Object, chunk int) ([]byte, error) {
	r := l.Open(obj)
	defer r.Close()
	var out bytes.Buffer
	buf := make([]byte, chunk)
	for off := int64(0); ; {
		n, err := r.ReadAt(ctx, buf, off)
		out.Write(buf[:n])
		off += int64(n)
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}
