package cache

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// ramFile keeps the RAM tier's bytes out of the process's own pages, in an
// anonymous memory file: the kernel copies a block in (pwrite) and out
// (pread) through its own mapping of the memory. Blocks kept on the heap
// cost a page fault per 4 KiB the first time the process touches them, and
// a RAM tier is memory touched once per block it ever held; on virtual
// machines with shadow page tables those faults cost several times the
// copy (bench/RESULTS.md, session 52). The file's memory is the process's
// all the same: the kernel charges it to the process's memory cgroup.
//
// Blocks go at increasing offsets, each at a page boundary, and a block the
// tier lets go has its pages punched out of the file, so the file holds
// what the tier holds. Offsets are never reused: 2^63 bytes outlast any
// mount.
type ramFile struct {
	f    *os.File
	held atomic.Int64 // bytes of the blocks written and not punched out

	mu   sync.Mutex
	next int64 // guarded by mu: where the next block goes
}

// ramPage is the granularity of the file's memory.
const ramPage = 4096

// pages returns n rounded up to whole pages: what a block of n bytes holds
// of the file's memory.
func pages(n int64) int64 { return (n + ramPage - 1) &^ (ramPage - 1) }

// write stores b at a new place in the file and returns its offset.
func (m *ramFile) write(b []byte) (int64, error) {
	m.mu.Lock()
	off := m.next
	m.next += pages(int64(len(b)))
	m.mu.Unlock()
	m.held.Add(pages(int64(len(b))))
	if _, err := m.f.WriteAt(b, off); err != nil {
		m.free(off, pages(int64(len(b)))) // what the short write stored
		return 0, fmt.Errorf("ram cache: store %d bytes: %w", len(b), err)
	}
	return off, nil
}

// free punches the n bytes at off (a block's pages) out of the file.
func (m *ramFile) free(off, n int64) error {
	m.held.Add(-n)
	return m.punch(off, n)
}

// read fills p from offset off.
func (m *ramFile) read(off int64, p []byte) error {
	if _, err := m.f.ReadAt(p, off); err != nil {
		return fmt.Errorf("ram cache: load %d bytes: %w", len(p), err)
	}
	return nil
}

func (m *ramFile) close() { m.f.Close() }
