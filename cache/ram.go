package cache

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// RAM is the in-memory tier: a ristretto cache bounded in bytes. Where the
// system has anonymous memory files (Linux), the blocks' bytes live in one
// (ramFile): Put copies a block in, Get copies it out, and the cost of a
// block is the pages it holds there. Elsewhere the tier keeps the blocks
// Put hands it, at the cost of their capacity (which counts the padding a
// block read from disk keeps). Sets are best effort: ristretto may drop or
// refuse one.
//
// With a victim (Tiered sets the disk tier), every block the RAM tier does
// not keep (evicted, refused, dropped) goes to the victim, and Drain hands
// it the blocks still held: the disk tier is written when RAM overflows or
// the mount ends, not once per fetch.
type RAM struct {
	c   *ristretto.Cache[string, *ramEntry]
	max int64 // the bound given to NewRAM
	// bound is max less what Reserve gave to memory held elsewhere.
	bound atomic.Int64
	stats *Stats
	file  *ramFile // where the blocks' bytes live; nil: on the heap

	victim atomic.Pointer[func(Key, []byte)] // set once, before use
	// lastOut is when the tier last evicted or refused a block (unix ns).
	lastOut atomic.Int64

	mu sync.Mutex
	// held is every block set and not given up (evicted, refused,
	// dropped, forgotten), kept with a victim only: what ristretto holds,
	// and what it is about to hold, as it applies a Set later (buffered).
	// Get and Contains look here too: a block fetched and put a moment ago
	// must not be fetched again.
	held map[Key]*ramEntry // guarded by mu
	// forgetting counts the Forgets of a key under way. A Put meanwhile is
	// dropped: between Forget's removal from held and its delete from
	// ristretto, a Put would be held and then deleted from ristretto,
	// held for ever (served, never evicted, not counted).
	forgetting map[Key]int // guarded by mu

	// life keeps ristretto's channels open while a call sends on them:
	// its Close closes them before it marks itself closed, and a send then
	// panics (a reader of a file still open on a detached mount, at exit).
	life   sync.RWMutex
	closed bool // guarded by life
}

// ramEntry keeps the full key beside the block so that a hash collision in
// ristretto can never serve another key's bytes.
type ramEntry struct {
	key  Key
	data []byte // the block, with no file
	off  int64  // where the block lies in the file
	n    int64  // its length
	cost int64  // what it holds of the tier's bound
	// state counts the copies out of the file under way, plus entryGone
	// once the tier let the block go: the last of the two to finish
	// punches the block's pages out of the file, so a copy never reads a
	// hole (zeros) where the block was.
	state atomic.Int64
}

const entryGone = 1 << 62

