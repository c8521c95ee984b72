package prefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// waitFor polls cond until it holds or the test's patience runs out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSingleflight64Readers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size, off int64
	}{
		{"small object, whole", 110 << 10, 0},
		{"large object, middle block", 10 << 20, 5 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			obj := st.add("a/obj", tc.size)
			st.gate = make(chan struct{})
			stats := &Stats{}
			tier := newMapTier()
			l := newTestLoader(t, st, tier, Options{BlockSize: 1 << 20, Stats: stats})

			const readers = 64
			want := st.data(obj.Key)[tc.off : tc.off+4096]
			var wg sync.WaitGroup
			errs := make(chan error, readers)
			for range readers {
				wg.Go(func() {
					r := l.Open(obj)
					defer r.Close()
					p := make([]byte, 4096)
					if _, err := r.ReadAt(context.Background(), p, tc.off); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(p, want) {
						errs <- errors.New("wrong bytes")
					}
				})
			}
			// Every reader has joined the one fetch before it may finish.
			waitFor(t, "63 shares", func() bool { return stats.Shared.Load() == readers-1 })
			close(st.gate)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			blockGets := 0
			for _, e := range st.getsOf(obj.Key) {
				if e.off <= tc.off && tc.off < e.off+e.n {
					blockGets++
				}
			}
			if blockGets != 1 {
				t.Errorf("GETs of the block = %d, want 1", blockGets)
			}
		})
	}
}

// A cache tier outlives a loader (a disk cache, a remount), and the next
// may run with another block size: block 1 of a 192 KiB file is bytes
// 128-192 KiB under 128 KiB blocks and 64-128 KiB under 64 KiB blocks, the
// same length. Each must get its own bytes; the block both sizes start at
// 128 KiB is the same block, and served from the tier.
func TestCacheAcrossBlockSizes(t *testing.T) {
	st := newFakeStore()
	obj := st.add("d/f", 192<<10)
	tier := newMapTier()
	ctx := context.Background()
	for _, bs := range []int64{128 << 10, 64 << 10, 128 << 10} {
		stats := &Stats{}
		l := newTestLoader(t, st, tier, Options{BlockSize: bs, SmallObject: 32 << 10, Stats: stats})
		got, err := readAll(ctx, l, obj, 16<<10)
		if err != nil || !bytes.Equal(got, st.data(obj.Key)) {
			t.Fatalf("block size %d KiB: err %v, equal %v", bs>>10, err, bytes.Equal(got, st.data(obj.Key)))
		}
		if bs == 64<<10 && stats.CacheHits.Load() == 0 {
			t.Errorf("block size 64 KiB: no hit for the block at 128 KiB")
		}
	}
}

// TestCacheAcrossBlockSizesOnDisk: a disk tier keeps the first block it
// holds under a key, and a block written under a smaller block size is
// shorter than the block a larger size names at the same offset. Such a
// block is fetched once under the larger size and takes the short one's
// place, on the disk tier alone and through a RAM tier that a remount
// drains to it; a block longer than asked serves its start.
func TestCacheAcrossBlockSizesOnDisk(t *testing.T) {
	setups := []struct {
		name string
		// mount returns the tier a pass reads through, and its unmount.
		mount func(t *testing.T, disk *cache.Disk) (cache.Tier, func())
	}{
		{"disk", func(t *testing.T, disk *cache.Disk) (cache.Tier, func()) { return disk, disk.Flush }},
		{"ram+disk, remounted", func(t *testing.T, disk *cache.Disk) (cache.Tier, func()) {
			ram, err := cache.NewRAM(64<<20, &cache.Stats{})
			if err != nil {
				t.Fatal(err)
			}
			tier := cache.NewTiered(ram, disk)
			return tier, func() {
				tier.Drain(time.Now().Add(10 * time.Second))
				ram.Close()
			}
		}},
	}
	passes := []struct {
		block int64
		gets  int64
	}{
		{128 << 10, 4}, // every block fetched
		{64 << 10, 4},  // those at 64 KiB past a 128 KiB boundary; the others are the first halves of 128 KiB blocks
		{64 << 10, 0},
		{256 << 10, 2}, // the 128 KiB blocks at its offsets are too short
		{256 << 10, 0}, // and were replaced
		{128 << 10, 0}, // the first half of a 256 KiB block, or a 128 KiB block
	}
	for _, setup := range setups {
		t.Run(setup.name, func(t *testing.T) {
			st := newFakeStore()
			obj := st.add("d/f", 512<<10)
			disk, err := cache.NewDisk(cache.DefaultDiskOptions(t.TempDir(), 64<<20))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { disk.Close() })
			for i, pass := range passes {
				tier, unmount := setup.mount(t, disk)
				before := st.gets.Load()
				l := NewLoader(st, tier, Options{BlockSize: pass.block, SmallObject: 32 << 10, Stats: &Stats{}})
				got, err := readAll(context.Background(), l, obj, 16<<10)
				l.Close()
				unmount()
				if err != nil || !bytes.Equal(got, st.data(obj.Key)) {
					t.Fatalf("pass %d, block size %d KiB: err %v, equal %v", i+1, pass.block>>10, err, bytes.Equal(got, st.data(obj.Key)))
				}
				if gets := st.gets.Load() - before; gets != pass.gets {
					t.Errorf("pass %d, block size %d KiB: %d GETs, want %d", i+1, pass.block>>10, gets, pass.gets)
				}
			}
		})
	}
}

