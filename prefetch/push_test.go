package prefetch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// fakePageCache stands in for the kernel's page cache: it keeps what is
// pushed, per file, unless fail refuses the file.
type fakePageCache struct {
	fail func(key string) bool

	mu    sync.Mutex
	files map[string][]byte // guarded by mu
	bytes int64             // guarded by mu
}

func newFakePageCache() *fakePageCache { return &fakePageCache{files: map[string][]byte{}} }

func (c *fakePageCache) Store(obj store.Object, off int64, data []byte) error {
	if c.fail != nil && c.fail(obj.Key) {
		return errors.New("no inode")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.files[obj.Key]
	if end := off + int64(len(data)); int64(len(b)) < end {
		b = append(b, make([]byte, end-int64(len(b)))...)
	}
	copy(b[off:], data)
	c.files[obj.Key] = b
	c.bytes += int64(len(data))
	return nil
}

// read returns the whole file if the page cache holds all of it, as the
// kernel would serve it without asking the loader.
func (c *fakePageCache) read(obj store.Object) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.files[obj.Key]
	return b, ok && int64(len(b)) == obj.Size
}

// held returns how many bytes of the file the page cache holds from 0.
func (c *fakePageCache) held(obj store.Object) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.files[obj.Key])
}

// bytesOf returns what the page cache holds of the file from 0.
func (c *fakePageCache) bytesOf(obj store.Object) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.files[obj.Key])
}

func (c *fakePageCache) pushedBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// TestPushAnnounced: files fetched ahead in an announced order go to the
// page cache, and a reader finds them there without opening them through
// the loader; every announcedSentinel-th file goes there but for its last
// page, whose read reaches the loader: that is how the planner still sees
// the reader and keeps its lead bounded; each file is fetched once; pushed
// blocks leave the ready map, so the budget is free again once the epoch
// is read.
func TestPushAnnounced(t *testing.T) {
	const n, lead = 160, 8
	st, order := shuffledEpoch(n)
	stats := &Stats{}
	// A tier, as in production: a read that arrives just as a push ends
	// finds the block there (the kernel orders the two with page locks,
	// which this fake page cache does not).
	l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, FileLead: lead, Workers: 8, Stats: stats})
	pc := newFakePageCache()
	l.SetPageCache(pc)
	l.Announce(order)

	fromCache, maxAhead, tails := 0, 0, 0
	page := os.Getpagesize()
	for i, obj := range order {
		maxAhead = max(maxAhead, len(st.countByKey())-i)
		if i%announcedSentinel == announcedSentinel-1 {
			// Pushed but for the last page, or not at all if the reader
			// got there first.
			switch n := pc.held(obj); n {
			case 0:
			case int(obj.Size-1) / page * page:
				tails++
			default:
				t.Fatalf("file %d, a sentinel: %d of %d bytes pushed", i, n, obj.Size)
			}
		}
		got, ok := pc.read(obj)
		if ok {
			fromCache++
		} else {
			var err error
			if got, err = readAll(context.Background(), l, obj, 64<<10); err != nil {
				t.Fatalf("read %s: %v", obj.Key, err)
			}
		}
		if !bytes.Equal(got, st.data(obj.Key)) {
			t.Fatalf("file %d (%s): wrong bytes (from the page cache: %v)", i, obj.Key, ok)
		}
		time.Sleep(500 * time.Microsecond)
	}
	if fromCache < n/2 {
		t.Errorf("%d of %d files read from the page cache, want at least half", fromCache, n)
	}
	if want := n - n/announcedSentinel; fromCache > want {
		t.Errorf("%d files read from the page cache, want at most %d: every %dth keeps its last page", fromCache, want, announcedSentinel)
	}
	if tails < n/announcedSentinel/2 {
		t.Errorf("%d of %d sentinel files pushed but for their last page, want at least half", tails, n/announcedSentinel)
	}
	// The planner sees the reader every announcedSentinel files at least.
	if maxAhead > lead+announcedSentinel {
		t.Errorf("lead reached %d files, want <= %d", maxAhead, lead+announcedSentinel)
	}
	for key, gets := range st.countByKey() {
		if gets != 1 {
			t.Errorf("%s fetched %d times", key, gets)
		}
	}
	if got := stats.Pushed.Load(); got < int64(fromCache) {
		t.Errorf("Pushed = %d, want >= %d", got, fromCache)
	}
	waitFor(t, "the budget to be free", func() bool { return stats.MemInUse.Load() == 0 })
	t.Logf("%d of %d files from the page cache; max lead %d; pushed %d, failed %d", fromCache, n, maxAhead, stats.Pushed.Load(), stats.PushFailed.Load())
}

