package cache

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var blockSizes = []int{128 << 10, 1 << 20}

func BenchmarkRAMHit(b *testing.B) {
	for _, n := range blockSizes {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			r, err := NewRAM(1<<30, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			keys := make([]Key, 64)
			for i := range keys {
				keys[i] = testKey(keyName(i), 1)
				r.Put(keys[i], blockFor(keys[i], n))
			}
			r.Flush()
			b.SetBytes(int64(n))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, ok := r.Get(keys[i%len(keys)]); !ok {
						b.Error("miss")
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkDiskHit reads blocks that sit in the page cache, so it measures
// the tier's own cost (open, read, checksum, decompression), not the device.
func BenchmarkDiskHit(b *testing.B) {
	for _, n := range blockSizes {
		for _, kind := range []struct {
			name  string
			block int64 // even: compressible text, odd: random
		}{{"raw", 1}, {"compressed", 0}} {
			b.Run(fmt.Sprintf("%dKiB/%s", n>>10, kind.name), func(b *testing.B) {
				d := openDisk(b, DiskOptions{Dir: b.TempDir(), MaxBytes: 1 << 30, Compress: true, MinFreeFraction: -1})
				keys := make([]Key, 64)
				for i := range keys {
					keys[i] = testKey(keyName(i), kind.block)
					d.Put(keys[i], blockFor(keys[i], n))
				}
				d.Flush()
				b.SetBytes(int64(n))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if _, ok := d.Get(keys[i%len(keys)]); !ok {
							b.Error("miss")
							return
						}
						i++
					}
				})
			})
		}
	}
}

// BenchmarkCompressDecision is the cost of deciding to store an
// incompressible block raw (bytes/s of block examined).
func BenchmarkCompressDecision(b *testing.B) {
	for _, n := range blockSizes {
		b.Run(fmt.Sprintf("random/%dKiB", n>>10), func(b *testing.B) {
			k := testKey("random", 1)
			data := blockFor(k, n)
			var c compressor
			b.SetBytes(int64(n))
			for b.Loop() {
				if c.worthCompressing(data) {
					b.Fatal("random data judged compressible")
				}
			}
		})
	}
}

// BenchmarkDiskOpen100k measures start-up on a directory of 100k blocks.
func BenchmarkDiskOpen100k(b *testing.B) {
	dir := b.TempDir()
	makeFakeCache(b, dir, 100_000)
	for b.Loop() {
		start := time.Now()
		d, err := NewDisk(DiskOptions{Dir: dir, MaxBytes: 1 << 50, MinFreeFraction: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "open-s")
		if n := d.stats.DiskEntries.Load(); n != 100_000 {
			b.Fatalf("loaded %d entries", n)
		}
		d.Close()
	}
}

// BenchmarkHitRatio reports the hit ratio from epoch 2 on, this policy vs
// LRU, for datasets 2x and 5x the cache read in a new shuffle each epoch.
func BenchmarkHitRatio(b *testing.B) {
	const cacheBlocks = 10_000
	for _, factor := range []int{2, 5} {
		b.Run(fmt.Sprintf("dataset%dx", factor), func(b *testing.B) {
			var ours, lru float64
			for b.Loop() {
				seed := rand.Uint64()
				o := runEpochs(&ourPolicy{p: NewPolicy(), capacity: cacheBlocks}, factor*cacheBlocks, 4, seed)
				l := runEpochs(newLRU(cacheBlocks), factor*cacheBlocks, 4, seed)
				ours = (o[1] + o[2] + o[3]) / 3
				lru = (l[1] + l[2] + l[3]) / 3
			}
			b.ReportMetric(ours, "policy-hit")
			b.ReportMetric(lru, "lru-hit")
			b.ReportMetric(1/float64(factor), "ideal-hit")
		})
	}
}