func TestCachedBlockIsNotFetchedAgain(t *testing.T) {
	st := newFakeStore()
	obj := st.add("d/f", 300<<10)
	tier := newMapTier()
	ctx := context.Background()
	l1 := newTestLoader(t, st, tier, Options{BlockSize: 128 << 10, SmallObject: 64 << 10})
	got, err := readAll(ctx, l1, obj, 50<<10)
	if err != nil || !bytes.Equal(got, st.data(obj.Key)) {
		t.Fatalf("first read: err %v, equal %v", err, bytes.Equal(got, st.data(obj.Key)))
	}
	if _, ok := tier.Get(l1.key(obj, 2)); !ok {
		t.Fatal("block 2 not put in the tier")
	}
	before := st.gets.Load()
	// A new loader has an empty ready map: only the tier can serve it.
	stats := &Stats{}
	l2 := newTestLoader(t, st, tier, Options{BlockSize: 128 << 10, SmallObject: 64 << 10, Stats: stats})
	got, err = readAll(ctx, l2, obj, 50<<10)
	if err != nil || !bytes.Equal(got, st.data(obj.Key)) {
		t.Fatalf("second read: err %v", err)
	}
	if n := st.gets.Load() - before; n != 0 {
		t.Errorf("cached object cost %d GETs, want 0", n)
	}
	if stats.CacheHits.Load() == 0 {
		t.Error("no cache hits counted")
	}
}

func TestCancelledReaderDoesNotFailOthers(t *testing.T) {
	st := newFakeStore()
	obj := st.add("x", 200<<10)
	st.gate = make(chan struct{})
	tier := newMapTier()
	stats := &Stats{}
	l := newTestLoader(t, st, tier, Options{Stats: stats})

	ctxA, cancelA := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() {
		_, err := l.Open(obj).ReadAt(ctxA, make([]byte, 100), 0)
		errA <- err
	}()
	errB := make(chan error, 1)
	pB := make([]byte, 100)
	waitFor(t, "A's fetch at the store", func() bool { return st.waiting.Load() == 1 })
	go func() {
		_, err := l.Open(obj).ReadAt(context.Background(), pB, 50)
		errB <- err
	}()
	waitFor(t, "B to join", func() bool { return stats.Shared.Load() == 1 })
	cancelA()
	select {
	case err := <-errA:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("A: err %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled reader did not return while the fetch was blocked")
	}
	close(st.gate)
	if err := <-errB; err != nil {
		t.Fatalf("B failed: %v", err)
	}
	if !bytes.Equal(pB, st.data(obj.Key)[50:150]) {
		t.Error("B: wrong bytes")
	}
	waitFor(t, "tier fill", func() bool { _, ok := tier.Get(l.key(obj, 0)); return ok })
	if n := st.gets.Load(); n != 1 {
		t.Errorf("GETs = %d, want 1", n)
	}
}

