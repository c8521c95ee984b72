package prefetch

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// prefault maps the pages of a fresh block buffer in one system call
// before the socket read fills it: touched one by one, each 4 KiB page
// costs a trap into the kernel (the zeroing and accounting of the pages
// remain either way; bench/RESULTS.md has the measurement). Best effort: a
// kernel without MADV_POPULATE_WRITE (before 5.14) faults the pages in as
// the read touches them.
func prefault(b []byte) {
	const page = 4096
	if len(b) < 16*page {
		return
	}
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (page - 1)) // to the first page boundary
	n := (len(b) - skip) &^ (page - 1)
	if n <= 0 {
		return
	}
	_ = unix.Madvise(b[skip:skip+n], unix.MADV_POPULATE_WRITE)
}
