package prefetch

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPrefault: filling a fresh 8 MiB buffer faults once per page, unless
// prefault mapped its pages first.
func TestPrefault(t *testing.T) {
	const size, pages = 8 << 20, 8 << 20 / 4096
	for _, tc := range []struct {
		name     string
		prefault bool
		min, max int64 // page faults while filling
	}{
		{"prefaulted", true, 0, 16},
		{"not", false, pages / 2, pages * 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread() // RUSAGE_THREAD counts this thread only
			defer runtime.UnlockOSThread()
			b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Munmap(b) })
			if tc.prefault {
				prefault(b[1:]) // an unaligned start is rounded up to the next page
			}
			var before, after unix.Rusage
			if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
				t.Fatal(err)
			}
			for i := 4096; i < len(b); i += 4096 {
				b[i] = 1
			}
			if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
				t.Fatal(err)
			}
			if got := after.Minflt - before.Minflt; got < tc.min || got > tc.max {
				t.Errorf("%d page faults filling %d pages, want %d-%d", got, pages-1, tc.min, tc.max)
			}
		})
	}
}