// A cancelled sole reader still fills the cache: the fetch is the loader's.
func TestCancelledSoleReaderStillFillsCache(t *testing.T) {
	st := newFakeStore()
	obj := st.add("solo", 1000)
	st.gate = make(chan struct{})
	tier := newMapTier()
	l := newTestLoader(t, st, tier, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() {
		_, err := l.Open(obj).ReadAt(ctx, make([]byte, 10), 0)
		cancelled <- err
	}()
	waitFor(t, "fetch at the store", func() bool { return st.waiting.Load() == 1 })
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	close(st.gate)
	waitFor(t, "tier fill", func() bool { _, ok := tier.Get(l.key(obj, 0)); return ok })
}

func TestStoreErrorReachesAllWaitersAndIsNotCached(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"transient", errors.New("connection reset")},
		{"changed", fmt.Errorf("read: %w", store.ErrChanged)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			obj := st.add("e", 5000)
			st.gate = make(chan struct{})
			st.fail = func(store.Object) error { return tc.err }
			tier := newMapTier()
			stats := &Stats{}
			l := newTestLoader(t, st, tier, Options{Stats: stats})
			const waiters = 10
			errs := make(chan error, waiters)
			for range waiters {
				go func() {
					_, err := l.Open(obj).ReadAt(context.Background(), make([]byte, 10), 0)
					errs <- err
				}()
			}
			waitFor(t, "all waiters", func() bool { return stats.Shared.Load() == waiters-1 })
			close(st.gate)
			for range waiters {
				if err := <-errs; !errors.Is(err, tc.err) {
					t.Errorf("waiter: err %v, want %v", err, tc.err)
				}
			}
			if _, ok := tier.Get(l.key(obj, 0)); ok {
				t.Error("failed fetch was cached")
			}
			// Not cached: the next read fetches again, and succeeds now.
			st.mu.Lock()
			st.fail = nil
			st.mu.Unlock()
			p := make([]byte, 10)
			if _, err := l.Open(obj).ReadAt(context.Background(), p, 0); err != nil {
				t.Fatalf("read after failure: %v", err)
			}
			if n := st.gets.Load(); n != 2 {
				t.Errorf("GETs = %d, want 2", n)
			}
		})
	}
}

// TestReadAfterGiveUpFailsAtOnce: the next read of a block whose fetch
// gave up (its tries or --io-timeout spent) just now fails at once with that
// error, without asking the store again: the kernel asks again for a page
// whose read failed, and that second read waited a whole --io-timeout more
// for a store that is down. The read after it asks the store, which may be
// back.
func TestReadAfterGiveUpFailsAtOnce(t *testing.T) {
	st := newFakeStore()
	obj := st.add("g", 5000)
	st.setDown(true)
	l := newTestLoader(t, st, nil, Options{})
	p := make([]byte, 100)
	if _, err := l.Open(obj).ReadAt(context.Background(), p, 0); !errors.Is(err, store.ErrGaveUp) {
		t.Fatalf("read from a store that is down: %v, want it to give up", err)
	}
	gaveUpAt := time.Now()
	if _, err := l.Open(obj).ReadAt(context.Background(), p, 0); !errors.Is(err, store.ErrGaveUp) {
		t.Fatalf("read again right after: %v, want the fetch's error", err)
	}
	if n := st.gets.Load(); n != 1 {
		t.Fatalf("%d GETs, want 1: a read right after a fetch gave up asked the store again", n)
	}
	if took := time.Since(gaveUpAt); took >= gaveUpFor {
		t.Fatalf("the second read took %s, past gaveUpFor: nothing checked", took)
	}
	st.setDown(false)
	if _, err := l.Open(obj).ReadAt(context.Background(), p, 0); err != nil {
		t.Fatalf("the third read, the store back: %v", err)
	}
	if n := st.gets.Load(); n != 2 {
		t.Errorf("%d GETs, want 2", n)
	}
}

