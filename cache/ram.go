package cache

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// RAM is the in-memory tier: a ristretto cache bounded in bytes (cost =
// the block's capacity, which counts the padding a block read from disk
// keeps). Sets are best effort: ristretto may drop or refuse one.
//
// With a victim (Tiered sets the disk tier), every block the RAM tier does
// not keep (evicted, refused, dropped) goes to the victim, and Drain hands
// it the blocks still held: the disk tier is written when RAM overflows or
// the mount ends, not once per fetch.
type RAM struct {
	c     *ristretto.Cache[string, *ramEntry]
	max   int64 // the bound given to NewRAM
	stats *Stats

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
	data []byte
}

// assumedBlock sizes ristretto's frequency sketch (about 10 counters per
// expected entry); blocks smaller than this only make the sketch less exact.
const assumedBlock = 64 << 10

// NewRAM returns a RAM tier holding at most maxBytes of blocks. stats may be
// nil.
func NewRAM(maxBytes int64, stats *Stats) (*RAM, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("new ram cache: max bytes %d must be positive", maxBytes)
	}
	if stats == nil {
		stats = new(Stats)
	}
	counters := min(max(10*maxBytes/assumedBlock, 1000), 50_000_000)
	r := &RAM{max: maxBytes, stats: stats}
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
				stats.RAMBytes.Add(-int64(cap(e.data)))
			}
		},
	})
	if err != nil {
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
	if held {
		(*v)(e.key, e.data)
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
		fn(e.key, e.data)
	}
}

func ramKey(k Key) string {
	// Object and ETag cannot hold NUL in S3 keys or ETags in practice; the
	// full key is checked on Get anyway.
	return k.Object + "\x00" + k.ETag + "\x00" + strconv.FormatInt(k.Block, 10)
}

// Get returns the block for k. The slice must not be modified.
func (r *RAM) Get(k Key) ([]byte, bool) {
	e, ok := r.get(k)
	if !ok || e == nil || e.key != k {
		if e = r.pending(k); e == nil {
			r.stats.RAMMisses.Add(1)
			return nil, false
		}
	}
	r.stats.RAMHits.Add(1)
	return e.data, true
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

// Put stores b under k and takes ownership of b. It may be dropped.
func (r *RAM) Put(k Key, b []byte) {
	r.stats.RAMPuts.Add(1)
	e := &ramEntry{key: k, data: b}
	if r.victim.Load() != nil {
		r.mu.Lock()
		if r.held[k] != nil {
			// Held or about to be (the cache applies Sets later): the same
			// bytes (a key names one version). A second Set would be
			// refused as a duplicate and take k out of held.
			r.mu.Unlock()
			return
		}
		if r.forgetting[k] > 0 {
			r.mu.Unlock()
			r.stats.RAMDropped.Add(1)
			return
		}
		r.held[k] = e
		r.mu.Unlock()
	}
	r.stats.RAMBytes.Add(int64(cap(b))) // before Set: OnExit may run at once
	r.life.RLock()
	set := !r.closed && r.c.Set(ramKey(k), e, int64(cap(b)))
	r.life.RUnlock()
	if !set {
		r.stats.RAMBytes.Add(-int64(cap(b)))
		r.stats.RAMDropped.Add(1)
		r.givenUp(e)
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
	r.c.UpdateMaxCost(max(r.max/4, r.max-n))
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

// Close releases the cache. Afterwards the tier holds nothing, Puts are
// dropped and Gets miss.
func (r *RAM) Close() {
	r.life.Lock()
	defer r.life.Unlock()
	if !r.closed {
		r.closed = true
		r.c.Close()
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
