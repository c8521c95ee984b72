package prefetch

import (
	"context"
	"fmt"
	"hash/maphash"
	"io"
	"sync"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// A reader that jumped (not streaming: see reader.readAhead) to a block
// that nobody fetches or holds ready would read the whole block for a few
// KiB. It reads only what it wants instead, in two cases:
//   - the disk tier holds the block and RAM does not: it reads the chunks
//     it wants from disk (cache.Tiered.ReadPart), where reading the block would read
//     and checksum all of it, and push another block out of RAM;
//   - no tier holds it, the cache is full (RAM gives up blocks and the disk
//     tier, if any, evicts others for them or refuses them), and the block
//     was fetched whole before
//     for such a read while it was full (fetchPart): the cache lost it, so
//     a reader at random offsets of a dataset larger than the cache would
//     fetch each block again and again, a whole block for each read. Each
//     block gets one chance to stay: fetched whole, it may be a hit for the
//     next reads, and while the cache has room, whole blocks fill it. No
//     chance while the memory for blocks has no room for one (more
//     readers than it holds blocks): the read would wait for a whole block.

// partReader is a cache tier that can read part of a block without reading
// the whole of it (cache.Tiered, cache.Disk).
type partReader interface {
	ReadPart(k cache.Key, n int64, p []byte, off int64) bool
}

// fuller is a cache tier that can tell whether a new block would push out
// another (cache.Tiered).
type fuller interface {
	Full() bool
}

// toucher is a cache tier whose eviction policy counts accesses
// (cache.Tiered, cache.Disk): a part fetch is one, as the lookup of a
// block fetched whole is. Without them, blocks nobody reads any more
// would never look unused, and the tier would never take new ones.
type toucher interface {
	Touch(cache.Key)
}

// partFetch says when readPart may fetch part of a block from the store.
type partFetch uint8

const (
	partNever partFetch = iota // from the disk tier only
	// partMissed: a reader at random offsets, once the cache is full and
	// the block had its chance (see above).
	partMissed
	// partLost: a stream in the middle of a block it read whole and lost
	// (given up for other readers' blocks while it read elsewhere or
	// slowly): fetched whole again, the block would most likely be given
	// up again before the reader finishes it, and with more streams than
	// the memory holds blocks each of their reads would fetch a block.
	partLost
)

// readPart reads p at off within block i of obj without the rest of the
// block (see above): from the disk tier when only it holds the block (RAM
// does not: the tier checks), or from the store when no tier holds it and
// fetch allows. It reports false when the block must be read whole
// (startRead): the read wants all of it, or someone fetches it or holds it
// ready.
func (l *Loader) readPart(ctx context.Context, obj store.Object, i int64, p []byte, off int64, fetch partFetch) (bool, error) {
	k := l.key(obj, i)
	bOff, n := l.blockRange(obj, i)
	if int64(len(p)) == n || l.held(k) {
		return false, nil
	}
	if pr, ok := l.tier.(partReader); ok && pr.ReadPart(k, n, p, off) {
		return true, nil
	}
	switch fetch {
	case partNever:
		return false, nil
	case partMissed:
		// With no room for the block (reads wait for memory, or will),
		// its chance would have this read wait for a whole block to use
		// a piece of it.
		if !l.cacheFull() || l.tierHas(k) || l.mem.room(n+blockOverhead) && l.chances.first(k) {
			return false, nil
		}
	case partLost:
		if l.tierHas(k) {
			return false, nil
		}
	}
	if tc, ok := l.tier.(toucher); ok {
		tc.Touch(k)
	}
	return true, l.fetchPart(ctx, obj, i, bOff+off, p)
}

// held reports whether a flight holds block k ready or fetches it (or the
// loader is closed): a read of it then goes through startRead.
func (l *Loader) held(k cache.Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed || l.ready[k] != nil || l.flights[k] != nil
}

// ramPartReader is a tier that can read part of a block from RAM alone
// (cache.Tiered over a RAM tier in a memory file).
type ramPartReader interface {
	ReadRAMPart(k cache.Key, n int64, p []byte, off int64) bool
}

// readRAMPart reads p at off within block i of obj from a RAM tier that
// copies out parts, when no flight holds or fetches the block: the read's
// own bytes, where a whole block read (startRead) would copy the block
// out of the tier for one piece of it, into memory of its own.
func (l *Loader) readRAMPart(obj store.Object, i int64, p []byte, off int64) bool {
	rp, ok := l.tier.(ramPartReader)
	if !ok {
		return false
	}
	k := l.key(obj, i)
	_, n := l.blockRange(obj, i)
	if l.held(k) || !rp.ReadRAMPart(k, n, p, off) {
		return false
	}
	l.stats.CacheHits.Add(1)
	return true
}

// cacheFull reports whether a block fetched now would push another out of
// the cache: with no tier, nothing keeps it.
func (l *Loader) cacheFull() bool {
	if l.tier == nil {
		return true
	}
	f, ok := l.tier.(fuller)
	return ok && f.Full()
}

// cacheChurns reports whether a cache tier exists and is full: a block
// fetched for a reader that may never read it pushes out a block that
// readers do. With no cache at all nothing is pushed out, and a block
// fetched ahead is only held for its reader.
func (l *Loader) cacheChurns() bool {
	return l.tier != nil && l.cacheFull()
}

// fetchPart fetches p, the bytes at at of obj (within block i), from the
// store under the global GET limit; with an error, the read fails as a
// failed fetch of the block would. The fetch is the reader's own, so it
// runs on the reader's context.
func (l *Loader) fetchPart(ctx context.Context, obj store.Object, i, at int64, p []byte) error {
	// The reader's context, ended by Close too: Close does not wait for
	// the reader.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.ctx, cancel)()
	if err := acquireSlot(ctx, l.gets); err != nil {
		return l.partErr(ctx, obj, i, err)
	}
	defer func() { <-l.gets }()
	l.stats.Gets.Add(1)
	l.stats.PartGets.Add(1)
	l.stats.Inflight.Add(1)
	defer l.stats.Inflight.Add(-1)
	got := 0
	rc, err := l.opts.Foreground.ReadRange(ctx, obj, at, int64(len(p)))
	if err == nil {
		got, err = io.ReadFull(rc, p)
		rc.Close()
	}
	l.stats.GetBytes.Add(int64(got))
	if err == nil {
		return nil
	}
	if ctx.Err() == nil {
		l.stats.GetErrors.Add(1)
		err = fmt.Errorf("[%d,+%d) after %d bytes: %w", at, len(p), got, err)
	}
	return l.partErr(ctx, obj, i, err)
}

// partErr wraps the error of a part fetch: a closed loader's as ErrClosed
// (as a block fetch's), a read cancelled as the context's error.
func (l *Loader) partErr(ctx context.Context, obj store.Object, i int64, err error) error {
	switch {
	case l.ctx.Err() != nil:
		return fmt.Errorf("prefetch: fetch %q block %d: %w (%w)", obj.Key, i, ErrClosed, err)
	case ctx.Err() != nil:
		return fmt.Errorf("prefetch: read %q: %w", obj.Key, ctx.Err())
	}
	return fmt.Errorf("prefetch: fetch %q block %d: %w", obj.Key, i, err)
}

// chanceSet remembers the blocks that readers at random offsets missed
// while the cache was full (up to chanceKeys of them, a random one
// forgotten for a new one), so that readPart gives each block one chance
// to stay in the cache.
type chanceSet struct {
	seed maphash.Seed
	mu   sync.Mutex
	seen map[uint64]struct{} // guarded by mu: hashes of the blocks missed
}

// chanceKeys bounds the set: 512 GiB of blocks of 8 MiB, about 3 MiB.
const chanceKeys = 64 << 10

func newChanceSet() *chanceSet {
	return &chanceSet{seed: maphash.MakeSeed(), seen: make(map[uint64]struct{})}
}

// first records k and reports whether it was not recorded before.
func (c *chanceSet) first(k cache.Key) bool {
	h := maphash.Comparable(c.seed, k)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[h]; ok {
		return false
	}
	if len(c.seen) >= chanceKeys {
		for old := range c.seen {
			delete(c.seen, old)
			break
		}
	}
	c.seen[h] = struct{}{}
	return true
}