// The kernel's second READ at offset 0 comes to a new reader, which on a
// busy loader streams: the prefetch run it starts must leave a block whose
// fetch gave up on a read alone, or the retry joins it and waits for the
// store again.
func TestRetryAfterGiveUpOnABusyLoader(t *testing.T) {
	st := newFakeStore()
	obj := st.add("big", 2*4096)
	st.setDown(true)
	stats := &Stats{}
	l := newTestLoader(t, st, nil, Options{BlockSize: 4096, StreamAt: 1, Stats: stats})
	stats.Inflight.Add(5) // other readers' GETs in flight
	t.Cleanup(func() { stats.Inflight.Add(-5) })
	p := make([]byte, 100)
	if _, err := l.Open(obj).ReadAt(context.Background(), p, 0); !errors.Is(err, store.ErrGaveUp) {
		t.Fatalf("first read: %v, want it to give up", err)
	}
	// The read-ahead it started may still be asking the store.
	waitFor(t, "the first read's fetches", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.flights) == 0
	})
	st.mu.Lock()
	first := len(st.log)
	st.mu.Unlock()
	if _, err := l.Open(obj).ReadAt(context.Background(), p, 0); !errors.Is(err, store.ErrGaveUp) {
		t.Fatalf("the retry: %v, want the first read's error", err)
	}
	// The run may fetch block 1 again (only prefetch waited for it), not
	// the block the read gave up on.
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, e := range st.log[first:] {
		if e.off == 0 {
			t.Errorf("the retry asked the store for block 0 again (GET [%d,+%d))", e.off, e.n)
		}
	}
}

// Two reads that shared a fetch which gave up each have their kernel's
// retry: both retries fail at once, and the read after them asks the store.
func TestGiveUpOneRetryPerRead(t *testing.T) {
	st := newFakeStore()
	obj := st.add("two", 4096)
	st.gate = make(chan struct{})
	st.setDown(true)
	stats := &Stats{}
	l := newTestLoader(t, st, nil, Options{BlockSize: 4096, Stats: stats})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.Open(obj).ReadAt(context.Background(), make([]byte, 10), 0)
			errs <- err
		}()
	}
	waitFor(t, "the second read to join the first one's fetch", func() bool { return stats.Shared.Load() == 1 })
	close(st.gate)
	for range 2 {
		if err := <-errs; !errors.Is(err, store.ErrGaveUp) {
			t.Fatalf("read: %v, want it to give up", err)
		}
	}
	for i := range 2 {
		if _, err := l.Open(obj).ReadAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, store.ErrGaveUp) {
			t.Fatalf("retry %d: %v, want the fetch's error", i+1, err)
		}
	}
	if n := st.gets.Load(); n != 1 {
		t.Fatalf("%d GETs after two failed reads and their retries, want 1", n)
	}
	st.setDown(false)
	if _, err := l.Open(obj).ReadAt(context.Background(), make([]byte, 10), 0); err != nil {
		t.Fatalf("the read after the retries, the store back: %v", err)
	}
}

// A prefetch that gave up with no reader waiting leaves no failure behind:
// a reader's first read of the block asks the store, which may be back.
func TestPrefetchGiveUpFailsNoRead(t *testing.T) {
	st := newFakeStore()
	obj := st.add("pf", 4096)
	st.setDown(true)
	l := newTestLoader(t, st, nil, Options{BlockSize: 4096})
	l.startPrefetch(obj, 0)
	waitFor(t, "the prefetch to fail", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return st.gets.Load() > 0 && l.flights[l.key(obj, 0)] == nil
	})
	st.setDown(false) // the store is back
	if _, err := l.Open(obj).ReadAt(context.Background(), make([]byte, 10), 0); err != nil {
		t.Fatalf("a reader's first read after a prefetch gave up, the store back: %v", err)
	}
}

