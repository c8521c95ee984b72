package cache

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"
)

// tierCase builds one Tier implementation for the conformance suite; sync
// waits for buffered Puts.
type tierCase struct {
	name string
	new  func(t *testing.T) (tier Tier, sync func())
}

func newRAMTier(t *testing.T) (Tier, func()) {
	r, err := NewRAM(64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, r.Flush
}

func newDiskTier(t *testing.T) (Tier, func()) {
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, Compress: true, QueueLen: 1024, MinFreeFraction: -1})
	return d, d.Flush
}

func newBufferedDiskTier(t *testing.T) (Tier, func()) {
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, Compress: true, QueueLen: 1024, MinFreeFraction: -1, Buffered: true})
	return d, d.Flush
}

func tierCases() []tierCase {
	return []tierCase{
		{"RAM", newRAMTier},
		{"RAMHeap", func(t *testing.T) (Tier, func()) {
			r, err := NewHeapRAM(64<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			return r, r.Flush
		}},
		{"Disk", newDiskTier}, // direct I/O where t.TempDir() allows it
		{"DiskBuffered", newBufferedDiskTier},
		{"Tiered", func(t *testing.T) (Tier, func()) {
			r, _ := newRAMTier(t)
			d, _ := newDiskTier(t)
			tt := NewTiered(r, d)
			return tt, tt.Flush
		}},
		{"TieredDiskOnly", func(t *testing.T) (Tier, func()) {
			d, _ := newDiskTier(t)
			tt := NewTiered(nil, d)
			return tt, tt.Flush
		}},
		{"TieredRAMOnly", func(t *testing.T) (Tier, func()) {
			r, _ := newRAMTier(t)
			tt := NewTiered(r, (*Disk)(nil))
			return tt, tt.Flush
		}},
	}
}

func TestTierConformance(t *testing.T) {
	for _, tc := range tierCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("Miss", func(t *testing.T) {
				tier, _ := tc.new(t)
				if b, ok := tier.Get(testKey("absent", 0)); ok {
					t.Fatalf("Get of absent key hit with %d bytes", len(b))
				}
			})
			t.Run("PutGet", func(t *testing.T) {
				tier, flush := tc.new(t)
				sizes := []int{1, 100, 4 << 10, 100 << 10, 1 << 20}
				for i, n := range sizes {
					k := testKey(keyName(i), int64(i))
					tier.Put(k, blockFor(k, n))
				}
				flush()
				for i, n := range sizes {
					k := testKey(keyName(i), int64(i))
					b, ok := tier.Get(k)
					if !ok {
						t.Fatalf("Get(%v) missed after Put", k)
					}
					checkExact(t, k, b, n)
				}
			})
			t.Run("OverwriteIdempotent", func(t *testing.T) {
				tier, flush := tc.new(t)
				k := testKey("same", 3)
				tier.Put(k, blockFor(k, 5000))
				flush()
				tier.Put(k, blockFor(k, 5000))
				flush()
				b, ok := tier.Get(k)
				if !ok {
					t.Fatal("miss after two Puts")
				}
				checkExact(t, k, b, 5000)
			})
			t.Run("ETagIsPartOfKey", func(t *testing.T) {
				tier, flush := tc.new(t)
				k1 := Key{Object: "obj", ETag: "v1", Block: 0}
				k2 := Key{Object: "obj", ETag: "v2", Block: 0}
				tier.Put(k1, bytes.Repeat([]byte{1}, 8000))
				tier.Put(k2, bytes.Repeat([]byte{2}, 8000))
				flush()
				for _, c := range []struct {
					k    Key
					want byte
				}{{k1, 1}, {k2, 2}} {
					b, ok := tier.Get(c.k)
					if !ok || len(b) != 8000 || b[0] != c.want || b[7999] != c.want {
						t.Fatalf("Get(%v) = %d bytes ok=%v, want 8000 bytes of %d", c.k, len(b), ok, c.want)
					}
				}
				if _, ok := tier.Get(Key{Object: "obj", ETag: "v3"}); ok {
					t.Fatal("unknown ETag hit")
				}
				if _, ok := tier.Get(Key{Object: "obj", ETag: "v1", Block: 1}); ok {
					t.Fatal("unknown block hit")
				}
			})
			t.Run("Concurrent", func(t *testing.T) {
				tier, flush := tc.new(t)
				const writers, readers, keys = 4, 4, 64
				var wg sync.WaitGroup
				errs := make(chan string, readers)
				for w := 0; w < writers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < keys; i += writers {
							k := testKey(keyName(i), int64(i))
							tier.Put(k, blockFor(k, sizeFor(k)))
						}
					}()
				}
				for r := 0; r < readers; r++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(r), 1))
						for j := 0; j < 200; j++ {
							i := rng.IntN(keys)
							k := testKey(keyName(i), int64(i))
							if b, ok := tier.Get(k); ok && !bytes.Equal(b, blockFor(k, sizeFor(k))) {
								errs <- k.Object
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for o := range errs {
					t.Errorf("wrong bytes served for %s", o)
				}
				flush()
				hits := 0
				for i := 0; i < keys; i++ {
					k := testKey(keyName(i), int64(i))
					if b, ok := tier.Get(k); ok {
						hits++
						checkExact(t, k, b, sizeFor(k))
					}
				}
				if hits < keys*9/10 {
					t.Fatalf("only %d of %d blocks served after concurrent Puts", hits, keys)
				}
			})
		})
	}
}
