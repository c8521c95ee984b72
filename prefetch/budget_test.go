package prefetch

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// 1,000 open files reading large objects sequentially would want 1,000 x 8
// blocks of read-ahead (2 GiB here); the budget keeps the loader's share of
// the heap to MemoryBudget.
func TestMemoryBudgetHoldsWith1000Readers(t *testing.T) {
	const (
		readers = 1000
		bs      = 256 << 10
		budget  = 32 << 20
		perFile = 512 << 10
		chunk   = 128 << 10
	)
	// A low GC target makes the heap track live memory closely, so the
	// figure measures what the loader holds, not what the GC has yet to free.
	const gcPercent = 5
	defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	st := newFakeStore()
	stats := &Stats{}
	l := newTestLoader(t, st, nil, Options{BlockSize: bs, MemoryBudget: budget, ReadAhead: 8, Stats: stats})
	rs := make([]Reader, readers)
	bufs := make([][]byte, readers)
	for i := range rs {
		rs[i] = l.Open(st.add(fmt.Sprintf("big/%04d", i), 64<<20))
		bufs[i] = make([]byte, chunk)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc

	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for i, r := range rs {
		wg.Go(func() {
			for off := int64(0); off < perFile; off += chunk {
				if _, err := r.ReadAt(context.Background(), bufs[i], off); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	grew := int64(peak.Load()) - int64(base)
	t.Logf("heap: base %d MiB, peak %d MiB, growth %d MiB (budget %d MiB); budget peak %d MiB; GETs %d, read-ahead issued %d skipped %d wasted %d",
		base>>20, peak.Load()>>20, grew>>20, budget>>20, stats.MemPeak.Load()>>20,
		stats.Gets.Load(), stats.PrefetchIssued.Load(), stats.PrefetchSkipped.Load(), stats.PrefetchWasted.Load())
	if p := stats.MemPeak.Load(); p > budget {
		t.Errorf("budget accounting peaked at %d bytes, over the %d budget", p, budget)
	}
	// Margin: the garbage the GC target lets accumulate over the live heap,
	// plus 24 MiB for flights, goroutine bookkeeping and the GC running
	// behind ~1 GB/s of block allocation. Without the budget the readers
	// would hold 2 GiB of read-ahead.
	margin := (int64(base)+budget)*gcPercent/100 + 24<<20
	if grew > budget+margin {
		t.Errorf("heap grew by %d MiB, want <= budget %d MiB + margin %d MiB", grew>>20, budget>>20, margin>>20)
	}
	if stats.PrefetchSkipped.Load() == 0 {
		t.Error("no read-ahead was skipped: the test did not press on the budget")
	}
}

// TestBudgetTellsUse: the budget tells OnMemory every change of the bytes
// it holds, in order, so that a RAM tier sharing the memory follows it.
func TestBudgetTellsUse(t *testing.T) {
	var told []int64
	b := newBudget(100, new(Stats), func(used int64) { told = append(told, used) })
	if !b.tryAcquire(30) {
		t.Fatal("30 of 100 refused")
	}
	if err := b.acquire(context.Background(), 50, func() bool { return false }, 0); err != nil {
		t.Fatal(err)
	}
	if b.tryAcquire(40) {
		t.Fatal("40 more taken past the limit")
	}
	b.release(30)
	b.release(50)
	if want := []int64{30, 80, 50, 0}; !slices.Equal(told, want) {
		t.Fatalf("told %v, want %v", told, want)
	}
}

// TestStreamingReadersTightBudget: more sequential readers than the budget
// has blocks for, no cache tier. A block a reader is in the middle of is
// spared while that reader goes on, so each block is fetched about once;
// evicting it for another reader's block would fetch it again for each of
// its remaining pieces.
func TestStreamingReadersTightBudget(t *testing.T) {
	const bs, blocks, readers = 64 << 10, 8, 8
	st := newFakeStore()
	st.latency = func(string) time.Duration { return time.Millisecond }
	budget := int64(4 * (bs + blockOverhead))
	l := newTestLoader(t, st, nil, Options{BlockSize: bs, MemoryBudget: budget, ReadAhead: 2, StreamAt: -1})
	var objs []store.Object
	for i := range readers {
		objs = append(objs, st.add(fmt.Sprintf("s/%d", i), blocks*bs))
	}
	var wg sync.WaitGroup
	for _, obj := range objs {
		wg.Go(func() {
			got, err := readAll(context.Background(), l, obj, bs/4)
			if err != nil || !bytes.Equal(got, st.data(obj.Key)) {
				t.Errorf("%s: %d bytes, err %v", obj.Key, len(got), err)
			}
		})
	}
	wg.Wait()
	fetched, _ := st.fetched()
	total := int64(readers * blocks * bs)
	if fetched > total*5/4 {
		t.Fatalf("fetched %d bytes for %d: blocks were fetched again (%.2fx)", fetched, total, float64(fetched)/float64(total))
	}
	t.Logf("fetched %.2fx the data", float64(fetched)/float64(total))
}

// TestSlowStreamsTightBudget: as above, but each reader takes longer than
// readIdle between its reads (hundreds of readers on two cores do), so the
// blocks they are in the middle of are given up for other readers'. A
// reader that lost its block reads the rest of it by parts instead of
// fetching it whole again, each time, and readers waiting for room are
// served in turn: the store sends about the bytes read, and no reader
// waits much longer than the others.
func TestSlowStreamsTightBudget(t *testing.T) {
	const bs, blocks, readers, pieces = 256 << 10, 3, 16, 4
	st := newFakeStore()
	st.latency = func(string) time.Duration { return time.Millisecond }
	budget := int64(4 * (bs + blockOverhead))
	l := newTestLoader(t, st, nil, Options{BlockSize: bs, MemoryBudget: budget, ReadAhead: 2, StreamAt: -1})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for i := range readers {
		obj := st.add(fmt.Sprintf("s/%d", i), blocks*bs)
		wg.Go(func() {
			r := l.Open(obj)
			defer r.Close()
			want := st.data(obj.Key)
			buf := make([]byte, bs/pieces)
			for off := int64(0); off < obj.Size; off += int64(len(buf)) {
				start := time.Now()
				n, err := r.ReadAt(ctx, buf, off)
				storeMax(&slowest, int64(time.Since(start)))
				if err != nil || !bytes.Equal(buf[:n], want[off:off+int64(n)]) {
					t.Errorf("%s at %d: %d bytes, err %v", obj.Key, off, n, err)
					return
				}
				time.Sleep(readIdle + 10*time.Millisecond)
			}
		})
	}
	wg.Wait()
	fetched, gets := st.fetched()
	total := int64(readers * blocks * bs)
	t.Logf("fetched %.2fx the data in %d GETs; slowest read %v", float64(fetched)/float64(total), gets, time.Duration(slowest.Load()))
	if fetched > total*2 {
		t.Errorf("fetched %d bytes for %d (%.2fx): blocks given up were fetched whole again", fetched, total, float64(fetched)/float64(total))
	}
}

// TestBudgetServesInTurn: foreground takers waiting for room take it in the
// order they came. Woken all at once, whichever ran first took it, and
// with hundreds waiting some waited for minutes.
func TestBudgetServesInTurn(t *testing.T) {
	const takers = 6
	b := newBudget(10, new(Stats), nil)
	if !b.tryAcquire(10) {
		t.Fatal("10 of 10 refused")
	}
	got := make(chan int, takers)
	for i := range takers {
		go func() {
			if b.acquire(t.Context(), 10, func() bool { return false }, 0) == nil {
				got <- i
			} // else the test ended (its context)
		}()
		waitFor(t, "the taker in line", func() bool { // in line before the next
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.fgWait) == i+1
		})
	}
	for want := range takers {
		b.release(10)
		if g := <-got; g != want {
			t.Fatalf("taker %d took the room before taker %d", g, want)
		}
	}
}
