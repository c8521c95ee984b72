package prefetch

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/dataccel/dataccel/cache"
)

// handedSlots bounds what handedSet remembers: 8 bytes a slot, 2 MiB in
// all. A block whose slot was taken by another is forgotten, which only
// brings back a push the kernel did not need.
const handedSlots = 1 << 18

// handedSet remembers which blocks this mount handed to the kernel's page
// cache (pushed, or served to a FUSE read, which the kernel keeps), and how
// many bytes it handed over since. A prefetch that finds a block in the
// disk tier pushes it to the page cache so that the reader finds it there
// (after `dataccel warm`, or once the kernel dropped it); when the kernel
// got that block from this mount less than keep bytes ago it most likely
// still holds it, and reading it back from disk to push it again would only
// cost the reader CPU and page locks. A dataset larger than the RAM tier
// would pay that in every announced epoch after the first.
//
// It is safe for concurrent use without a lock: each slot is one atomic
// word, a 16-bit tag of the key's hash (low bit set, so that a used slot is
// never zero) above the hand-over position in 4 KiB units.
type handedSet struct {
	keep  int64        // bytes the page cache is expected to keep; 0: remember nothing
	seed  maphash.Seed // per set
	total atomic.Int64 // bytes handed over so far
	slots []atomic.Uint64
}

const handedPosBits = 48

func newHandedSet(keep int64) *handedSet {
	s := &handedSet{keep: keep, seed: maphash.MakeSeed()}
	if keep > 0 {
		s.slots = make([]atomic.Uint64, handedSlots)
	}
	return s
}

func (s *handedSet) slot(k cache.Key) (*atomic.Uint64, uint64) {
	h := maphash.Comparable(s.seed, k)
	return &s.slots[h%handedSlots], (h>>handedPosBits | 1) << handedPosBits
}

// mark records that n bytes of block k were handed to the kernel now.
func (s *handedSet) mark(k cache.Key, n int64) {
	if s.slots == nil {
		return
	}
	pos := uint64(s.total.Add(n)) >> 12
	sl, tag := s.slot(k)
	sl.Store(tag | pos&(1<<handedPosBits-1))
}

// has reports whether block k was handed to the kernel less than keep bytes
// ago.
func (s *handedSet) has(k cache.Key) bool {
	if s.slots == nil {
		return false
	}
	sl, tag := s.slot(k)
	v := sl.Load()
	if v&^(1<<handedPosBits-1) != tag {
		return false
	}
	since := uint64(s.total.Load())>>12 - v&(1<<handedPosBits-1)
	return int64(since) < s.keep>>12
}