// pin holds the entry's bytes for a copy out; false once it is gone.
func (e *ramEntry) pin() bool {
	for {
		s := e.state.Load()
		if s&entryGone != 0 {
			return false
		}
		if e.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// unpin ends a copy out; it reports whether the bytes are to be punched
// out now (the entry is gone and this was the last copy).
func (e *ramEntry) unpin() bool { return e.state.Add(-1) == entryGone }

// leave marks the entry gone, once; it reports whether the bytes are to be
// punched out now (no copy under way).
func (e *ramEntry) leave() bool {
	for {
		s := e.state.Load()
		if s&entryGone != 0 {
			return false
		}
		if e.state.CompareAndSwap(s, s|entryGone) {
			return s == 0
		}
	}
}

// assumedBlock sizes ristretto's frequency sketch (about 10 counters per
// expected entry); blocks smaller than this only make the sketch less exact.
const assumedBlock = 64 << 10

// NewRAM returns a RAM tier holding at most maxBytes of blocks, in an
// anonymous memory file where the system has them, else on the heap.
// stats may be nil.
func NewRAM(maxBytes int64, stats *Stats) (*RAM, error) {
	file, err := openRAMFile()
	if err != nil {
		file = nil // the heap, then
	}
	return newRAM(maxBytes, stats, file)
}

// NewHeapRAM returns a RAM tier that keeps the blocks Put hands it on the
// heap, as NewRAM does where the system has no anonymous memory files.
func NewHeapRAM(maxBytes int64, stats *Stats) (*RAM, error) {
	return newRAM(maxBytes, stats, nil)
}

func newRAM(maxBytes int64, stats *Stats, file *ramFile) (*RAM, error) {
	if maxBytes <= 0 {
		if file != nil {
			file.close()
		}
		return nil, fmt.Errorf("new ram cache: max bytes %d must be positive", maxBytes)
	}
	if stats == nil {
		stats = new(Stats)
	}
	counters := min(max(10*maxBytes/assumedBlock, 1000), 50_000_000)
	r := &RAM{max: maxBytes, stats: stats, file: file}
	r.bound.Store(maxBytes)
	c, err := ristretto.NewCache(&ristretto.Config[string, *ramEntry]{
		NumCounters:        counters,
		MaxCost:            maxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true,
		OnEvict: func(it *ristretto.Item[*ramEntry]) {
			stats.RAMEvictions.Add(1)
			r.lastOut.Store(time.Now().UnixNano())
			r.givenUp(it.Value)
		},
		OnReject: func(it *ristretto.Item[*ramEntry]) {
			stats.RAMDropped.Add(1)
			r.lastOut.Store(time.Now().UnixNano())
			r.givenUp(it.Value)
		},
		// Every value leaving (evicted, refused, replaced, deleted) passes
		// here once; one whose Set was dropped never entered.
		OnExit: func(e *ramEntry) {
			if e != nil {
				stats.RAMBytes.Add(-e.cost)
				r.leave(e)
			}
		},
	})
	if err != nil {
		if file != nil {
			file.close()
		}
		return nil, fmt.Errorf("new ram cache: %w", err)
	}
	r.c = c
	return r, nil
}

// setVictim makes fn receive every block the tier gives up. Call it before
// the first Put.
func (r *RAM) setVictim(fn func(Key, []byte)) {
	r.mu.Lock()
	r.held = make(map[Key]*ramEntry)
	r.forgetting = make(map[Key]int)
	r.mu.Unlock()
	r.victim.Store(&fn)
}

// givenUp hands a block the tier no longer holds to the victim, unless
// Forget dropped it first (its Set still buffered): its bytes live
// elsewhere, and the disk tier must not get them.
func (r *RAM) givenUp(e *ramEntry) {
	v := r.victim.Load()
	if v == nil || e == nil {
		return
	}
	r.mu.Lock()
	held := r.held[e.key] == e
	if held {
		delete(r.held, e.key)
	}
	r.mu.Unlock()
	if !held {
		return
	}
	if b, ok := r.load(e); ok {
		(*v)(e.key, b)
	}
}

// PutCopies reports whether Put copies the block (into the tier's file),
// so that the caller may reuse its buffer.
func (r *RAM) PutCopies() bool { return r.file != nil }

// FileBytes returns the memory the tier's file holds (0 with no file): the
// process's memory that its resident set does not show.
func (r *RAM) FileBytes() int64 {
	if r.file == nil {
		return 0
	}
	return r.file.allocated()
}

// load returns the bytes of e: the block itself with no file, else a copy
// out of the file; false if e left the tier meanwhile.
func (r *RAM) load(e *ramEntry) ([]byte, bool) {
	if r.file == nil {
		return e.data, true
	}
	b := make([]byte, e.n)
	return b, r.copyOut(e, 0, b)
}

// copyOut copies into p the bytes at off of e's block, holding its pages
// while it reads; false if e left the tier meanwhile or the read failed.
func (r *RAM) copyOut(e *ramEntry, off int64, p []byte) bool {
	if !e.pin() {
		return false
	}
	err := r.file.read(e.off+off, p)
	if e.unpin() {
		r.punch(e)
	}
	return err == nil
}

// leave marks e gone from the tier; its pages go once no copy reads them.
func (r *RAM) leave(e *ramEntry) {
	if r.file != nil && e.leave() {
		r.punch(e)
	}
}

func (r *RAM) punch(e *ramEntry) {
	if err := r.file.free(e.off, e.cost); err != nil {
		// The pages stay until the tier closes: memory, not bytes served.
		r.stats.RAMFileErrors.Add(1)
	}
}

// drain calls fn with each block the tier holds.
func (r *RAM) drain(fn func(Key, []byte)) {
	r.mu.Lock()
	held := make([]*ramEntry, 0, len(r.held))
	for _, e := range r.held {
		held = append(held, e)
	}
	r.mu.Unlock()
	for _, e := range held {
		if b, ok := r.load(e); ok {
			fn(e.key, b)
		}
	}
}

func ramKey(k Key) string {
	// Object and ETag cannot hold NUL in S3 keys or ETags in practice; the
	// full key is checked on Get anyway.
	return k.Object + "\x00" + k.ETag + "\x00" + strconv.FormatInt(k.Block, 10)
}

// Get returns the block for k. The slice must not be modified.
func (r *RAM) Get(k Key) ([]byte, bool) {
	e := r.lookup(k)
	if e == nil {
		r.stats.RAMMisses.Add(1)
		return nil, false
	}
	b, ok := r.load(e)
	if !ok {
		r.stats.RAMMisses.Add(1)
		return nil, false
	}
	r.stats.RAMHits.Add(1)
	return b, true
}

// ReadPart copies into p the bytes at off of block k, n bytes long, from
// the tier's file: a read of part of a block copies that part, where Get
// copies the whole block out. It reports false when the tier does not
// hold the block (or keeps its blocks on the heap, where Get costs no
// copy), or holds a shorter one (written under another block size).
func (r *RAM) ReadPart(k Key, n int64, p []byte, off int64) bool {
	if r.file == nil || off < 0 || off+int64(len(p)) > n {
		return false
	}
	e := r.lookup(k)
	if e == nil || e.n < n || !r.copyOut(e, off, p) {
		return false
	}
	r.stats.RAMHits.Add(1)
	return true
}

// lookup returns the entry for k, or nil.
func (r *RAM) lookup(k Key) *ramEntry {
	e, ok := r.get(k)
	if !ok || e == nil || e.key != k {
		e = r.pending(k)
	}
	return e
}

// pending returns the block for k if it is held but not found in ristretto
// (its Set not applied yet), or nil.
func (r *RAM) pending(k Key) *ramEntry {
	if r.victim.Load() == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[k]
}

// Put stores b under k. With a file it copies b there (the caller keeps
// b), else it takes ownership of b. It may be dropped.
func (r *RAM) Put(k Key, b []byte) {
	r.stats.RAMPuts.Add(1)
	e := &ramEntry{key: k, data: b, n: int64(len(b)), cost: int64(cap(b))}
	if r.file != nil {
		if r.victim.Load() != nil && r.pending(k) != nil {
			return // held (see below): checked first to save the copy
		}
		if bound := r.bound.Load(); r.file.held.Load()+pages(e.n) > bound+bound/8 {
			// ristretto applies Sets, and evicts for them, in a goroutine of
			// its own, which lags behind a burst of Puts (or a slow victim):
			// the file would hold every block put meanwhile. Wait for it.
			r.Flush()
		}
		off, err := r.file.write(b)
		if err != nil {
			r.stats.RAMFileErrors.Add(1)
			r.stats.RAMDropped.Add(1)
			return
		}
		e.data, e.off, e.cost = nil, off, pages(e.n)
	}
	if r.victim.Load() != nil {
		r.mu.Lock()
		if r.held[k] != nil {
			// Held or about to be (the cache applies Sets later): the same
			// bytes (a key names one version). A second Set would be
			// refused as a duplicate and take k out of held.
			r.mu.Unlock()
			r.leave(e)
			return
		}
		if r.forgetting[k] > 0 {
			r.mu.Unlock()
			r.stats.RAMDropped.Add(1)
			r.leave(e)
			return
		}
		r.held[k] = e
		r.mu.Unlock()
	}
	r.stats.RAMBytes.Add(e.cost) // before Set: OnExit may run at once
	r.life.RLock()
	set := !r.closed && r.c.Set(ramKey(k), e, e.cost)
	r.life.RUnlock()
	if !set {
		r.stats.RAMBytes.Add(-e.cost)
		r.stats.RAMDropped.Add(1)
		r.givenUp(e)
		r.leave(e) // never entered: no OnExit
	}
}

// Forget drops the block for k, if held, without giving it to the victim:
// its bytes live elsewhere now (a local copy of the whole object).
//
// r.mu is not held across the delete from ristretto: that may wait for
// ristretto's buffer, which its eviction callbacks (givenUp, under r.mu)
// drain.
func (r *RAM) Forget(k Key) {
	if r.victim.Load() == nil {
		r.del(k)
		return
	}
	r.mu.Lock()
	delete(r.held, k)
	r.forgetting[k]++
	r.mu.Unlock()
	r.del(k)
	r.mu.Lock()
	if r.forgetting[k]--; r.forgetting[k] == 0 {
		delete(r.forgetting, k)
	}
	r.mu.Unlock()
}

// del deletes k from ristretto unless the tier is closed.
func (r *RAM) del(k Key) {
	r.life.RLock()
	defer r.life.RUnlock()
	if !r.closed {
		r.c.Del(ramKey(k))
	}
}

// Reserve gives n bytes of the tier's bound to memory held elsewhere (the
// blocks a loader has in flight or read ahead), so that both together stay
// within it; the tier evicts down to the rest as new blocks arrive. A
// quarter of the bound always stays the tier's. Safe for concurrent use.
func (r *RAM) Reserve(n int64) {
	bound := max(r.max/4, r.max-n)
	r.bound.Store(bound)
	r.c.UpdateMaxCost(bound)
}

// Flush waits until earlier Puts are applied (ristretto buffers them), so a
// Get after Flush sees them unless they were dropped. For tests and warm-up.
func (r *RAM) Flush() {
	r.life.RLock()
	defer r.life.RUnlock()
	if !r.closed {
		r.c.Wait()
	}
}

// Close releases the cache and its file. Afterwards the tier holds
// nothing, Puts are dropped and Gets miss.
func (r *RAM) Close() {
	r.life.Lock()
	defer r.life.Unlock()
	if !r.closed {
		r.closed = true
		r.c.Close()
		if r.file != nil {
			r.file.close() // a copy out still under way fails: a miss
		}
	}
}

// fullFor: a tier that evicted or refused a block this recently is full.
const fullFor = 2 * time.Second

// lately reports whether unix-nanosecond time t (0: never) lies within d
// of now.
func lately(t int64, d time.Duration) bool {
	return t != 0 && time.Since(time.Unix(0, t)) < d
}

// Full reports whether the tier is at its bound: it evicted or refused a
// block lately. A tier that stops taking new blocks (their readers fetch
// parts instead) thus takes one again every fullFor, and finds out whether
// it still has to give one up.
func (r *RAM) Full() bool {
	return lately(r.lastOut.Load(), fullFor)
}

// Contains reports whether k is cached, without counting a hit or a miss
// in the tier's stats (with no victim, the cache's own admission counts
// see a lookup).
func (r *RAM) Contains(k Key) bool {
	if r.victim.Load() != nil {
		return r.pending(k) != nil
	}
	e, ok := r.get(k)
	return ok && e != nil && e.key == k
}

// get looks k up in ristretto unless the tier is closed (a Get counts a
// use in its policy, which Close closes).
func (r *RAM) get(k Key) (*ramEntry, bool) {
	r.life.RLock()
	defer r.life.RUnlock()
	if r.closed {
		return nil, false
	}
	return r.c.Get(ramKey(k))
}
