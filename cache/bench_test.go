package cache

import (
	"fmt"
	"math/rand/v2"
	"syscall"
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

// BenchmarkDiskOpen100k measures start-up on a cache of 100k blocks of
// 110 KB (11 GB, in 256 MiB segments; the payloads are holes in sparse
// files, as open reads record headers only). The headers sit in the page
// cache after the first run, so this is the CPU cost of a warm open.
func BenchmarkDiskOpen100k(b *testing.B) {
	dir := b.TempDir()
	makeFakeCache(b, dir, 100_000, 110<<10, maxSegment, true)
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

// BenchmarkDiskPut measures the write path: Puts of 110 KB blocks (the mean
// image of a training set), written by the default writers, with compression
// on. "raw" blocks are random (JPEG-like: stored raw after the sampling
// decision), "compressible" blocks are text. It reports blocks/s and the
// process CPU time per block (user + system, all goroutines), which is what
// a cold epoch pays on a small machine, for both layouts: direct I/O and
// through the page cache. The page cache pages here are recycled (each run's
// segments are deleted), so "buffered" is the page cache at its cheapest: a
// cache that keeps its segments grows it with fresh pages, which cost a VM
// far more (bench/RESULTS.md, session 4).
func BenchmarkDiskPut(b *testing.B) {
	const size = 110 << 10
	for _, layout := range []struct {
		name     string
		buffered bool
	}{{"direct", false}, {"buffered", true}} {
		for _, kind := range []struct {
			name  string
			block int64 // even: compressible text, odd: random
		}{{"raw", 1}, {"compressible", 0}} {
			b.Run(layout.name+"/"+kind.name, func(b *testing.B) {
				bufs := make([][]byte, 16)
				for i := range bufs {
					bufs[i] = blockFor(testKey(keyName(i), kind.block), size)
				}
				stats := new(Stats)
				d := openDisk(b, DiskOptions{Dir: b.TempDir(), MaxBytes: 1 << 40, Compress: true, QueueLen: 1024, MinFreeFraction: -1, Stats: stats, Buffered: layout.buffered})
				if !layout.buffered && d.align == 0 {
					b.Skip("no direct I/O on the file system of b.TempDir()")
				}
				cpu0 := cpuTime()
				start := time.Now()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					d.Put(Key{Object: keyName(i), ETag: "bench", Block: kind.block}, bufs[i%len(bufs)])
					if i%512 == 511 {
						d.Flush()
					}
				}
				d.Flush()
				b.StopTimer()
				wall, cpu := time.Since(start), cpuTime()-cpu0
				if dropped := stats.DiskDropped.Load(); dropped > 0 {
					b.Fatalf("%d blocks dropped", dropped)
				}
				b.SetBytes(size)
				b.ReportMetric(float64(b.N)/wall.Seconds(), "blocks/s")
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/block")
			})
		}
	}
}

// cpuTime returns the user + system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
