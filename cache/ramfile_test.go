package cache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// newFileRAM returns a RAM tier in a memory file, skipping where the system
// has none.
func newFileRAM(t *testing.T, bound int64, stats *Stats) *RAM {
	t.Helper()
	r, err := NewRAM(bound, stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	if !r.PutCopies() {
		t.Skip("no anonymous memory files here: the tier keeps its blocks on the heap")
	}
	return r
}

// newRAMOf returns a RAM tier on the heap (NewHeapRAM) or as NewRAM makes
// it (in a memory file where the system has one), closed at the end of
// the test.
func newRAMOf(t *testing.T, heap bool, bound int64, stats *Stats) *RAM {
	t.Helper()
	newRAM := NewRAM
	if heap {
		newRAM = NewHeapRAM
	}
	r, err := newRAM(bound, stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// TestRAMFileGivesPagesBack: the memory file holds what the tier holds,
// not what went through it: blocks evicted, replaced or forgotten give
// their pages back, and Put copies (the caller may reuse its buffer).
func TestRAMFileGivesPagesBack(t *testing.T) {
	const block, bound = 100_000, 1 << 20
	stats := new(Stats)
	r := newFileRAM(t, bound, stats)
	buf := make([]byte, block)
	for i := range 64 { // 6.4 MB through a 1 MiB tier, from one buffer
		copy(buf, blockFor(testKey("a", int64(i)), block))
		r.Put(testKey("a", int64(i)), buf)
		r.Flush()
	}
	clear(buf)
	held := 0
	for i := range 64 {
		if b, ok := r.Get(testKey("a", int64(i))); ok {
			held++
			if !bytes.Equal(b, blockFor(testKey("a", int64(i)), block)) {
				t.Fatalf("block %d: wrong bytes", i)
			}
		}
	}
	if held == 0 || stats.RAMEvictions.Load()+stats.RAMDropped.Load() == 0 {
		t.Fatalf("%d blocks held, %d evicted or dropped: the test did not overflow the tier", held, stats.RAMEvictions.Load()+stats.RAMDropped.Load())
	}
	if got, want := r.FileBytes(), stats.RAMBytes.Load(); got != want || got != int64(held)*pages(block) {
		t.Fatalf("file holds %d bytes, the gauge says %d, %d blocks held (%d bytes each in pages)", got, want, held, pages(block))
	}
	for i := range 64 {
		r.Forget(testKey("a", int64(i)))
	}
	r.Flush()
	if got := r.FileBytes(); got != 0 {
		t.Fatalf("file holds %d bytes after every block was forgotten", got)
	}
	if n := stats.RAMFileErrors.Load(); n != 0 {
		t.Fatalf("%d file errors", n)
	}
}

// TestRAMFileCopiesOutWhileEvicting: Gets racing evictions (and the hand
// over of given-up blocks to a victim) either miss or return the block's
// own bytes, and the file ends holding what the gauge says. A punch under
// a copy is seldom caught here: TestRAMFileKeepsPagesWhileCopying pins
// that order down.
func TestRAMFileCopiesOutWhileEvicting(t *testing.T) {
	const block, blocks = 20_000, 400
	for _, victim := range []bool{false, true} {
		t.Run(fmt.Sprintf("victim=%v", victim), func(t *testing.T) {
			stats := new(Stats)
			r := newFileRAM(t, 256<<10, stats)
			var given sync.Map
			if victim {
				r.setVictim(func(k Key, b []byte) {
					if !bytes.Equal(b, blockFor(k, block)) {
						t.Errorf("victim got wrong bytes for block %d", k.Block)
					}
					given.Store(k.Block, true)
				})
			}
			var wg sync.WaitGroup
			var hits, misses [4]int
			for g := range 4 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for i := g; i < blocks; i += 4 {
						r.Put(testKey("a", int64(i)), blockFor(testKey("a", int64(i)), block))
						for range 8 {
							j := rng.IntN(i + 1)
							b, ok := r.Get(testKey("a", int64(j)))
							switch {
							case !ok:
								misses[g]++
							case !bytes.Equal(b, blockFor(testKey("a", int64(j)), block)):
								t.Errorf("block %d: wrong bytes", j)
								return
							default:
								hits[g]++
							}
						}
					}
				})
			}
			wg.Wait()
			r.Flush()
			if hits == [4]int{} || misses == [4]int{} {
				t.Fatalf("hits %v, misses %v: want both", hits, misses)
			}
			if got, want := r.FileBytes(), stats.RAMBytes.Load(); got != want {
				t.Fatalf("file holds %d bytes, the gauge says %d", got, want)
			}
			if victim {
				n := 0
				given.Range(func(any, any) bool { n++; return true })
				if n == 0 {
					t.Fatal("the victim got no block")
				}
			}
		})
	}
}

// TestRAMFileKeepsPagesWhileCopying: a block that leaves the tier while a
// copy out of it is under way keeps its pages until that copy ends, and
// gives them back then.
func TestRAMFileKeepsPagesWhileCopying(t *testing.T) {
	const block = 50_000
	r := newFileRAM(t, 1<<20, nil)
	k := testKey("a", 1)
	r.Put(k, blockFor(k, block))
	r.Flush()
	e := r.lookup(k)
	if e == nil || !e.pin() {
		t.Fatal("block not held")
	}
	r.Forget(k) // leaves while "copied"
	r.Flush()
	if _, ok := r.Get(k); ok {
		t.Fatal("Get found a forgotten block")
	}
	p := make([]byte, block)
	if err := r.file.read(e.off, p); err != nil || !bytes.Equal(p, blockFor(k, block)) {
		t.Fatalf("copy out under way read wrong bytes (err %v)", err)
	}
	if r.FileBytes() == 0 {
		t.Fatal("pages given back under a copy")
	}
	if !e.unpin() {
		t.Fatal("the last copy out of a block gone did not give its pages back")
	}
	r.punch(e)
	if got := r.FileBytes(); got != 0 {
		t.Fatalf("file holds %d bytes after the copy ended", got)
	}
	if e.pin() {
		t.Fatal("pinned a block gone")
	}
}

// TestRAMFileBoundedWhileLagging: ristretto applies Sets (and evicts for
// them) in a goroutine of its own; with a slow victim it lags behind a
// burst of Puts, and the file must not hold every block put meanwhile.
func TestRAMFileBoundedWhileLagging(t *testing.T) {
	const block, bound = 64 << 10, 1 << 20
	r := newFileRAM(t, bound, nil)
	r.setVictim(func(Key, []byte) { time.Sleep(2 * time.Millisecond) })
	var most int64
	for i := range 200 {
		k := testKey("a", int64(i))
		r.Put(k, blockFor(k, block))
		most = max(most, r.FileBytes())
	}
	if limit := int64(bound + bound/8 + block); most > limit {
		t.Fatalf("the file held %d bytes, over the bound and its slack (%d)", most, limit)
	}
}