// TestReadAfterFailureFetchesAgain: a failed fetch leaves the flights map
// before it wakes its waiters, so a read that comes after the failure
// fetches again instead of taking the old error (a mount's read right after
// the store came back failed with the outage's EIO). The test holds l.mu
// while the fetch finishes: its waiters must not wake while it is still in
// the map.
func TestReadAfterFailureFetchesAgain(t *testing.T) {
	st := newFakeStore()
	obj := st.add("e", 5000)
	l := newTestLoader(t, st, nil, Options{})
	k := l.key(obj, 0)

	l.mu.Lock()
	failed := l.registerLocked(obj, 0, obj.Size, false, false)
	finished := make(chan struct{})
	go func() { l.finish(failed, nil, false, errors.New("outage")); close(finished) }()
	select {
	case <-failed.done:
		if l.flights[k] == failed {
			l.mu.Unlock()
			t.Fatal("the failed fetch woke its waiters while still in the flights map, where a read coming now joins it")
		}
	case <-time.After(50 * time.Millisecond):
	}
	l.mu.Unlock()
	<-failed.done
	l.mu.Lock()
	joined := l.joinLocked(k)
	l.mu.Unlock()
	if joined != nil {
		t.Fatalf("a read after the failure joined the failed fetch (err %v)", joined.err)
	}
	<-finished

	p := make([]byte, 5000)
	if _, err := l.Open(obj).ReadAt(context.Background(), p, 0); err != nil || !bytes.Equal(p, st.data("e")) {
		t.Fatalf("a read after the failure: err %v, bytes equal %v", err, bytes.Equal(p, st.data("e")))
	}
}

func TestChangedObjectSurfacesErrChanged(t *testing.T) {
	st := newFakeStore()
	old := st.add("c", 3<<20)
	st.add("c", 3<<20) // overwritten: new ETag
	l := newTestLoader(t, st, nil, Options{BlockSize: 1 << 20})
	_, err := l.Open(old).ReadAt(context.Background(), make([]byte, 10), 2<<20)
	if !errors.Is(err, store.ErrChanged) {
		t.Fatalf("err %v, want ErrChanged", err)
	}
}

