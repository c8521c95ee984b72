package cache

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRAMBytes: the RAM tier's byte gauge follows what it holds, through
// admissions, replacements and evictions, counting what each block holds
// (its capacity: a block read from disk keeps its record's padding).
func TestRAMBytes(t *testing.T) {
	const block = 64 << 10
	stats := new(Stats)
	r, err := NewRAM(1<<20, stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	for i := range 8 {
		r.Put(testKey("a", int64(i)), bytes.Repeat([]byte{byte(i)}, block))
	}
	r.Flush()
	held := func() (n int64) {
		for i := range 64 {
			for _, obj := range []string{"a", "b"} {
				if b, ok := r.Get(testKey(obj, int64(i))); ok {
					n += int64(cap(b))
				}
			}
		}
		return n
	}
	if got, want := stats.RAMBytes.Load(), held(); got != want || got != 8*block {
		t.Fatalf("gauge %d after 8 blocks, holding %d; want %d", got, want, 8*block)
	}
	r.Put(testKey("a", 0), make([]byte, block/2, block-100)) // replaces block 0
	r.Flush()
	if got, want := stats.RAMBytes.Load(), held(); got != want {
		t.Fatalf("gauge %d after a replacement, holding %d", got, want)
	}
	for i := range 64 { // 4 MiB through a 1 MiB tier
		r.Put(testKey("b", int64(i)), make([]byte, block))
		r.Flush()
	}
	got, want := stats.RAMBytes.Load(), held()
	if got != want || got > 1<<20 {
		t.Fatalf("gauge %d after overflowing, holding %d (bound %d)", got, want, 1<<20)
	}
	if stats.RAMEvictions.Load()+stats.RAMDropped.Load() == 0 {
		t.Fatal("no block left the tier: the test did not overflow it")
	}
}

// TestRAMReserve: bytes reserved for memory held elsewhere come out of the
// tier's bound as new blocks arrive, never more than three quarters of it,
// and come back once released.
func TestRAMReserve(t *testing.T) {
	const block, bound = 64 << 10, 2 << 20
	stats := new(Stats)
	r, err := NewRAM(bound, stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	n := 0
	fill := func(blocks int) int64 {
		for range blocks {
			r.Put(testKey("a", int64(n)), make([]byte, block))
			r.Flush()
			n++
		}
		return stats.RAMBytes.Load()
	}
	if got := fill(64); got != bound {
		t.Fatalf("%d bytes held with nothing reserved, want the bound %d", got, bound)
	}
	for _, tc := range []struct {
		reserve, want int64
	}{
		{bound / 2, bound / 2},
		{bound, bound / 4}, // a quarter stays the tier's
		{0, bound},
	} {
		r.Reserve(tc.reserve)
		if got := fill(64); got != tc.want {
			t.Errorf("%d bytes held with %d reserved, want %d", got, tc.reserve, tc.want)
		}
	}
}

// TestRAMPutTwice: two Puts of one key before the cache applies the first
// (two readers' disk hits of one block, both promoted) keep one block: the
// tier still says it holds it, hands nothing to the disk tier and drops
// nothing.
func TestRAMPutTwice(t *testing.T) {
	stats := new(Stats)
	ram, given := victimRAM(t, stats)
	for i := range 50 {
		k := testKey(keyName(i), 0)
		ram.Put(k, blockFor(k, 64<<10))
		ram.Put(k, blockFor(k, 64<<10))
		ram.Flush()
		b, ok := ram.Get(k)
		if !ok || !ram.Contains(k) {
			t.Fatalf("block %d: served %v, contained %v", i, ok, ram.Contains(k))
		}
		checkExact(t, k, b, 64<<10)
	}
	if given.Load() != 0 || stats.RAMDropped.Load() != 0 {
		t.Fatalf("%d blocks given up, %d dropped; want none", given.Load(), stats.RAMDropped.Load())
	}
}

// TestRAMForgetRacesPut: a Forget racing a Put of the same block leaves
// the tier holding the block in ristretto (counted, evictable) or not at
// all; never in held alone, where it was served and drained to disk for
// ever, never evicted, and not counted in RAMBytes.
func TestRAMForgetRacesPut(t *testing.T) {
	ram, _ := victimRAM(t, new(Stats))
	heldAlone := 0
	for i := range 3000 {
		k := testKey(keyName(i), 0)
		ram.Put(k, blockFor(k, 4<<10))
		ram.Flush()
		var wg sync.WaitGroup
		wg.Go(func() { ram.Forget(k) })
		wg.Go(func() { ram.Put(k, blockFor(k, 4<<10)) })
		wg.Wait()
		ram.Flush()
		ram.mu.Lock()
		_, held := ram.held[k]
		ram.mu.Unlock()
		if _, stored := ram.c.Get(ramKey(k)); held && !stored {
			heldAlone++
		}
	}
	if heldAlone > 0 {
		t.Fatalf("%d of 3000 blocks held but not in ristretto after a Forget raced their Put", heldAlone)
	}
	ram.mu.Lock()
	defer ram.mu.Unlock()
	if len(ram.forgetting) != 0 {
		t.Fatalf("%d keys still marked as being forgotten", len(ram.forgetting))
	}
}

// TestRAMCloseWhileUsed: a Close while readers and writers use the tier
// (a file still open on a detached mount at exit) panics none of them, and
// afterwards Puts are dropped and Gets miss.
func TestRAMCloseWhileUsed(t *testing.T) {
	for round := range 50 {
		ram, err := NewRAM(1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		ram.setVictim(func(Key, []byte) {})
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := testKey(keyName(w*1000+i%1000), int64(round))
					ram.Put(k, blockFor(k, 4<<10))
					ram.Get(k)
					ram.Forget(k)
					ram.Flush()
				}
			})
		}
		time.Sleep(time.Millisecond)
		ram.Close()
		close(stop)
		wg.Wait()
		k := testKey("after", 0)
		ram.Put(k, blockFor(k, 4<<10))
		ram.Flush()
		if _, ok := ram.Get(k); ok {
			t.Fatal("a Put after Close is served")
		}
	}
}

// victimRAM is a 64 MiB RAM tier with a victim, as under a disk tier,
// closed at cleanup; the counter counts the blocks given to the victim.
func victimRAM(t *testing.T, stats *Stats) (*RAM, *atomic.Int64) {
	t.Helper()
	ram, err := NewRAM(64<<20, stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ram.Close)
	given := new(atomic.Int64)
	ram.setVictim(func(Key, []byte) { given.Add(1) })
	return ram, given
}