// TestPushRefused: when the page cache refuses a file (the kernel never
// looked it up), the block stays ready and the read takes it from there,
// with no second GET.
func TestPushRefused(t *testing.T) {
	const n = 40
	st := newFakeStore()
	objs := addFiles(st, "d", n, 8<<10)
	stats := &Stats{}
	l := newTestLoader(t, st, nil, Options{CrossFile: true, FileLead: n, Workers: 4, Stats: stats})
	pc := newFakePageCache()
	pc.fail = func(string) bool { return true }
	l.SetPageCache(pc)
	l.Announce(objs)
	waitFor(t, "the pushes to fail", func() bool { return stats.PushFailed.Load() >= n-n/announcedSentinel })
	for _, obj := range objs {
		got, err := readAll(context.Background(), l, obj, 64<<10)
		if err != nil || !bytes.Equal(got, st.data(obj.Key)) {
			t.Fatalf("read %s: %v", obj.Key, err)
		}
	}
	for key, gets := range st.countByKey() {
		if gets != 1 {
			t.Errorf("%s fetched %d times", key, gets)
		}
	}
	if got := stats.ReadyHits.Load(); got < n-n/announcedSentinel {
		t.Errorf("ReadyHits = %d, want >= %d: refused pushes must stay ready", got, n-n/announcedSentinel)
	}
	if got := stats.Pushed.Load(); got != 0 {
		t.Errorf("Pushed = %d, want 0", got)
	}
}

// TestSweepPush: the sweep pushes what it fetches into the page cache up to
// SweepPushBytes, and the rest into the tier alone.
func TestSweepPush(t *testing.T) {
	const n, size = 40, 1000
	tests := []struct {
		name      string
		pushBytes int64
		wantBytes int64
	}{
		{"all", 1 << 20, n * size},
		{"a quarter", n * size / 4, n * size / 4},
		{"none", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			a := addFiles(st, "a", n, size)
			tier := newMapTier()
			l := newTestLoader(t, st, tier, Options{CrossFile: true, SweepBytes: 1 << 30, SweepPushBytes: tc.pushBytes, Workers: 4})
			l.SetSiblings(dirSiblings{objs: a})
			pc := newFakePageCache()
			l.SetPageCache(pc)
			for _, o := range a[:2] {
				if _, err := readAll(context.Background(), l, o, 4096); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the sweep", func() bool { return len(st.countByKey()) == n })
			waitFor(t, "the pushes", func() bool { return pc.pushedBytes() >= tc.wantBytes-2*size })
			l.Close()
			// The two files read first race with the sweep: either may
			// be pushed or not, and take its share of the allowance.
			if got := pc.pushedBytes(); got > tc.wantBytes || got < tc.wantBytes-2*size {
				t.Errorf("pushed %d bytes, want %d (or up to two files fewer)", got, tc.wantBytes)
			}
		})
	}
}

// pageLockCache stands in for FUSE_NOTIFY_STORE's wait for the page locks
// a kernel READ of the file holds until it is answered: a push of a file
// being read waits for that read to end. A push before any read waits for
// one (to line the test up).
type pageLockCache struct {
	mu      sync.Mutex
	reading map[string]chan struct{} // guarded by mu: closed when the file's READ ends
	storing map[string]bool          // guarded by mu
	over    bool                     // guarded by mu: no more reads come
}

func (c *pageLockCache) Store(obj store.Object, _ int64, _ []byte) error {
	c.mu.Lock()
	c.storing[obj.Key] = true
	c.mu.Unlock()
	for {
		c.mu.Lock()
		ch, over := c.reading[obj.Key], c.over
		c.mu.Unlock()
		if ch != nil {
			<-ch
			return nil
		}
		if over {
			return errors.New("no read came")
		}
		time.Sleep(time.Millisecond)
	}
}

// read marks a READ of key in progress until the returned func.
func (c *pageLockCache) read(key string) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.reading[key] = ch
	return func() { close(ch) }
}

// TestPushesLeaveRoomForReads: blocks waiting in or for a push hold their
// budget though evicted from the ready map. A push waits for the page locks
// of a READ of its file, and that READ for budget: were the pushes to hold
// all of it, the READs of those files would wait for good (found by a
// review). They hold at most half, so the reads go on.
func TestPushesLeaveRoomForReads(t *testing.T) {
	const block = 1 << 20
	st := newFakeStore()
	files := addFiles(st, "a", 8, block)
	other := st.add("b/x", block)
	l := newTestLoader(t, st, nil, Options{BlockSize: block, MemoryBudget: 8 * (block + blockOverhead),
		CrossFile: true, Workers: 8, ByteLead: 100 << 20, MaxInflight: 16})
	pc := &pageLockCache{reading: map[string]chan struct{}{}, storing: map[string]bool{}}
	t.Cleanup(func() { // before the loader's Close: its pushers end
		pc.mu.Lock()
		pc.over = true
		pc.mu.Unlock()
	})
	l.SetPageCache(pc)
	l.Announce(files)
	var pushing []store.Object
	waitFor(t, "two files in a push, the budget full", func() bool {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		pushing = pushing[:0]
		for _, f := range files {
			if pc.storing[f.Key] {
				pushing = append(pushing, f)
			}
		}
		return len(pushing) == pushers && l.stats.MemInUse.Load() == 8*(block+blockOverhead)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1+len(pushing))
	// A read of another file evicts the ready blocks for room.
	go func() { _, err := l.Open(other).ReadAt(ctx, make([]byte, 4096), 0); done <- err }()
	time.Sleep(100 * time.Millisecond)
	// The READs whose pages the pushes wait on.
	for _, f := range pushing {
		end := pc.read(f.Key)
		go func() {
			_, err := l.Open(f).ReadAt(ctx, make([]byte, 128<<10), 0)
			end()
			done <- err
		}()
	}
	for range 1 + len(pushing) {
		if err := <-done; err != nil {
			t.Fatalf("read: %v (waited until its deadline)", err)
		}
	}
}
