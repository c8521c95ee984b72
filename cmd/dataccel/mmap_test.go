package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMmapAndSendfileThroughMount: training code does not only read(2).
// numpy and torch map files (np.load(mmap_mode="r"), safetensors), and
// copies go through sendfile or copy_file_range. Through a real mount,
// cold and warm, files of several blocks, read from the cache tiers or from
// local copies: every way gives the object's bytes.
func TestMmapAndSendfileThroughMount(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "mm/", 6, 2<<20) // 1-3 MiB: several 256 KiB blocks each
	src := "s3://" + st.Bucket() + "/mm"
	base := []string{"--endpoint", srv.Endpoint, "--block-size", "256KiB"}
	for _, tc := range []struct {
		name    string
		flags   []string
		counter string // a counter that must count every file: the way the bytes came
	}{
		{"RAM cache", nil, ""},
		{"disk cache alone", []string{"--ram-cache-size", "0", "--cache-dir", t.TempDir()}, "cache_disk_misses_total"},
		{"local copies", []string{"--cache-dir", t.TempDir(), "--passthrough-min-size", "1MiB"}, "local_copies_made_total"},
		{"no prefetch", []string{"--prefetch", "off", "--prefetch-push=false"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A mount in a process of its own, as users run it: a page
			// fault on its own mount would stop this process's garbage
			// collector (a goroutine in a fault cannot be preempted) while
			// the READ it waits for needs a goroutine to run.
			dir := t.TempDir()
			mountProcess(t, append(append([]string{src}, base...), append(tc.flags, dir)...)...)
			for pass := range 2 { // cold, then from the page cache and the tiers
				for rel, want := range files {
					path := filepath.Join(dir, rel)
					if err := checkMapped(path, want, uint64(pass)); err != nil {
						t.Fatalf("pass %d: %v", pass, err)
					}
					if err := checkSendfile(path, want); err != nil {
						t.Fatalf("pass %d: %v", pass, err)
					}
				}
			}
			if tc.counter == "" {
				return
			}
			time.Sleep(2 * statsFreshness) // the counters are a snapshot
			if got := readMountStats(t, dir)[tc.counter]; got < int64(len(files)) {
				t.Errorf("%s = %d after reading %d files: not read the way this case tests", tc.counter, got, len(files))
			}
		})
	}
}

// checkMapped maps path read-only and compares random ranges, then the
// whole of it, with want.
func checkMapped(path string, want []byte, seed uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, len(want), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(b)
	r := rand.New(rand.NewPCG(seed, uint64(len(want))))
	for range 32 { // out of order first: page faults in the middle of blocks
		off := r.IntN(len(want))
		end := min(len(want), off+1+r.IntN(64<<10))
		if !bytes.Equal(b[off:end], want[off:end]) {
			return fmt.Errorf("mmap %s: bytes %d-%d differ", path, off, end)
		}
	}
	if !bytes.Equal(b, want) {
		return fmt.Errorf("mmap %s: the mapped file differs", path)
	}
	return nil
}

// checkSendfile copies path into a temporary file with sendfile(2) and
// compares the copy with want.
func checkSendfile(path string, want []byte) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.CreateTemp("", "sendfile")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	var off int64
	for {
		n, err := unix.Sendfile(int(out.Fd()), int(in.Fd()), &off, 1<<20)
		if err != nil {
			return fmt.Errorf("sendfile %s at %d: %w", path, off, err)
		}
		if n == 0 {
			break
		}
	}
	got, err := os.ReadFile(out.Name())
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("sendfile %s: %d bytes copied, want %d, or other bytes", path, len(got), len(want))
	}
	return nil
}
