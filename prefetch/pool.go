package prefetch

import (
	"math/bits"
	"sync"
)

// bufPool lends the buffers that fetches receive bodies into, and takes
// each back once no one holds its block (the flight's last reference),
// to lend again. A socket read into memory new to the process costs a
// page fault per 4 KiB, several times the copy on virtual machines with
// shadow page tables; a read into memory the process touched lately costs
// the copy (bench/RESULTS.md, sessions 52 and 53). The pool is small on
// purpose: memory touched lately is what stays cheap.
//
// A lent buffer must not outlive its block: the cache tier copies a block
// it keeps (cache.RAM in a memory file) and a read copies its bytes out
// before it lets the block go (reader.piece). The loader lends only when
// its tier copies (or it has none).
//
// Buffers come in size classes, a quarter of a power of two apart; a get
// takes the smallest free buffer that holds its body, of whatever class:
// a larger buffer lent for a while costs less than memory made anew. The
// bytes of the buffers the pool made (lent and free) stay within max: a get
// with no room drops free buffers of other classes first, and with none
// left to drop the block gets a buffer of its own, not lent.
type bufPool struct {
	max   int64
	stats *Stats
	// poison fills each buffer given back, so that a holder reading it
	// after its release sees garbage (tests).
	poison bool

	mu   sync.Mutex
	free [][][]byte // guarded by mu: free buffers by class
	size int64      // guarded by mu: bytes of the buffers counted (lent and free)
}

// minPooled: bodies smaller than a page take a buffer of their own (the
// runtime's small-object pages are few and hot anyway).
const minPooled = 4 << 10

// newBufPool returns a pool of at most max bytes; nil if max leaves no
// room for a block of blockSize.
func newBufPool(max, blockSize int64, stats *Stats) *bufPool {
	if blockSize < minPooled || max < poolClassSize(blockSize) {
		return nil
	}
	return &bufPool{max: max, stats: stats, free: make([][][]byte, poolClass(blockSize)+1)}
}

// poolClass is the class of a body of n bytes (n >= minPooled).
func poolClass(n int64) int {
	e := bits.Len64(uint64(n-1)) - 1 // 2^e < n <= 2^(e+1)
	q := int((uint64(n-1) >> (e - 2)) & 3)
	return (e-bits.Len64(minPooled-1)+1)*4 + q
}

// poolClassSize is the buffer size of the class of n.
func poolClassSize(n int64) int64 {
	e := bits.Len64(uint64(n-1)) - 1
	step := int64(1) << (e - 2)
	return (n + step - 1) / step * step
}

// get returns a buffer of n bytes, and whether it is lent (to be given
// back with put).
func (p *bufPool) get(n int64) ([]byte, bool) {
	if p == nil || n < minPooled || poolClass(n) >= len(p.free) {
		return make([]byte, n), false
	}
	c := poolClass(n)
	p.mu.Lock()
	for i := c; i < len(p.free); i++ {
		if k := len(p.free[i]); k > 0 {
			b := p.free[i][k-1]
			p.free[i][k-1] = nil
			p.free[i] = p.free[i][:k-1]
			p.mu.Unlock()
			p.stats.PoolReused.Add(1)
			return b[:n], true
		}
	}
	size := poolClassSize(n)
	for i := len(p.free) - 1; i >= 0 && p.size+size > p.max; i-- {
		for len(p.free[i]) > 0 && p.size+size > p.max {
			k := len(p.free[i]) - 1
			b := p.free[i][k]
			p.free[i][k] = nil
			p.free[i] = p.free[i][:k]
			p.size -= int64(cap(b))
		}
	}
	if p.size+size > p.max {
		p.mu.Unlock()
		p.stats.PoolMissed.Add(1)
		return make([]byte, n), false
	}
	p.size += size
	p.mu.Unlock()
	p.stats.PoolMade.Add(1)
	b := make([]byte, size)
	prefault(b)
	return b[:n], true
}

// put takes back a buffer get lent. The caller must hold no slice of it.
func (p *bufPool) put(b []byte) {
	b = b[:cap(b)]
	if p.poison {
		for i := range b {
			b[i] = 0xdb
		}
	}
	c := poolClass(int64(cap(b)))
	p.mu.Lock()
	p.free[c] = append(p.free[c], b)
	p.mu.Unlock()
}
