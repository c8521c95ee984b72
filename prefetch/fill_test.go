package prefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// indexedTier is a mapTier with the index lookup the disk tier has.
type indexedTier struct{ *mapTier }

func (t indexedTier) Contains(k cache.Key) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[k]
	return ok
}

// TestFill: every block lands in the tier with the right bytes, one GET per
// block even with two fillers at once, and a second fill costs no GET.
func TestFill(t *testing.T) {
	st := newFakeStore()
	tier := indexedTier{newMapTier()}
	stats := &Stats{}
	l := newTestLoader(t, st, tier, Options{BlockSize: 64 << 10, Stats: stats})
	sizes := []int64{0, 1, 5000, 64 << 10, 64<<10 + 1, 20 * 64 << 10} // empty, small, exactly a block, multi-block (> fillWindow blocks)
	var blocks int64
	for i, n := range sizes {
		o := st.add(fmt.Sprintf("f%d", i), n)
		blocks += l.numBlocks(o)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 2 {
		for i := range sizes {
			wg.Go(func() {
				o, _ := st.Stat(ctx, fmt.Sprintf("f%d", i))
				if err := l.Fill(ctx, o); err != nil {
					t.Errorf("fill %s: %v", o.Key, err)
				}
			})
		}
	}
	wg.Wait()
	if g := st.gets.Load(); g != blocks {
		t.Fatalf("%d GETs for %d blocks; want one each", g, blocks)
	}
	for i := range sizes {
		o, _ := st.Stat(ctx, fmt.Sprintf("f%d", i))
		var got []byte
		for b := range l.numBlocks(o) {
			part, ok := tier.Get(l.key(o, b))
			if !ok {
				t.Fatalf("%s block %d not in the tier", o.Key, b)
			}
			got = append(got, part...)
		}
		if !bytes.Equal(got, st.data(o.Key)) {
			t.Fatalf("%s: tier holds %d bytes that differ from the object's %d", o.Key, len(got), o.Size)
		}
	}
	hits := stats.CacheHits.Load()
	for i := range sizes {
		o, _ := st.Stat(ctx, fmt.Sprintf("f%d", i))
		if err := l.Fill(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if g := st.gets.Load(); g != blocks {
		t.Fatalf("a second fill made %d GETs; want 0", g-blocks)
	}
	if h := stats.CacheHits.Load() - hits; h != blocks {
		t.Fatalf("a second fill counted %d cache hits; want %d", h, blocks)
	}
}

// TestFillCancelled: a fill whose context has ended fails for an object
// the tier lacks, fetching nothing (warm counted such an object as filled
// and its progress showed an interrupted run as nearly complete), and
// still succeeds for one the tier holds whole.
func TestFillCancelled(t *testing.T) {
	st := newFakeStore()
	tier := indexedTier{newMapTier()}
	l := newTestLoader(t, st, tier, Options{BlockSize: 64 << 10})
	held, lacked := st.add("held", 3*64<<10), st.add("lacked", 3*64<<10)
	if err := l.Fill(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	gets := st.gets.Load()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Fill(ctx, lacked); !errors.Is(err, context.Canceled) {
		t.Fatalf("fill with an ended context of an object not cached: %v; want context.Canceled", err)
	}
	if err := l.Fill(ctx, held); err != nil {
		t.Fatalf("fill with an ended context of an object cached whole: %v", err)
	}
	if g := st.gets.Load() - gets; g != 0 {
		t.Fatalf("%d GETs after the context ended", g)
	}
}

// countingTier counts lookups.
type countingTier struct {
	*mapTier
	gets atomic.Int64
}

func (t *countingTier) Get(k cache.Key) ([]byte, bool) {
	t.gets.Add(1)
	return t.mapTier.Get(k)
}

// TestTierHitKeptForNextPieces: a cached block read in kernel-sized pieces
// costs one tier lookup, not one per piece (on disk each is a pread and a
// checksum of the whole block), and its budget comes back once read.
func TestTierHitKeptForNextPieces(t *testing.T) {
	st := newFakeStore()
	const size = 1 << 20 // one block, 8 kernel reads
	obj := st.add("big", size)
	tier := &countingTier{mapTier: newMapTier()}
	tier.Put(cache.Key{Object: obj.Key, ETag: obj.ETag}, st.data(obj.Key))
	stats := &Stats{}
	l := newTestLoader(t, st, tier, Options{BlockSize: 8 << 20, Stats: stats})
	got, err := readAll(context.Background(), l, obj, 128<<10)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, st.data(obj.Key)) {
		t.Fatal("wrong bytes")
	}
	if n := tier.gets.Load(); n != 1 {
		t.Fatalf("%d tier lookups for 8 pieces of one block; want 1", n)
	}
	if st.gets.Load() != 0 {
		t.Fatalf("%d GETs for a cached block", st.gets.Load())
	}
	if used := stats.MemInUse.Load(); used != 0 {
		t.Fatalf("%d bytes of budget still held after the block was read to its end", used)
	}
}

// TestForget: after Forget, the RAM tier holds none of the object's blocks
// and the disk tier never gets them; another object's blocks stay.
func TestForget(t *testing.T) {
	st := newFakeStore()
	disk, ram, _ := newDiskTiers(t, 64<<20, 64<<20)
	tier := cache.NewTiered(ram, disk)
	l := newTestLoader(t, st, tier, Options{BlockSize: 64 << 10})
	ctx := context.Background()
	gone, kept := st.add("gone", 5*64<<10+7), st.add("kept", 3*64<<10)
	for _, o := range []store.Object{gone, kept} {
		if err := l.Fill(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tier.Flush()
	l.Forget(gone)
	tier.Flush()
	tier.Drain(time.Now().Add(10 * time.Second))
	for i := range l.numBlocks(gone) {
		if tier.Contains(l.key(gone, i)) {
			t.Errorf("block %d of a forgotten object still cached", i)
		}
	}
	if l.Uncached(kept) != 0 {
		t.Error("the other object's blocks were dropped")
	}
	if n := l.Uncached(gone); n != gone.Size {
		t.Errorf("%d bytes of the forgotten object uncached, want all %d", n, gone.Size)
	}
	// Prefetch leaves a forgotten object alone (its copy holds it), until
	// a read fetches it through the loader again.
	if res := l.startPrefetch(gone, 0); res != pfPresent {
		t.Errorf("prefetch of a forgotten object: %v, want left alone", res)
	}
	r := l.Open(gone)
	defer r.Close()
	if _, err := r.ReadAt(ctx, make([]byte, 10), 0); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	_, skipped := l.copied[objVersion{gone.Key, gone.ETag}]
	l.mu.Unlock()
	if skipped {
		t.Error("prefetch still leaves alone an object read through the loader again")
	}
}

// TestFillTightBudget fills objects of many blocks under a budget of two
// blocks, less than Fill's window: a Fill that held its finished blocks
// while it waited for another one's budget would never end.
func TestFillTightBudget(t *testing.T) {
	const block = 64 << 10
	st := newFakeStore()
	st.latency = func(string) time.Duration { return time.Millisecond }
	tier := indexedTier{newMapTier()}
	l := newTestLoader(t, st, tier, Options{BlockSize: block, MemoryBudget: 2 * (block + blockOverhead)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		o := st.add(fmt.Sprintf("f%d", i), 16*block)
		wg.Go(func() {
			for range 5 { // cached after the first: later fills check the index only
				if err := l.Fill(ctx, o); err != nil {
					t.Errorf("fill %s: %v", o.Key, err)
					return
				}
			}
			for b := range l.numBlocks(o) {
				if _, ok := tier.Get(l.key(o, b)); !ok {
					t.Errorf("%s block %d not in the tier", o.Key, b)
				}
			}
		})
	}
	wg.Wait()
}

// TestReadyExpires: a block a reader left mid-way holds its budget (and
// so RAM cache room) for ReadyTTL, not for as long as nothing else needs
// the budget (an idle mount held half its RAM cache so).
func TestReadyExpires(t *testing.T) {
	st := newFakeStore()
	obj := st.add("f", 1<<20)
	stats := &Stats{}
	l := newTestLoader(t, st, newMapTier(), Options{BlockSize: 8 << 20, ReadyTTL: 200 * time.Millisecond, Stats: stats})
	r := l.Open(obj)
	if _, err := r.ReadAt(context.Background(), make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if stats.MemInUse.Load() == 0 {
		t.Fatal("the block left mid-way is not kept ready")
	}
	waitFor(t, "the ready block to expire", func() bool { return stats.MemInUse.Load() == 0 })
}
