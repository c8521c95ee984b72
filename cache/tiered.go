package cache

import "time"

// Tiered looks a block up in RAM, then on disk, and promotes disk hits to
// a RAM tier on the heap (see Get). Either tier may be nil. It does not own
// the tiers: the caller closes them, after Drain.
//
// Over a RAM tier, the disk tier takes the blocks RAM gives up (a victim
// cache), not every block: a dataset that fits in RAM costs no disk write
// while it is read, and Drain saves what RAM holds when the mount ends, so
// the next mount still starts warm. A block promoted from disk is not
// written again.
type Tiered struct {
	ram, disk Tier
	victimRAM *RAM // the RAM tier when it hands its given-up blocks to disk
}

// toucher is implemented by tiers whose eviction policy wants to hear about
// accesses served by a faster tier (the disk policy must see RAM hits, or
// blocks that are hot in RAM would look unused on disk).
type toucher interface{ Touch(Key) }

// flusher is implemented by tiers with buffered writes.
type flusher interface{ Flush() }

// NewTiered returns a tiered cache over ram and disk; pass nil for a tier
// that is absent.
func NewTiered(ram, disk Tier) *Tiered {
	t := &Tiered{ram: nilTier(ram), disk: nilTier(disk)}
	if r, ok := t.ram.(*RAM); ok && t.disk != nil {
		r.setVictim(t.toDisk)
		t.victimRAM = r
	}
	return t
}

// onDisk reports whether the disk tier holds k (a block promoted from
// disk), from its index.
func (t *Tiered) onDisk(k Key) bool {
	c, ok := t.disk.(container)
	return ok && c.Contains(k)
}

// toDisk writes a block RAM gave up, unless the disk tier has it already:
// the check saves a slot in its queue.
func (t *Tiered) toDisk(k Key, b []byte) {
	if !t.onDisk(k) {
		t.disk.Put(k, b)
	}
}

// waiter is a disk tier that can wait for room in its write queue, and
// count the blocks it wrote.
type waiter interface {
	putWait(k Key, b []byte, deadline time.Time) bool
	flushUntil(deadline time.Time) bool
	written() int64
}

// Drain writes to the disk tier the blocks that only RAM holds, waiting
// for the writes, until deadline. It reports how many blocks it saved and
// how many it left (deadline passed, disk tier closed, failing or full: a
// block queued is saved only once written). Call it when the mount ends,
// before closing the tiers, with no other writes going on.
func (t *Tiered) Drain(deadline time.Time) (saved, left int) {
	w, ok := t.disk.(waiter)
	if t.victimRAM == nil || !ok {
		return 0, 0
	}
	before, queued := w.written(), 0
	t.victimRAM.drain(func(k Key, b []byte) {
		switch {
		case t.onDisk(k):
		case time.Now().After(deadline) || !w.putWait(k, b, deadline):
			left++
		default:
			queued++
		}
	})
	w.flushUntil(deadline) // what a slow disk has not written by then is left to Close
	saved = min(int(w.written()-before), queued)
	return saved, left + queued - saved
}

// nilTier turns a typed nil pointer inside an interface into a nil interface.
func nilTier(t Tier) Tier {
	switch v := t.(type) {
	case *RAM:
		if v == nil {
			return nil
		}
	case *Disk:
		if v == nil {
			return nil
		}
	case *Tiered:
		if v == nil {
			return nil
		}
	}
	return t
}

// Get returns the block for k from the fastest tier that has it. A disk
// hit is promoted to a RAM tier on the heap, which keeps the slice at no
// cost, but not to one in a memory file: that would be a copy of every
// block the reader reads from disk, which the kernel's page cache then
// holds too, and a block evicted from RAM for it (measured in
// bench/RESULTS.md, session 53).
func (t *Tiered) Get(k Key) ([]byte, bool) {
	b, inRAM, ok := t.Peek(k)
	if t.ramCopies() {
		return b, ok
	}
	if ok && !inRAM && t.ram != nil {
		// Both tiers treat blocks as immutable, so sharing b is safe.
		t.ram.Put(k, b)
	}
	return b, ok
}

// Peek returns the block for k like Get, without promoting a disk hit to
// RAM; inRAM says which tier answered. Prefetch that hands a disk block to
// the kernel's page cache uses it: a promotion there would evict another
// block from RAM (to be written to disk) for a block the page cache now
// holds.
func (t *Tiered) Peek(k Key) (b []byte, inRAM, ok bool) {
	if t.ram != nil {
		if b, ok := t.ram.Get(k); ok {
			if tc, ok := t.disk.(toucher); ok {
				tc.Touch(k)
			}
			return b, true, true
		}
	}
	if t.disk != nil {
		if b, ok := t.disk.Get(k); ok {
			return b, false, true
		}
	}
	return nil, false, false
}

