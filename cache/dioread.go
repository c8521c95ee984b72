package cache

import (
	"math/bits"
	"sync"
	"unsafe"
)

// A disk hit read through the page cache costs a page-cache copy of the
// block beside the one the caller makes: fresh pages each time (on a VM
// that hands freed memory back to its host, the dearest part of a read),
// and pages that push the mount's own page cache out. An aligned record of
// a segment with a direct twin is read with direct I/O instead, into
// pooled page-aligned memory. A small record's raw bytes are copied out of
// it (Disk.Get); a large record is read into aligned memory of its own
// instead, and its raw bytes handed out where they lie, header and padding
// riding along (under a page and the header). Copying them out touched as
// many fresh pages as the read, cost a pass over the block, and the pool,
// emptied by every garbage collection, touched fresh pages of its own.

// largeAlloc is the size from which Go allocates an object on pages of its
// own (larger than its largest size class), which are page-aligned: the
// smallest record read into memory of its own.
const largeAlloc = 32<<10 + 1

// dioBufs pools page-aligned buffers for direct reads, by power-of-two size.
type dioBufs struct {
	classes [64]sync.Pool // of *[]byte, class c holding buffers of 1<<c bytes
}

// get returns n bytes of page-aligned memory.
func (p *dioBufs) get(n int64) []byte {
	c := bits.Len64(uint64(n - 1))
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		return (*v)[:n]
	}
	return alignedBuf(n, 1<<c)
}

// AlignedBuf returns n bytes of memory aligned for direct I/O (O_DIRECT),
// for readers of files outside the cache too.
func AlignedBuf(n int64) []byte { return alignedBuf(n, n) }

// alignedBuf returns n bytes of page-aligned memory with room for size.
func alignedBuf(n, size int64) []byte {
	if size >= largeAlloc {
		// No spare page is needed for alignment then (checked all the same).
		if b := make([]byte, size); uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(dioAlign-1) == 0 {
			return b[:n]
		}
	}
	b := make([]byte, size+dioAlign)
	skip := -uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (dioAlign - 1)
	return b[skip : int64(skip)+n : int64(skip)+size]
}

// put gives b, from get, back.
func (p *dioBufs) put(b []byte) {
	b = b[:cap(b)]
	p.classes[bits.Len64(uint64(len(b)-1))].Put(&b)
}

// readDirect reads the record at loc with direct I/O, into memory from
// d.dio (pooled: the caller gives it back once done with it) or, for a
// large record, into memory of its own. ok is false when direct I/O does
// not apply (no direct twin, a record not aligned) or the read failed or
// came back short: the caller then reads through the page cache, whose
// errors tell a segment cut short (corrupt) from a failing disk.
func (d *Disk) readDirect(loc recLoc) (buf []byte, pooled, ok bool) {
	if loc.seg.df == nil || loc.off%dioAlign != 0 || loc.n%dioAlign != 0 {
		return nil, false, false
	}
	pooled = loc.n < largeAlloc
	if pooled {
		buf = d.dio.get(loc.n)
	} else {
		buf = alignedBuf(loc.n, loc.n)
	}
	if n, err := loc.seg.df.ReadAt(buf, loc.off); err != nil || int64(n) != loc.n {
		if pooled {
			d.dio.put(buf)
		}
		return nil, false, false
	}
	return buf, pooled, true
}

// within reports whether a lies in b's memory (a raw record is a sub-slice
// of the record read; a decompressed one is not).
func within(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == 0
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa >= pb && pa < pb+uintptr(cap(b))
}