// TestRandomReadsByteExact reads at random with ReadAt and ReadView.
func TestRandomReadsByteExact(t *testing.T) {
	const bs = 64 << 10
	sizes := []int64{0, 1, 1000, bs - 1, bs, bs + 1, 5*bs + 123, 20 * bs}
	for _, tc := range []struct {
		name   string
		tier   bool
		budget int64
		small  int64
	}{
		{"no tier", false, 0, bs},
		{"tier", true, 0, bs},
		{"tiny budget", false, bs / 2, bs},
		{"small objects fetched whole up to 3 blocks", true, 0, 3 * bs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			var tier cache.Tier
			if tc.tier {
				tier = newMapTier()
			}
			l := newTestLoader(t, st, tier, Options{BlockSize: bs, SmallObject: tc.small, MemoryBudget: tc.budget, CrossFile: true, ReadAhead: 4})
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			var wg sync.WaitGroup
			for i, size := range sizes {
				obj := st.add(fmt.Sprintf("r/%d", i), size)
				src := st.data(obj.Key)
				seed := rng.Uint64()
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(seed, 1))
					r := l.Open(obj)
					defer r.Close()
					for range 200 {
						off := rng.Int64N(size + 2*bs + 1)
						if rng.IntN(4) == 0 {
							off = max(0, size-rng.Int64N(bs)) // around EOF
						}
						p := make([]byte, rng.IntN(3*bs)+1)
						var n int
						var err error
						if rng.IntN(2) == 0 {
							n, err = r.ReadAt(context.Background(), p, off)
						} else { // the same bytes without a copy when they lie in one block
							var v []byte
							var done func()
							v, done, err = r.(viewReader).ReadView(context.Background(), p, off)
							if len(v) > len(p) {
								t.Errorf("ReadView gave %d bytes for %d", len(v), len(p))
								return
							}
							n = copy(p, v)
							if done != nil {
								done()
							}
						}
						wantN := max(0, min(int64(len(p)), size-off))
						if int64(n) != wantN {
							t.Errorf("size %d: ReadAt(len %d, off %d) = %d, want %d (err %v)", size, len(p), off, n, wantN, err)
							return
						}
						if wantN < int64(len(p)) && err != io.EOF {
							t.Errorf("size %d: short read at %d: err %v, want io.EOF", size, off, err)
							return
						}
						if wantN == int64(len(p)) && err != nil {
							t.Errorf("size %d: full read at %d: err %v", size, off, err)
							return
						}
						if n > 0 && !bytes.Equal(p[:n], src[off:off+int64(n)]) {
							t.Errorf("size %d: bytes differ at off %d len %d", size, off, n)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

func TestReadAheadGrowsAndShrinks(t *testing.T) {
	const bs = 64 << 10
	st := newFakeStore()
	obj := st.add("big", 64*bs)
	stats := &Stats{}
	l := newTestLoader(t, st, nil, Options{BlockSize: bs, ReadAhead: 8, Stats: stats})
	r := l.Open(obj)
	defer r.Close()
	ctx := context.Background()
	p := make([]byte, bs/2)
	// Sequential through 4 blocks: the window reaches 8 blocks ahead.
	for off := int64(0); off < 4*bs; off += int64(len(p)) {
		if _, err := r.ReadAt(ctx, p, off); err != nil {
			t.Fatal(err)
		}
	}
	maxBlock := func() (m int64) {
		for _, e := range st.getsOf(obj.Key) {
			m = max(m, e.off/bs)
		}
		return m
	}
	waitFor(t, "read-ahead to reach block 11 (window 8 past block 3)", func() bool { return maxBlock() >= 11 })
	time.Sleep(10 * time.Millisecond)
	if m := maxBlock(); m != 11 {
		t.Errorf("read-ahead reached block %d, want 11", m)
	}
	if stats.PrefetchIssued.Load() == 0 || stats.PrefetchUsed.Load() == 0 {
		t.Errorf("prefetch issued %d used %d, want both > 0", stats.PrefetchIssued.Load(), stats.PrefetchUsed.Load())
	}
	// Random reads: the window collapses, so they fetch only what they read.
	issued := stats.PrefetchIssued.Load()
	for _, b := range []int64{40, 20, 50, 30, 60} {
		if _, err := r.ReadAt(ctx, p, b*bs); err != nil {
			t.Fatal(err)
		}
	}
	if extra := stats.PrefetchIssued.Load() - issued; extra > 2+1 {
		t.Errorf("random reads issued %d read-ahead fetches, want the window to shrink (<= 3)", extra)
	}
}

func TestCloseStopsAndFailsReads(t *testing.T) {
	st := newFakeStore()
	obj := st.add("z", 100)
	st.gate = make(chan struct{}) // never opened: Close must not wait on the store
	l := NewLoader(st, nil, Options{CrossFile: true})
	errc := make(chan error, 1)
	go func() {
		_, err := l.Open(obj).ReadAt(context.Background(), make([]byte, 10), 0)
		errc <- err
	}()
	waitFor(t, "fetch at the store", func() bool { return st.waiting.Load() == 1 })
	done := make(chan struct{})
	go func() { l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("read in flight at Close: err %v, want ErrClosed", err)
	}
	if _, err := l.Open(obj).ReadAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("read after Close: err %v, want ErrClosed", err)
	}
}

func TestGlobalInflightLimit(t *testing.T) {
	st := newFakeStore()
	st.latency = func(string) time.Duration { return 2 * time.Millisecond }
	objs := make([]store.Object, 64)
	for i := range objs {
		objs[i] = st.add(fmt.Sprintf("lim/%02d", i), 300<<10)
	}
	const limit = 4
	stats := &Stats{}
	l := newTestLoader(t, st, nil, Options{BlockSize: 64 << 10, MaxInflight: limit, CrossFile: true, Stats: stats})
	l.Announce(objs)
	var wg sync.WaitGroup
	for _, obj := range objs {
		wg.Go(func() {
			if got, err := readAll(context.Background(), l, obj, 40<<10); err != nil || !bytes.Equal(got, st.data(obj.Key)) {
				t.Errorf("%s: err %v or wrong bytes", obj.Key, err)
			}
		})
	}
	wg.Wait()
	if p := st.peak.Load(); p > limit || p < 2 {
		t.Errorf("peak GETs in flight %d, want 2..%d", p, limit)
	}
	t.Logf("peak GETs in flight %d (limit %d), GETs %d", st.peak.Load(), limit, stats.Gets.Load())
}

// storeCalls counts the ReadRange calls that go through it.
type storeCalls struct {
	store.Store
	n atomic.Int64
}

func (s *storeCalls) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	s.n.Add(1)
	return s.Store.ReadRange(ctx, obj, off, n)
}

// TestForegroundStore: a fetch a read waits on goes to Options.Foreground
// (where hedging sits), prefetch to the loader's store.
func TestForegroundStore(t *testing.T) {
	st := newFakeStore()
	objs := addFiles(st, "d", 8, 1000)
	fg := &storeCalls{Store: st}
	l := newTestLoader(t, st, nil, Options{Foreground: fg, CrossFile: true})
	if _, err := readAll(context.Background(), l, objs[0], 4096); err != nil {
		t.Fatal(err)
	}
	if n := fg.n.Load(); n != 1 {
		t.Fatalf("foreground GETs %d, want 1 for a read nobody prefetched", n)
	}
	l.Announce(objs[1:])
	waitFor(t, "the announced files", func() bool { return st.gets.Load() == int64(len(objs)) })
	if n := fg.n.Load(); n != 1 {
		t.Errorf("foreground GETs %d after prefetch, want still 1", n)
	}
}

// TestStreamWhenBusy: a file of a few blocks read from its start while
// the loader has StreamAt GETs in flight is fetched with one GET of the
// whole object; on an idle loader, with streaming off, or for a file larger
// than the read-ahead window, block by block.
func TestStreamWhenBusy(t *testing.T) {
	const block = 64 << 10
	for _, tc := range []struct {
		name       string
		streamAt   int
		readAhead  int
		busy       bool
		wantStream bool
	}{
		{"busy", 1, 8, true, true},
		{"idle", 1, 8, false, false},
		{"busy, streaming off", -1, 8, true, false},
		{"busy, larger than the read-ahead window", 1, 4, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			big := st.add("d/big", 5*block+777)
			slow := st.add("d/slow", 100)
			st.latency = func(key string) time.Duration {
				if key == slow.Key {
					return time.Hour // until the loader closes
				}
				return 0
			}
			stats := &Stats{}
			l := newTestLoader(t, st, nil, Options{BlockSize: block, StreamAt: tc.streamAt, ReadAhead: tc.readAhead, Stats: stats})
			if tc.busy {
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				t.Cleanup(func() { cancel(); wg.Wait() })
				wg.Go(func() { readAll(ctx, l, slow, 100) })
				waitFor(t, "a GET in flight", func() bool { return stats.Inflight.Load() >= 1 })
			}
			got, err := readAll(context.Background(), l, big, 128<<10)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, st.data(big.Key)) {
				t.Fatal("read bytes differ from the object's")
			}
			gets := st.getsOf(big.Key)
			streamed := len(gets) == 1 && gets[0].off == 0 && gets[0].n == big.Size
			if streamed != tc.wantStream {
				t.Errorf("GETs %v: streamed %v, want %v", gets, streamed, tc.wantStream)
			}
		})
	}
}

// The start of a longer cached block is served as a copy: a slice of it
// would keep the whole block alive under a budget charge of the shorter one.
func TestFitCopiesTheStartOfALongerBlock(t *testing.T) {
	l := newTestLoader(t, newFakeStore(), newMapTier(), Options{BlockSize: 64 << 10})
	long := bytes.Repeat([]byte{7}, 128<<10)
	got, ok := l.fit(cache.Key{Object: "o", ETag: "e"}, long, 64<<10)
	if !ok || len(got) != 64<<10 || cap(got) != 64<<10 || &got[0] == &long[0] || !bytes.Equal(got, long[:64<<10]) {
		t.Fatalf("fit of a 128 KiB block to 64 KiB: ok %v, len %d, cap %d, shares the block's memory: %v", ok, len(got), cap(got), ok && &got[0] == &long[0])
	}
}