// InRAM reports whether the RAM tier holds k, without reading it or
// counting an access (as far as the tier can tell: see RAM.Contains).
func (t *Tiered) InRAM(k Key) bool {
	c, ok := t.ram.(container)
	return ok && c.Contains(k)
}

// partReader is a tier that can read part of a block (Disk, RAM in a
// memory file).
type partReader interface {
	ReadPart(k Key, n int64, p []byte, off int64) bool
}

// ReadPart reads part of block k (n bytes long) from the tier that holds
// it: RAM in a memory file copies out that part; RAM on the heap reads
// nothing (a block there is read whole, Get, at no cost); else the disk
// tier, as Disk.ReadPart does. A part read from disk is not promoted: the
// reader wanted only that part.
func (t *Tiered) ReadPart(k Key, n int64, p []byte, off int64) bool {
	if t.ram != nil {
		if t.ReadRAMPart(k, n, p, off) {
			return true
		}
		// A RAM tier that cannot tell may hold it.
		if c, ok := t.ram.(container); !ok || c.Contains(k) {
			return false
		}
	}
	pr, ok := t.disk.(partReader)
	return ok && pr.ReadPart(k, n, p, off)
}

// ReadRAMPart reads part of block k (n bytes long) from RAM alone, where
// RAM copies out parts (RAM.ReadPart).
func (t *Tiered) ReadRAMPart(k Key, n int64, p []byte, off int64) bool {
	pr, ok := t.ram.(partReader)
	return ok && pr.ReadPart(k, n, p, off)
}

// Full reports whether a block put now would push another out of the
// cache, or be refused: when each tier present is full (RAM.Full, Disk.Full:
// RAM gives up blocks, and the disk's policy evicts blocks for them or
// refuses them); with no tier, always.
func (t *Tiered) Full() bool {
	return tierFull(t.ram) && tierFull(t.disk)
}

// tierFull reports whether x keeps no new block without giving up another:
// an absent tier keeps none, a tier that cannot tell is taken to have room.
func tierFull(x Tier) bool {
	if x == nil {
		return true
	}
	f, ok := x.(interface{ Full() bool })
	return ok && f.Full()
}

// Put stores b in RAM, and queues it for disk when there is no RAM tier
// (or one that cannot hand its blocks on): the disk tier writes in the
// background. It takes ownership of b; neither tier modifies it.
func (t *Tiered) Put(k Key, b []byte) {
	if t.ram != nil {
		t.ram.Put(k, b)
	}
	if t.disk != nil && t.victimRAM == nil {
		t.disk.Put(k, b)
	}
}

// PutCopies reports whether Put copies the block, so that the caller may
// reuse its buffer: when a RAM tier that copies (a memory file) takes
// every Put, and the disk tier only what RAM gives up (or there is none).
func (t *Tiered) PutCopies() bool {
	return t.ramCopies() && (t.disk == nil || t.victimRAM != nil)
}

// ramCopies reports whether the RAM tier copies its Puts (a memory file).
func (t *Tiered) ramCopies() bool {
	c, ok := t.ram.(interface{ PutCopies() bool })
	return ok && c.PutCopies()
}

// Forget drops k from the RAM tier without writing it to the disk tier:
// its bytes are kept elsewhere now (a local copy). A copy on disk stays.
func (t *Tiered) Forget(k Key) {
	if r, ok := t.ram.(interface{ Forget(Key) }); ok {
		r.Forget(k)
	}
}

// Remove drops k from both tiers (see Disk.Remove).
func (t *Tiered) Remove(k Key) {
	t.Forget(k)
	if r, ok := t.disk.(interface{ Remove(Key) }); ok {
		r.Remove(k)
	}
}

// Touch forwards an access seen elsewhere to the disk tier's policy.
func (t *Tiered) Touch(k Key) {
	if tc, ok := t.disk.(toucher); ok {
		tc.Touch(k)
	}
}

// Flush waits for buffered writes in both tiers.
func (t *Tiered) Flush() {
	for _, x := range []Tier{t.ram, t.disk} {
		if f, ok := x.(flusher); ok {
			f.Flush()
		}
	}
}

// Backlogged reports whether the disk tier's writes are behind (its queue
// half full): see Disk.Backlogged.
func (t *Tiered) Backlogged() bool {
	b, ok := t.disk.(interface{ Backlogged() bool })
	return ok && b.Backlogged()
}

// container is implemented by tiers that can say cheaply whether they hold a
// block, without reading it (a disk tier would read and verify the file).
type container interface{ Contains(Key) bool }

// Contains reports whether some tier holds k, without reading it or
// counting an access. A block it reports may still be dropped before a Get.
func (t *Tiered) Contains(k Key) bool {
	for _, x := range []Tier{t.ram, t.disk} {
		if c, ok := x.(container); ok && c.Contains(k) {
			return true
		}
	}
	return false
}
