package cache

import "math"

// Policy decides which blocks the disk tier keeps. It is pure bookkeeping
// (ids and sizes, no I/O) so it can be run on traces in tests.
//
// Why not LRU: a dataset larger than the cache, read once per epoch in a new
// shuffle, makes LRU evict each block just before its next use, so the hit
// ratio falls well below cache/dataset. This policy keeps a stable resident
// set instead ("first come stays"):
//
//   - while there is room, every block is admitted;
//   - when full, a new block may only evict a resident block that is stale:
//     not accessed for longer than a threshold; otherwise the new block is
//     rejected and the resident set is left alone.
//
// The threshold adapts to the workload: it is 3x the mean reuse distance seen
// on hits (measured in accesses; a hit right after the block's last access is
// no sample, see sameUse), and never below 2x the resident count. With
// shuffled epochs a resident block's reuse distance is at most two epochs and
// averages one, so no resident block ever becomes stale and each epoch hits
// on the same cache/dataset fraction. When the dataset changes, old blocks
// stop being hit, their distance grows past the threshold and new blocks
// rotate in. Before any hit has been seen the threshold is 8x the resident
// count (until 32 hits have been seen), so a first epoch up to 8x the cache
// keeps its first-come set. The disk tier saves the learned distance across
// restarts.
//
// Policy is not safe for concurrent use; the owner serialises calls.
type Policy struct {
	entries    map[uint64]*policyEntry
	head, tail *policyEntry // head: most recently accessed
	used       int64
	clock      uint64 // accesses seen
	meanGap    float64
	gapSamples uint64
	lastReuse  uint64 // clock at the last hit that was a reuse (a gap sample)
	// orphanBefore: blocks last accessed before this clock are evictable
	// whatever the threshold (markOrphans).
	orphanBefore uint64
}

// Entry is one resident block as the policy sees it.
type Entry struct {
	ID   uint64
	Size int64
}

type policyEntry struct {
	Entry
	last       uint64
	restored   bool // inserted by Restore: last is not a real access time
	prev, next *policyEntry
}

// gapWindow: the mean reuse distance is a running mean over roughly this many
// recent hits, so it follows a workload that changes.
const gapWindow = 256

// NewPolicy returns an empty policy.
func NewPolicy() *Policy {
	return &Policy{entries: make(map[uint64]*policyEntry)}
}

// Len returns the number of resident blocks.
func (p *Policy) Len() int { return len(p.entries) }

// Used returns the bytes of all resident blocks.
func (p *Policy) Used() int64 { return p.used }

// Contains reports whether id is resident, without counting an access.
func (p *Policy) Contains(id uint64) bool { _, ok := p.entries[id]; return ok }

// Access records one access to id (a lookup, hit or miss) and returns the
// block's size and whether it is resident.
func (p *Policy) Access(id uint64) (int64, bool) {
	p.clock++
	e, ok := p.entries[id]
	if !ok {
		return 0, false
	}
	// A block looked up again right away (several lookups for one read by
	// concurrent readers, a block read back just after it was written) is
	// still in the same use: such gaps would make the blocks that wait a
	// whole epoch for their next read look stale. Only gaps longer than
	// sameUse, or than the resident count in a cache smaller than that,
	// teach the reuse distance.
	if gap := p.clock - e.last; !e.restored && gap > min(uint64(len(p.entries)), sameUse) {
		p.gapSamples++
		p.meanGap += (float64(gap) - p.meanGap) / float64(min(p.gapSamples, gapWindow))
		p.lastReuse = p.clock
	} else if e.restored {
		p.lastReuse = p.clock // a block kept from the last run serves: no sample, but a reuse
	}
	e.last, e.restored = p.clock, false
	p.moveToFront(e)
	return e.Size, true
}

// sameUse: accesses within which a block looked up again is still in the
// same use (a few lookups by each of many concurrent readers).
const sameUse = 1024

// minGapSamples: the mean reuse distance is trusted only after this many
// hits; the first few can be tiny (a block read at the end of one epoch and
// the start of the next) and would make every other block look stale.
const minGapSamples = 32

// threshold is the number of accesses after which an untouched block is stale.
func (p *Policy) threshold() uint64 {
	n := uint64(len(p.entries))
	t := max(uint64(3*p.meanGap), 2*n)
	if p.gapSamples < minGapSamples {
		t = max(t, 8*max(n, 8))
	}
	return t
}

