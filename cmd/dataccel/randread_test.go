package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
)

// Readers at random offsets of large files through a real mount: with the
// blocks on disk, each read reads its chunks from disk, not whole blocks,
// and fetches nothing; with a RAM cache far smaller than the files and no
// disk, a block fetched whole once and lost is fetched in part after.
func TestRandomReadsThroughMount(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "r/", 3, 8<<20)
	for _, tc := range []struct {
		name  string
		args  []string
		warm  bool
		check func(t *testing.T, before, after map[string]int64, reads int64)
	}{
		{"disk cache", []string{"--cache-dir", t.TempDir(), "--ram-cache-size", "0"}, true,
			func(t *testing.T, before, after map[string]int64, reads int64) {
				parts := after["cache_disk_part_hits_total"] - before["cache_disk_part_hits_total"]
				whole := after["cache_disk_hits_total"] - before["cache_disk_hits_total"]
				gets := after["loader_gets_total"] - before["loader_gets_total"]
				if parts < reads*9/10 || whole > reads/10 || gets != 0 {
					t.Fatalf("%d reads: %d part reads and %d whole blocks from disk, %d GETs; want parts, no GET", reads, parts, whole, gets)
				}
			}},
		{"small RAM cache", []string{"--ram-cache-size", "3MiB"}, false,
			func(t *testing.T, before, after map[string]int64, reads int64) {
				parts := after["loader_part_gets_total"] - before["loader_part_gets_total"]
				if parts < reads/4 {
					t.Fatalf("%d reads: %d part GETs, want the lost blocks fetched in part", reads, parts)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--endpoint", srv.Endpoint, "--block-size", "1MiB"}, tc.args...)
			m := startMount(t, t.TempDir(), append(args, "s3://"+st.Bucket())...)
			buf := cache.AlignedBuf(directReadBuf)
			if tc.warm {
				for rel, b := range files {
					if n, err := readWhole(filepath.Join(m.dir, "r", rel), true, buf); err != nil || n != int64(len(b)) {
						t.Fatalf("read %s: %d bytes, %v", rel, n, err)
					}
				}
			}
			time.Sleep(2 * statsFreshness)
			before := m.stats(t)
			// O_DIRECT: each read reaches the mount, at 4 KiB-aligned offsets.
			rng := rand.New(rand.NewPCG(5, 6))
			var reads int64
			for rel, b := range files {
				f, err := os.OpenFile(filepath.Join(m.dir, "r", rel), os.O_RDONLY|syscall.O_DIRECT, 0)
				if err != nil {
					t.Fatal(err)
				}
				for range 100 {
					p := buf[:4096*(1+rng.IntN(8))]
					off := 4096 * (1 + rng.Int64N(int64(len(b)-len(p))/4096))
					n, err := f.ReadAt(p, off)
					if err != nil || !bytes.Equal(p[:n], b[off:off+int64(n)]) || n != len(p) {
						t.Fatalf("%s: pread of %d at %d: %d bytes, %v, or wrong bytes", rel, len(p), off, n, err)
					}
					reads++
				}
				f.Close()
			}
			time.Sleep(2 * statsFreshness)
			tc.check(t, before, m.stats(t), reads)
		})
	}
}