// markOrphans: a cache that has served reuses (its reuse distance is
// learned) and then sees none for idleWindow accesses no longer serves the
// job, which has moved to another dataset. The blocks untouched over that
// window are orphans: evictable at once, whatever the threshold, so that
// the new dataset rotates in after about one old epoch's worth of reads
// instead of three times the old reuse distance (six epochs and more of a
// smaller dataset, with no disk hit at all). The new dataset's own reuses then teach the
// threshold again without shielding the orphans. A dataset larger than
// the cache hits its resident share on every pass, which keeps this off.
func (p *Policy) markOrphans() {
	if idle := p.idleWindow(); p.gapSamples >= minGapSamples && p.clock-p.lastReuse > idle {
		p.orphanBefore = max(p.orphanBefore, p.clock-idle)
	}
}

// idleWindow: accesses with no reuse after which the resident set counts as
// unused: the learned reuse distance (about an epoch), and at least the
// resident count. While the job still reads the dataset, every
// resident block is read once an epoch: a run of misses is shorter than an
// epoch even when the order is the same each time (the resident blocks
// first, then the rest of a dataset larger than the cache).
func (p *Policy) idleWindow() uint64 {
	return max(uint64(len(p.entries)), uint64(p.meanGap), minIdleWindow)
}

// minIdleWindow keeps a cache of a few blocks from taking a short run
// without hits for a job that left.
const minIdleWindow = 64

// ReuseDistance returns the learned mean reuse distance (in accesses) and
// the number of hits it is based on, to be saved across restarts.
func (p *Policy) ReuseDistance() (mean float64, samples uint64) {
	return p.meanGap, p.gapSamples
}

// SetReuseDistance restores what ReuseDistance returned in an earlier run,
// so that a restarted cache protects its blocks as before.
func (p *Policy) SetReuseDistance(mean float64, samples uint64) {
	if mean >= 0 && !math.IsInf(mean, 0) && !math.IsNaN(mean) {
		p.meanGap, p.gapSamples = mean, samples
	}
}

// Admit decides whether a new block id of size bytes may become resident with
// the resident total kept within limit. It returns the blocks evicted to make
// room; they may be non-empty even when the block is rejected (they were stale).
// Admitting a resident id is a no-op that returns true.
func (p *Policy) Admit(id uint64, size, limit int64) (bool, []Entry) {
	if _, ok := p.entries[id]; ok {
		return true, nil
	}
	if size > limit {
		return false, nil
	}
	var victims []Entry
	th := p.threshold()
	p.markOrphans()
	for p.used+size > limit {
		v := p.tail
		if v == nil || p.clock-v.last <= th && v.last >= p.orphanBefore {
			return false, victims
		}
		p.unlink(v)
		victims = append(victims, v.Entry)
	}
	e := &policyEntry{Entry: Entry{ID: id, Size: size}, last: p.clock}
	p.link(e)
	return true, victims
}

// Restore inserts id as resident without an admission decision, as the
// oldest entry (used when reloading a cache directory). It returns false if
// id was already resident.
func (p *Policy) Restore(id uint64, size int64) bool {
	if _, ok := p.entries[id]; ok {
		return false
	}
	e := &policyEntry{Entry: Entry{ID: id, Size: size}, last: p.clock, restored: true}
	p.entries[id] = e
	p.used += size
	e.prev = p.tail
	if p.tail != nil {
		p.tail.next = e
	} else {
		p.head = e
	}
	p.tail = e
	return true
}

// Remove drops id (a corrupt or vanished block) and reports its entry.
func (p *Policy) Remove(id uint64) (Entry, bool) {
	e, ok := p.entries[id]
	if !ok {
		return Entry{}, false
	}
	p.unlink(e)
	return e.Entry, true
}

// Trim evicts the least recently accessed blocks until at most limit bytes
// are resident, regardless of staleness (the bound shrank).
func (p *Policy) Trim(limit int64) []Entry {
	var victims []Entry
	for p.used > limit && p.tail != nil {
		v := p.tail
		p.unlink(v)
		victims = append(victims, v.Entry)
	}
	return victims
}

func (p *Policy) link(e *policyEntry) {
	p.entries[e.ID] = e
	p.used += e.Size
	e.prev, e.next = nil, p.head
	if p.head != nil {
		p.head.prev = e
	} else {
		p.tail = e
	}
	p.head = e
}

func (p *Policy) unlink(e *policyEntry) {
	delete(p.entries, e.ID)
	p.used -= e.Size
	p.detach(e)
}

func (p *Policy) detach(e *policyEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		p.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		p.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (p *Policy) moveToFront(e *policyEntry) {
	if p.head == e {
		return
	}
	p.detach(e)
	e.next = p.head
	if p.head != nil {
		p.head.prev = e
	} else {
		p.tail = e
	}
	p.head = e
}
