// Package prefetch turns reads of byte ranges of objects into block fetches
// from a store.Store, shared by a whole mount: it owns the block loader
// (singleflight per block, a global limit on GETs in flight, cache fill),
// the memory budget for fetched-but-unread data, read-ahead within a file,
// reads of part of a block for readers at random offsets (part.go),
// cross-file prefetch (directory order and announced epoch order), the
// decision of which prefetched blocks to push into the kernel's page cache,
// and the Hedged store decorator for small objects.
//
// It does not own the cache tiers (package cache: it only calls Get and Put),
// the object store itself (package store), directory listings (the fuse layer
// passes them in through Siblings), the page cache (the fuse layer stores
// into it through PageCache) or errno mapping (package fuse).
//
// Lock order: Loader.mu -> planner.dirMu -> planner.mu, planner.dirMu ->
// sweeper.mu (directory order fetches the kinds of file opened), and
// Loader.mu -> budget.mu (a prefetch checks, under Loader.mu, that its
// file is still ahead of the reader). No lock is held across a GET, a cache tier call
// (but for the index lookup of Contains, which takes only the tier's own
// leaf locks) or a push into the page cache.
package prefetch

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// ErrClosed is returned by reads after Loader.Close. It is an
// fs.ErrClosed, so that the layers above tell a read stopped by the mount's
// end from a failing one without knowing this package.
var ErrClosed = fmt.Errorf("prefetch: loader closed: %w", fs.ErrClosed)

// Options configure a Loader. Zero fields take the defaults shown.
type Options struct {
	// BlockSize is the unit of fetch and cache for large objects (8 MiB).
	BlockSize int64
	// SmallObject: objects up to this size are fetched whole as block 0
	// (default BlockSize, so no buffer is ever larger than a block).
	SmallObject int64
	// MaxInflight caps the loader's GETs in flight (128: hides a ~20 ms
	// round trip at a few GB/s). Prefetch may use at most 3/4 of it, so a
	// foreground read always finds a slot soon.
	MaxInflight int
	// MemoryBudget bounds the bytes of blocks being fetched or held in the
	// ready map across the loader (1 GiB). It does not cover the cache tier.
	MemoryBudget int64
	// OnMemory, when set, is told the bytes the budget holds each time
	// they change, in order (under the budget's lock: it must not block).
	// A RAM tier that shares its memory with the loader gives them up
	// (cache.RAM.Reserve), so that blocks read ahead and blocks cached
	// stay within one bound.
	OnMemory func(inUse int64)
	// PrefetchBytes: once prefetch GETs in flight (read-ahead included)
	// fetch this many bytes, prefetch across files waits (32 MiB: 128
	// files of 256 KB, 8 of 4 MB). Read-ahead within a file is not held
	// back by it.
	PrefetchBytes int64
	// ReadAhead is the largest read-ahead window in blocks (8).
	ReadAhead int
	// StreamAt: a file of 2 to ReadAhead blocks whose first read starts at
	// offset 0 while at least this many GETs are in flight is fetched with
	// one GET, its blocks in order (8; negative: never).
	StreamAt int
	// CrossFile turns on prefetch of the next files (directory or announced order).
	CrossFile bool
	// FileLead and ByteLead bound how far cross-file prefetch runs ahead of
	// the furthest reader (256 files, MemoryBudget/2 bytes). Four FileLeads
	// is also the spread of out-of-order opens (parallel data-loader
	// workers) below which a jump ahead is not taken for a skip.
	FileLead int
	ByteLead int64
	// FileBlocks is how many leading blocks of a large file cross-file
	// prefetch fetches; read-ahead does the rest once the file is read (2).
	FileBlocks int
	// Workers is the number of cross-file prefetch goroutines (min(MaxInflight/2, 64)).
	Workers int
	// DirHits is how many consecutive in-order opens in one directory start
	// directory-order prefetch (2).
	DirHits int
	// RecvPool bounds the buffers that fetches receive bodies into and
	// reuse once their blocks are let go (128 MiB, at most a quarter of
	// MemoryBudget: the free buffers are memory beside it; negative: none,
	// each body in a buffer of its own). Used only over a tier whose Put
	// copies (cache.RAM in a memory file) or none: see bufPool.
	RecvPool int64
	// ReadyTTL: a ready block not read for this long may be evicted by new
	// prefetch when the budget is full, and is given up anyway within half
	// that again (30 s); until then only a foreground read evicts it.
	ReadyTTL time.Duration
	// SweepBytes: once two files of a directory are opened, the rest of it
	// is fetched into the cache tier (a large directory ahead of its reads:
	// see sweepBase), and once four directories of one parent are, every
	// directory of that parent, up to this many bytes in all (0: off).
	// Set it to what the cache can keep: an epoch reads every file once, so
	// with a shuffled order nobody announced this is what hides latency.
	SweepBytes int64
	// SweepPushBytes: of what the sweep fetches, this many bytes in all
	// (once per mount, like the sweep) also go into the page cache when
	// there is one (SetPageCache). Set it to the memory the job can spare
	// for the dataset (0: none).
	SweepPushBytes int64
	// HandedKeep: the bytes of this mount's blocks that the kernel's page
	// cache can be expected to keep. A block found on disk by a prefetch
	// that would push it is not pushed when this mount handed it to the
	// kernel (pushed it, or served it to a read) less than HandedKeep bytes
	// ago: the kernel most likely holds it still. 0: always pushed.
	HandedKeep int64
	// Foreground is the store for the fetches a read waits on (nil: the
	// loader's). A hedging decorator (Hedged) goes here, not under the
	// whole loader: prefetch runs ahead of the reader, where a late GET
	// seldom delays anyone, and hedging costs CPU on every GET it watches.
	Foreground store.Store
	// Siblings gives directory listing order; nil disables directory-order
	// prefetch. It can also be set later with SetSiblings.
	Siblings Siblings
	Logger   *slog.Logger
	Stats    *Stats

	poisonPool bool // tests: the pool poisons each buffer given back (bufPool.poison)
}

func (o Options) withDefaults() Options {
	if o.BlockSize <= 0 {
		o.BlockSize = 8 << 20
	}
	if o.SmallObject <= 0 {
		o.SmallObject = o.BlockSize
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 128
	}
	if o.MemoryBudget <= 0 {
		o.MemoryBudget = 1 << 30
	}
	if o.PrefetchBytes <= 0 {
		o.PrefetchBytes = 32 << 20
	}
	if o.ReadAhead <= 0 {
		o.ReadAhead = 8
	}
	if o.StreamAt == 0 {
		o.StreamAt = 8
	}
	if o.FileLead <= 0 {
		o.FileLead = 256
	}
	if o.ByteLead <= 0 {
		o.ByteLead = o.MemoryBudget / 2
	}
	if o.FileBlocks <= 0 {
		o.FileBlocks = 2
	}
	if o.Workers <= 0 {
		o.Workers = max(1, min(o.MaxInflight/2, 64))
	}
	if o.DirHits <= 0 {
		o.DirHits = 2
	}
	if o.ReadyTTL <= 0 {
		o.ReadyTTL = 30 * time.Second
	}
	if o.RecvPool == 0 {
		o.RecvPool = 128 << 20
	}
	o.RecvPool = min(o.RecvPool, o.MemoryBudget/4)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stats == nil {
		o.Stats = &Stats{}
	}
	return o
}

// blockOverhead is charged to the budget per block on top of its bytes, so
// that millions of tiny files cannot fill the ready map for free.
const blockOverhead = 512

// Loader fetches blocks for a whole mount. It is safe for concurrent use.
type Loader struct {
	st    store.Store
	tier  cache.Tier // may be nil
	opts  Options
	stats *Stats
	log   *slog.Logger

	// ctx is the lifetime of every fetch and background goroutine; Close
	// cancels it. Fetches never run on a caller's context.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mem       *budget
	gets      chan struct{} // global GET slots
	pgets     chan struct{} // the share of slots prefetch may use
	plan      *planner      // nil unless CrossFile
	sweep     *sweeper      // nil unless CrossFile
	maxPfetch int64         // cap on prefetch flights (each holds a goroutine)
	pool      *bufPool      // nil: each body in a buffer of its own
	handed    *handedSet    // blocks handed to the kernel lately
	chances   *chanceSet    // blocks readers at random offsets missed while the cache was full (readPart)

	mu      sync.Mutex
	flights map[cache.Key]*flight // guarded by mu: fetches in progress
	ready   map[cache.Key]*flight // guarded by mu: fetched, not yet consumed
	lru     list.List             // guarded by mu: ready flights, oldest first
	// guarded by mu: charge of the ready blocks kept for a sequential
	// reader's next piece (flight.stream), which evictForRead spares
	streamBytes int64
	pflights    int64     // guarded by mu: prefetch flights in progress
	pbytes      int64     // guarded by mu: bytes those flights fetch
	closed      bool      // guarded by mu
	pc          PageCache // guarded by mu: where pushes go (nil: none)
	// guarded by mu: the charge of the blocks queued for the page cache or
	// being pushed, at most pushCap
	pushBytes int64
	// copied holds the object versions Forget was told a whole local copy
	// holds, at most maxCopied: prefetch leaves them alone (a read of one
	// through the loader fetches it, and takes it out again).
	copied map[objVersion]struct{} // guarded by mu
	// gaveUp holds the blocks whose fetch gave up (store.ErrGaveUp) on
	// reads in the last gaveUpFor, at most maxGaveUp, until as many reads
	// took the error: the kernel asks again for a page whose read failed,
	// at once, and that second read waited a whole --io-timeout more for a
	// store that is down. One retry for each read that failed: the read
	// after them asks the store, which may be back. Prefetch leaves these
	// blocks alone meanwhile.
	gaveUp map[cache.Key]gaveUp // guarded by mu

	pushq   chan push // blocks waiting for a pusher; nil unless CrossFile
	pushCap int64     // the most pushBytes may reach; fixed at creation
}

// Where a prefetched block lands once fetched: the ready map (landReady),
// until a read takes it, or the cache tier only (landCache: the sweep
// fetches far more than the budget); with landKernel, also the page cache
// ahead of the reader (PageCache), but for the file's last page with
// landTail.
type landing uint8

const (
	landReady  landing = 0
	landCache  landing = 1 << 0
	landKernel landing = 1 << 1
	landTail   landing = 1 << 2
)

// gaveUp is a fetch that gave up, when, and how many more reads get its
// error: one for each read it was handed (each has its kernel's retry).
type gaveUp struct {
	err  error
	at   time.Time
	left int
}

const (
	// gaveUpFor is how long after a fetch gave up the next read of its
	// block fails at once: long enough for the kernel's second try, which
	// comes right after the first fails.
	gaveUpFor = time.Second
	// maxGaveUp bounds gaveUp: a mount whose store is down fails every
	// block it is asked for.
	maxGaveUp = 4096
	// maxRetriesPerGiveUp bounds the reads one give-up fails at once.
	maxRetriesPerGiveUp = 4
)

// flight is one fetch of one block and, once done, the block itself. It is
// reference counted: the fetch, each waiter and the ready map each hold one
// reference, and the block's budget is returned when the last goes.
type flight struct {
	key      cache.Key
	obj      store.Object
	n        int64   // block length
	prefetch bool    // started by prefetch, not by a read
	land     landing // set before the fetch starts
	done     chan struct{}
	data     []byte // set before done is closed
	err      error  // set before done is closed
	// lent: data is a buffer of the loader's pool, given back (and data
	// cleared, under Loader.mu) with the last reference. Set before done
	// is closed.
	lent bool

	charge  int64         // guarded by Loader.mu: bytes held in the budget
	queued  bool          // guarded by Loader.mu: in a run, behind the block its GET reads now
	refs    int           // guarded by Loader.mu
	used    bool          // guarded by Loader.mu: a read has taken it
	reads   int           // guarded by Loader.mu: the reads that took it
	stream  bool          // guarded by Loader.mu: kept for a sequential reader's next piece
	elem    *list.Element // guarded by Loader.mu: position in lru while ready
	readyAt time.Time     // guarded by Loader.mu
}

// NewLoader builds a loader over st, filling tier (which may be nil).
// Call Close to stop its background work.
func NewLoader(st store.Store, tier cache.Tier, opts Options) *Loader {
	opts = opts.withDefaults()
	if opts.Foreground == nil {
		opts.Foreground = st
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loader{
		st:        st,
		tier:      tier,
		opts:      opts,
		stats:     opts.Stats,
		log:       opts.Logger,
		ctx:       ctx,
		cancel:    cancel,
		mem:       newBudget(opts.MemoryBudget, opts.Stats, opts.OnMemory),
		gets:      make(chan struct{}, opts.MaxInflight),
		pgets:     make(chan struct{}, max(1, opts.MaxInflight*3/4)),
		maxPfetch: int64(4 * opts.MaxInflight),
		pool:      poolOver(tier, opts),
		handed:    newHandedSet(opts.HandedKeep),
		chances:   newChanceSet(),
		flights:   make(map[cache.Key]*flight),
		ready:     make(map[cache.Key]*flight),
		copied:    make(map[objVersion]struct{}),
		gaveUp:    make(map[cache.Key]gaveUp),
	}
	if opts.CrossFile {
		l.plan = newPlanner(l)
		l.plan.start()
		l.sweep = &sweeper{l: l, dirs: map[string]*sweepDir{}, spread: map[string]int{}, unlisted: map[string]*unlisted{},
			kinds: map[string]bool{}, waiting: map[string][]string{}}
		l.pushq = make(chan push, pushQueue)
		l.pushCap = pushCap(l.mem.limit, l.mem.clamp(opts.BlockSize+blockOverhead))
		for range pushers {
			l.wg.Add(1)
			go l.pusher()
		}
	}
	l.wg.Add(1)
	go l.expireReady()
	return l
}

// copier is a tier whose Put copies the block, so that the caller may
// reuse its buffer (cache.RAM in a memory file, cache.Tiered over one).
type copier interface{ PutCopies() bool }

// poolOver returns the pool of receive buffers for a loader over tier: nil
// when the tier keeps the buffers Put hands it.
func poolOver(tier cache.Tier, opts Options) *bufPool {
	if c, ok := tier.(copier); tier != nil && (!ok || !c.PutCopies()) || opts.RecvPool < 0 {
		return nil
	}
	p := newBufPool(opts.RecvPool, opts.BlockSize, opts.Stats)
	if p != nil {
		p.poison = opts.poisonPool
	}
	return p
}

// expireReady gives up, every ReadyTTL/2, the ready blocks no read touched
// for ReadyTTL: blocks of a file a reader left mid-way, or fetched ahead
// for an epoch that ended, held their share of the budget (so of the RAM
// cache, which gives up what prefetch holds) for as long as no new read or
// prefetch pushed them out: on an idle mount, or one reading other files
// whole, for good. The cache tier keeps their bytes.
func (l *Loader) expireReady() {
	defer l.wg.Done()
	t := time.NewTicker(max(l.opts.ReadyTTL/2, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
			for l.evictOne(true) {
			}
		}
	}
}

// Close stops background work, waits for every fetch the loader started,
// and drops the ready map. Reads after Close fail with ErrClosed.
func (l *Loader) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.cancel()
		l.wg.Wait()
		for l.evictOne(false) {
		}
	})
	return nil
}

// Open returns a Reader for one open file handle. obj must carry the Size
// and ETag from the listing or Stat: blocks are laid out by Size and every
// GET is pinned to ETag. With CrossFile, Open also tells the cross-file
// prefetcher where the reader is. Open does no I/O.
func (l *Loader) Open(obj store.Object) Reader {
	if l.plan != nil {
		fresh, drain := l.sweep.kindOpened(obj.Key)
		if fresh {
			l.plan.kindAdded()
		}
		sib := l.plan.opened(obj)
		if drain {
			l.sweep.startDrain(sib)
		}
		if l.tier != nil && l.opts.SweepBytes > 0 {
			l.sweep.opened(sib, obj)
		}
	}
	return &reader{l: l, obj: obj, issued: -1}
}

// Announce sets the order in which files will be read (one epoch); it
// replaces any earlier order. The loader keeps order: the caller must not
// modify it afterwards. It does nothing without CrossFile.
func (l *Loader) Announce(order []store.Object) {
	if l.plan != nil {
		l.plan.announce(order)
	}
}

// SetSiblings sets the source of directory order for directory-order
// prefetch (as Options.Siblings does). It does nothing without CrossFile.
func (l *Loader) SetSiblings(s Siblings) {
	if l.plan != nil {
		l.plan.setSiblings(s)
	}
}

// indexTier is a tier that can tell from its index alone (no read)
// whether it holds a block (cache.Disk, cache.Tiered).
type indexTier interface{ Contains(cache.Key) bool }

// tierHas reports whether the cache tier has k, from its index alone, when
// the tier can tell; otherwise false.
func (l *Loader) tierHas(k cache.Key) bool {
	c, ok := l.tier.(indexTier)
	return ok && c.Contains(k)
}

// forgetter is a tier that can drop a block from RAM alone (cache.Tiered).
type forgetter interface{ Forget(cache.Key) }

// remover is a tier that can drop a block from every tier (cache.Tiered).
type remover interface{ Remove(cache.Key) }

// backlogger is a tier that says when its disk writes lag (cache.Tiered).
type backlogger interface{ Backlogged() bool }

// peeker is a tier that can hand out a block without promoting it to RAM,
// and say whether RAM held it, or holds it without reading it
// (cache.Tiered).
type peeker interface {
	Peek(cache.Key) (b []byte, inRAM, ok bool)
	InRAM(cache.Key) bool
}

// tierPresent says whether the cache tier holds block k (n bytes) of obj,
// so that a prefetch need not fetch it; it is called without l.mu.
//
// A prefetch that lands in the kernel (land has landKernel: the planner,
// the sweep) hands a block found only on disk to the page cache, without
// promoting it to RAM: after `dataccel warm`, the reader then finds the
// epoch in the page cache. A block in RAM is left there: RAM holds what
// this mount fetched or read, which the kernel has seen already, and an
// announced warm epoch probes every file it reads. So is a block on disk
// that this mount handed to the kernel lately (handedSet): one RAM gave up
// to disk, in a dataset larger than the RAM tier. Any other prefetch
// (read-ahead within a file) finds the block in the tier's index, and
// leaves it there for the reader.
func (l *Loader) tierPresent(obj store.Object, k cache.Key, n int64, land landing) bool {
	if p, ok := l.tier.(peeker); ok && land&landKernel != 0 {
		if l.handed.has(k) && l.tierHas(k) || p.InRAM(k) {
			return true // from the index: no read (a copy out of RAM) for a block not pushed
		}
		data, inRAM, ok := p.Peek(k)
		if ok {
			data, ok = l.fit(k, data, n)
		}
		if !ok {
			return false
		}
		if !inRAM {
			l.pushFromTier(obj, k, data, land)
		}
		return true
	}
	if c, ok := l.tier.(indexTier); ok {
		// From the index, no read: the reader reads the block when it
		// gets there, and holds it ready while the budget has room. Read
		// here, it would be promoted to RAM, and with RAM full, pushed out
		// again by the blocks other readers read ahead before its reader
		// came: read from disk twice or more. (A block stored under
		// another block size answers yes too; its reader fetches it.)
		return c.Contains(k)
	}
	// Not tierGet: a prefetch probe is not a cache hit.
	data, ok := l.tier.Get(k)
	if ok {
		_, ok = l.fit(k, data, n)
	}
	return ok
}

// pushFromTier hands a block read from the cache tier to the page cache,
// under the budget like a fetched block until the push ends; with no room
// it is left where it is, for the reader.
func (l *Loader) pushFromTier(obj store.Object, k cache.Key, data []byte, land landing) {
	charge := int64(len(data)) + blockOverhead
	if !l.mem.tryAcquire(charge) {
		return
	}
	f := doneFlight(obj, k, data, charge)
	f.land = land
	l.mu.Lock()
	l.pushLocked(f)
	charge = l.unrefLocked(f)
	l.mu.Unlock()
	if charge > 0 {
		l.mem.release(charge)
	}
}

// Uncached returns the bytes of obj's blocks that the cache tier lacks,
// from its index alone: 0 when it has every block.
func (l *Loader) Uncached(obj store.Object) int64 {
	var n int64
	for i := range l.numBlocks(obj) {
		if !l.tierHas(l.key(obj, i)) {
			_, size := l.blockRange(obj, i)
			n += size
		}
	}
	return n
}

// objVersion names an object version in Loader.copied.
type objVersion struct{ key, etag string }

// maxCopied bounds Loader.copied.
const maxCopied = 1 << 16

// Forget drops obj's blocks from the cache tier's memory, and keeps them
// off its disk: their bytes are kept elsewhere now (a whole local copy),
// so holding them too would only push other blocks out, onto the disk and
// back. Blocks already on disk stay. Prefetch then leaves obj alone: it
// would fetch again what the copy holds.
func (l *Loader) Forget(obj store.Object) {
	l.mu.Lock()
	if len(l.copied) < maxCopied {
		l.copied[objVersion{obj.Key, obj.ETag}] = struct{}{}
	}
	l.mu.Unlock()
	f, ok := l.tier.(forgetter)
	if !ok {
		return
	}
	for i := range l.numBlocks(obj) {
		f.Forget(l.key(obj, i))
	}
}

// fillWindow is how many blocks of one object Fill fetches at once.
const fillWindow = 8

// Fill makes sure every block of obj is in the cache tier: blocks the tier
// has are skipped from its index alone (counted as cache hits), the others
// are fetched (joining fetches in flight), fillWindow at a time, and waited
// for. Nothing is copied out: this is warm's read, which wants the bytes in
// the cache only. Each block is let go as soon as it is in: a finished
// block held while Fill waits for another would keep its budget from the
// fetch Fill waits for, and with a budget of fewer than fillWindow blocks
// (large blocks) neither would ever end.
func (l *Loader) Fill(ctx context.Context, obj store.Object) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fillWindow)
	for i := range l.numBlocks(obj) {
		if l.tierHas(l.key(obj, i)) {
			l.stats.CacheHits.Add(1)
			continue
		}
		if gctx.Err() != nil {
			// A block failed, or ctx ended: fetch no more. An ended ctx
			// is this fill's error too, though no block got it: this
			// block is not in the tier (warm counted an interrupted
			// object as filled).
			if err := g.Wait(); err != nil {
				return err
			}
			return fmt.Errorf("prefetch: fill %q block %d: %w", obj.Key, i, ctx.Err())
		}
		g.Go(func() error {
			h, err := l.startRead(obj, i)
			if err != nil {
				return err
			}
			_, err = l.wait(gctx, h)
			l.release(h, relConsumed)
			return err
		})
	}
	return g.Wait()
}

// numBlocks is how many blocks obj has.
func (l *Loader) numBlocks(obj store.Object) int64 {
	switch {
	case obj.Size <= 0:
		return 0
	case obj.Size <= l.opts.SmallObject:
		return 1
	default:
		return (obj.Size + l.opts.BlockSize - 1) / l.opts.BlockSize
	}
}

// blockRange is the byte range [off, off+n) of block i of obj.
func (l *Loader) blockRange(obj store.Object, i int64) (off, n int64) {
	if obj.Size <= l.opts.SmallObject {
		return 0, obj.Size
	}
	off = i * l.opts.BlockSize
	return off, min(l.opts.BlockSize, obj.Size-off)
}

// blockOf is the index of the block holding byte off of obj.
func (l *Loader) blockOf(obj store.Object, off int64) int64 {
	if obj.Size <= l.opts.SmallObject {
		return 0
	}
	return off / l.opts.BlockSize
}

// key names block i of obj in the cache tier by where it starts, not by its
// index: a disk cache outlives a mount, and the next may run with another
// --block-size, under which block 1 is other bytes of the same length
// (block 1 of a 12 MiB file is bytes 8-12 MiB under 8 MiB blocks and 4-8
// MiB under 4 MiB blocks). Blocks that start at the same offset agree on
// every byte they share, and every tier read checks the length (fit). The
// offset is stored negated: older versions stored the index there, and an
// old index can equal a new offset.
func (l *Loader) key(obj store.Object, i int64) cache.Key {
	off, _ := l.blockRange(obj, i)
	return cache.Key{Object: obj.Key, ETag: obj.ETag, Block: -off}
}

// keyOff is the offset in its object of the block k names (see key).
func keyOff(k cache.Key) int64 { return -k.Block }

// handle is a block a reader is waiting for or holds: either bytes straight
// from the cache tier, or a reference to a flight.
type handle struct {
	data []byte
	f    *flight
}

// joinLocked takes a reference on the ready block or fetch in flight for k,
// if any, on behalf of a read. Called with l.mu held.
func (l *Loader) joinLocked(k cache.Key) *flight {
	f := l.ready[k]
	if f != nil {
		l.lru.MoveToBack(f.elem)
		f.readyAt = time.Now()
		l.stats.ReadyHits.Add(1)
	} else if f = l.flights[k]; f != nil {
		l.stats.Shared.Add(1)
	} else {
		return nil
	}
	f.refs++
	if f.prefetch && !f.used {
		l.stats.PrefetchUsed.Add(1)
	}
	f.used = true
	f.reads++
	return f
}

// startRead finds block i of obj for a foreground read, starting a fetch if
// no one holds or fetches it. It does not wait for the fetch.
func (l *Loader) startRead(obj store.Object, i int64) (handle, error) {
	k := l.key(obj, i)
	_, n := l.blockRange(obj, i)
	// Join a flight, else look in the tier (outside the lock: a disk hit
	// is a read), else start a flight. A flight may finish into the tier
	// while we look: its index answers that without I/O, and one more
	// look finds it.
	for looked := 0; ; looked++ {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return handle{}, ErrClosed
		}
		if f := l.joinLocked(k); f != nil {
			l.mu.Unlock()
			return handle{f: f}, nil
		}
		if looked == 2 || looked == 1 && !l.tierHas(k) {
			if g, ok := l.gaveUp[k]; ok {
				if g.left--; g.left <= 0 || time.Since(g.at) >= gaveUpFor {
					delete(l.gaveUp, k)
				} else {
					l.gaveUp[k] = g
				}
				if time.Since(g.at) < gaveUpFor {
					l.mu.Unlock()
					return handle{}, g.err
				}
			}
			f := l.newReadFlightLocked(obj, i, n)
			f.refs++ // the reader's
			f.used = true
			f.reads++
			l.mu.Unlock()
			return handle{f: f}, nil
		}
		l.mu.Unlock()
		if data, ok := l.tierGet(k, n); ok {
			return l.holdHit(obj, k, n, data), nil
		}
	}
}

// keepHitsAbove: a block from the cache tier longer than one kernel read
// (128 KiB) will be read again in pieces. It is held like a fetched block,
// under the budget, so that each piece does not cost another tier lookup:
// on a disk hit that is a pread and checksum of the whole block per piece.
const keepHitsAbove = 128 << 10

// holdHit wraps a block from the tier in a finished flight that the reader
// can keep ready (relKeep) for its next piece, when the budget has room;
// otherwise the reader gets the bytes alone.
func (l *Loader) holdHit(obj store.Object, k cache.Key, n int64, data []byte) handle {
	if n <= keepHitsAbove || !l.mem.tryAcquire(n+blockOverhead) {
		return handle{data: data}
	}
	f := doneFlight(obj, k, data, n+blockOverhead)
	f.used = true
	return handle{f: f}
}

// doneFlight wraps a block the loader did not fetch (a tier hit) in a
// finished flight holding charge bytes of the budget and one reference.
func doneFlight(obj store.Object, k cache.Key, data []byte, charge int64) *flight {
	done := make(chan struct{})
	close(done)
	return &flight{key: k, obj: obj, n: int64(len(data)), done: done, data: data, charge: charge, refs: 1}
}

// tierGet looks k up in the cache tier.
func (l *Loader) tierGet(k cache.Key, n int64) ([]byte, bool) {
	if l.tier == nil {
		return nil, false
	}
	data, ok := l.tier.Get(k)
	if !ok {
		return nil, false
	}
	if data, ok = l.fit(k, data, n); !ok {
		return nil, false
	}
	l.stats.CacheHits.Add(1)
	return data, true
}

// fit checks the length of block k (n bytes) found in the cache tier. A
// block of another length was written under another block size (see key):
// a longer one holds this block's bytes at its start, and serves them; a
// shorter one is of no use, and is removed from the tier, which keeps the
// first block it holds under a key: the block fetched now takes its place,
// where it would otherwise be fetched again on every read.
func (l *Loader) fit(k cache.Key, data []byte, n int64) ([]byte, bool) {
	switch {
	case int64(len(data)) == n:
		return data, true
	case int64(len(data)) > n:
		// A copy: the start of the longer block would keep all of it alive
		// under a charge of n bytes.
		return bytes.Clone(data[:n]), true
	}
	if r, ok := l.tier.(remover); ok {
		r.Remove(k)
	}
	return nil, false
}

// newReadFlightLocked registers and starts the fetch of a block a read
// waits on; the fetch holds one reference. Called with l.mu held.
func (l *Loader) newReadFlightLocked(obj store.Object, i, n int64) *flight {
	delete(l.copied, objVersion{obj.Key, obj.ETag}) // read through the loader after all
	f := l.registerLocked(obj, i, n, false, false)
	l.wg.Add(1)
	go l.runRead(f)
	return f
}

// registerLocked registers a fetch that holds one reference, for the caller
// to start. A queued block (one of a run, after its first) counts in
// pbytes only once its run's GET reaches it. Called with l.mu held.
func (l *Loader) registerLocked(obj store.Object, i, n int64, prefetch, queued bool) *flight {
	f := &flight{key: l.key(obj, i), obj: obj, n: n, prefetch: prefetch, queued: queued, done: make(chan struct{}), refs: 1}
	if prefetch {
		f.charge = n + blockOverhead // taken by the caller before
		l.pflights++
		if !queued {
			l.pbytes += n
		}
		l.stats.PrefetchIssued.Add(1)
	}
	l.flights[f.key] = f
	return f
}

// wait returns the bytes of h, or the caller's context error at once if ctx
// ends first; the fetch goes on for other waiters and the cache.
func (l *Loader) wait(ctx context.Context, h handle) ([]byte, error) {
	if h.f == nil {
		return h.data, nil
	}
	select {
	case <-h.f.done:
		return h.f.data, h.f.err
	case <-ctx.Done():
		return nil, fmt.Errorf("prefetch: read %q block at %d: %w", h.f.key.Object, keyOff(h.f.key), ctx.Err())
	}
}

// What a reader does with a block when it is done with it.
type relMode int

const (
	relDrop       relMode = iota // just let go (failed or abandoned read)
	relKeep                      // not read to its end: keep it ready for the next read
	relKeepStream                // relKeep for a sequential reader, whose next read is most likely the next piece
	relConsumed                  // read to its end: it leaves the ready map
)

// release drops the reader's reference on h. relKeep keeps a fetched block
// in the ready map for the reader's next read (the cache tier may be absent
// or have dropped it); relConsumed removes it from there.
func (l *Loader) release(h handle, mode relMode) {
	if h.f == nil {
		return
	}
	f := h.f
	var charge int64
	l.mu.Lock()
	switch mode {
	case relKeep, relKeepStream:
		l.keepReadyLocked(f, mode == relKeepStream)
	case relConsumed:
		charge = l.removeReadyLocked(f)
	}
	charge += l.unrefLocked(f)
	l.mu.Unlock()
	if charge > 0 {
		l.mem.release(charge)
	}
}

// keepReadyLocked puts a fetched block into the ready map unless the loader
// is closing or, for a block no sequential reader is in the middle of, a
// foreground read waits for budget (new holders would only be evicted
// again). A sequential reader's block stays: evictForRead spares it while
// that reader goes on, since evicting it would cost its whole GET again for
// the rest of it. Called with l.mu held.
func (l *Loader) keepReadyLocked(f *flight, stream bool) {
	// Spared blocks leave room for one more block at least, so that a read
	// waits for them only while the budget holds several (never with a
	// budget of one block, where the readers would take turns).
	stream = stream && l.streamBytes+f.charge <= l.mem.limit-(l.opts.BlockSize+blockOverhead)
	if f.elem != nil || l.closed || f.charge == 0 || !isDone(f) || f.err != nil || !stream && l.mem.pressured() {
		return
	}
	if _, busy := l.ready[f.key]; busy {
		return
	}
	f.refs++
	f.stream = stream
	if stream {
		l.streamBytes += f.charge
	}
	f.elem = l.lru.PushBack(f)
	f.readyAt = time.Now()
	l.ready[f.key] = f
}

func (l *Loader) removeReadyLocked(f *flight) (charge int64) {
	if f.elem == nil {
		return 0
	}
	l.lru.Remove(f.elem)
	f.elem = nil
	if f.stream {
		l.streamBytes -= f.charge
		f.stream = false
	}
	delete(l.ready, f.key)
	return l.unrefLocked(f)
}

// unrefLocked drops one reference and returns the charge to give back to
// the budget (after unlocking) when it was the last.
func (l *Loader) unrefLocked(f *flight) int64 {
	f.refs--
	if f.refs > 0 {
		return 0
	}
	if f.lent {
		l.pool.put(f.data)
		f.data, f.lent = nil, false
	}
	if f.charge == 0 {
		return 0
	}
	c := f.charge
	f.charge = 0
	return c
}

func isDone(f *flight) bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// evictOne drops the oldest ready block; with staleOnly, only one not read
// for ReadyTTL. It reports whether it dropped one.
func (l *Loader) evictOne(staleOnly bool) bool {
	return l.evictWhere(1, func(f *flight) bool {
		return !staleOnly || time.Since(f.readyAt) >= l.opts.ReadyTTL
	})
}

// evictWhere drops the oldest of the first scan ready blocks that ok
// accepts. It reports whether it dropped one.
func (l *Loader) evictWhere(scan int, ok func(*flight) bool) bool {
	l.mu.Lock()
	var victim *flight
	for e, i := l.lru.Front(), 0; e != nil && i < scan; e, i = e.Next(), i+1 {
		if f := e.Value.(*flight); ok(f) {
			victim = f
			break
		}
	}
	if victim == nil {
		l.mu.Unlock()
		return false
	}
	if victim.prefetch && !victim.used {
		l.stats.PrefetchWasted.Add(1)
	}
	charge := l.removeReadyLocked(victim)
	l.mu.Unlock()
	if charge > 0 {
		l.mem.release(charge)
	}
	return true
}

// readIdle: a ready block that a sequential reader is in the middle of, and
// that no read touched for this long, is given up for another read's block.
// Before that, the other read waits for a release: the reader is most likely
// about to finish the block, and evicting it would cost its whole GET again
// for the rest of it.
const readIdle = 50 * time.Millisecond

// readyScan bounds how far evictForRead looks past the oldest ready block.
const readyScan = 256

// evictForRead frees room for a foreground read: the oldest ready block but
// those a sequential reader touched less than readIdle ago. It reports
// whether it dropped one.
func (l *Loader) evictForRead() bool {
	return l.evictWhere(readyScan, func(f *flight) bool {
		return !f.stream || time.Since(f.readyAt) >= readIdle
	})
}

// runRead fetches a block a read waits on, on the loader's context, from
// the Foreground store. It waits for room in the budget; evicting ready
// blocks first, and any of them once idle for readIdle, guarantees progress
// (see budget.acquire).
func (l *Loader) runRead(f *flight) {
	defer l.wg.Done()
	ctx := l.ctx
	n := f.n + blockOverhead
	if err := l.mem.acquire(ctx, n, l.evictForRead, readIdle/4); err != nil {
		l.finish(f, nil, false, l.closedErr(f, err))
		return
	}
	l.mu.Lock()
	f.charge = n
	l.mu.Unlock()
	if err := acquireSlot(ctx, l.gets); err != nil {
		l.finish(f, nil, false, l.closedErr(f, err))
		return
	}
	defer func() { <-l.gets }()
	l.fetchRun(ctx, l.opts.Foreground, []*flight{f})
}

// runBlocks fetches a prefetch run (startPrefetchRun) once it has a
// prefetch slot and a GET slot.
func (l *Loader) runBlocks(run []*flight) {
	defer l.wg.Done()
	ctx := l.ctx
	err := acquireSlot(ctx, l.pgets)
	if err == nil {
		defer func() { <-l.pgets }()
		if err = acquireSlot(ctx, l.gets); err == nil {
			defer func() { <-l.gets }()
		}
	}
	if err != nil {
		err = l.closedErr(run[0], err)
		for _, f := range run {
			l.finish(f, nil, false, err)
		}
		return
	}
	l.fetchRun(ctx, l.st, run)
}

// finish publishes the outcome of f's fetch, files the block (cache tier,
// ready map, page cache) and drops the fetch's reference. lent says data
// is a buffer of the pool.
func (l *Loader) finish(f *flight, data []byte, lent bool, err error) {
	f.data, f.lent, f.err = data, lent, err
	// Fill the cache before waking the waiters (a Fill that returns has
	// its blocks in the tier) and before leaving the flights map, so that
	// a read arriving now joins this flight instead of fetching again. A
	// failed fetch leaves the map before it wakes them: a read that comes
	// after the failure fetches again, where joining would hand it an
	// error from before it came (a read right after the store is back).
	if err == nil && l.tier != nil {
		l.tier.Put(f.key, data)
	}
	if err == nil {
		close(f.done)
	}
	l.mu.Lock()
	delete(l.flights, f.key)
	if err != nil {
		close(f.done)
	}
	if errors.Is(err, store.ErrGaveUp) && f.reads > 0 {
		// Only a failure a read was handed: a prefetch that gave up with
		// no reader must not fail a read that has not tried.
		l.rememberGaveUpLocked(f.key, err, f.reads)
	}
	if f.prefetch {
		l.pflights--
		if !f.queued {
			l.pbytes -= f.n
		}
		if err == nil && !f.used && f.land&landCache == 0 {
			l.keepReadyLocked(f, false)
			if f.elem == nil {
				l.stats.PrefetchWasted.Add(1)
			}
		}
	}
	if err == nil && f.land&landKernel != 0 && !f.used {
		l.pushLocked(f)
	}
	charge := l.unrefLocked(f)
	l.mu.Unlock()
	if charge > 0 || f.prefetch {
		l.mem.release(charge) // also wakes prefetchers waiting for a slot
	}
}

func (l *Loader) closedErr(f *flight, err error) error {
	return fmt.Errorf("prefetch: fetch %q block at %d: %w (%w)", f.key.Object, keyOff(f.key), ErrClosed, err)
}

func acquireSlot(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gaveUpLocked says whether k's fetch gave up on a reader within
// gaveUpFor: prefetch leaves it to that reader's retry, which fails at
// once, instead of fetching it again for another --io-timeout.
func (l *Loader) gaveUpLocked(k cache.Key) bool {
	g, ok := l.gaveUp[k]
	return ok && time.Since(g.at) < gaveUpFor
}

// rememberGaveUpLocked files k's fetch that gave up with err, dropping the
// entries older than gaveUpFor when the map is full (all of them if none
// is).
func (l *Loader) rememberGaveUpLocked(k cache.Key, err error, reads int) {
	now := time.Now()
	if len(l.gaveUp) >= maxGaveUp {
		for key, g := range l.gaveUp {
			if now.Sub(g.at) >= gaveUpFor {
				delete(l.gaveUp, key)
			}
		}
		if len(l.gaveUp) >= maxGaveUp {
			clear(l.gaveUp)
		}
	}
	// A read(2) of a large block sends several READs, and retries only the
	// page it waits on: a few retries at most.
	l.gaveUp[k] = gaveUp{err: err, at: now, left: min(reads, maxRetriesPerGiveUp)}
}

// fetchErr counts the bytes a fetch of the block at off got and wraps its
// error.
func (l *Loader) fetchErr(ctx context.Context, obj store.Object, off int64, got int, err error) error {
	l.stats.GetBytes.Add(int64(got))
	if err == nil {
		return nil
	}
	if ctx.Err() != nil { // the loader is closing, not the store failing
		return fmt.Errorf("prefetch: fetch %q block at %d: %w (%w)", obj.Key, off, ErrClosed, err)
	}
	l.stats.GetErrors.Add(1)
	l.log.Debug("prefetch: fetch failed", "key", obj.Key, "offset", off, "err", err)
	return fmt.Errorf("prefetch: fetch %q block at %d: %w", obj.Key, off, err)
}

// readBlock reads the next n bytes of body, those at off of the object,
// into a buffer of the pool (lent) or of their own. On error the bytes read
// so far come with it.
func (l *Loader) readBlock(body io.Reader, off, n int64) (_ []byte, lent bool, _ error) {
	buf, lent := l.pool.get(n)
	if !lent {
		prefault(buf)
	}
	got, err := io.ReadFull(body, buf)
	if err != nil {
		return buf[:got], lent, fmt.Errorf("read body [%d,+%d) after %d bytes: %w", off, n, got, err)
	}
	return buf, lent, nil
}

// fetchRun fetches run, consecutive blocks of one object, from st with one
// GET, pinned to the object's ETag by the store, and finishes each block as
// its bytes arrive. Prefetch ahead of the reader fetches a large file's
// blocks one after the other anyway: one GET instead of one per block saves
// a round trip and the requests' CPU per block, and a whole object goes as
// one plain GET, which servers may send straight from the file.
func (l *Loader) fetchRun(ctx context.Context, st store.Store, run []*flight) {
	obj := run[0].obj
	off := keyOff(run[0].key)
	var total int64
	for _, f := range run {
		total += f.n
	}
	l.stats.Gets.Add(1)
	l.stats.Inflight.Add(1)
	defer l.stats.Inflight.Add(-1)
	rc, err := st.ReadRange(ctx, obj, off, total)
	if err != nil {
		err = l.fetchErr(ctx, obj, off, 0, err)
	}
	for i, f := range run {
		if f.queued {
			l.mu.Lock()
			f.queued = false
			l.pbytes += f.n
			l.mu.Unlock()
		}
		var data []byte
		var lent bool
		if err == nil {
			data, lent, err = l.readBlock(rc, off, f.n)
			err = l.fetchErr(ctx, obj, off, len(data), err)
			off += f.n
			if err != nil || i == len(run)-1 {
				rc.Close() // before filing the block: the connection is free
			}
		}
		if err != nil {
			if lent {
				l.pool.put(data)
			}
			data, lent = nil, false
		}
		l.finish(f, data, lent, err)
	}
}

// Prefetch outcomes.
type pfResult int

const (
	pfPresent pfResult = iota // held, cached or being fetched already
	pfStarted                 // a fetch was started
	pfNoRoom                  // no budget or too many prefetches: skipped
)

// startPrefetch starts a background fetch of block i of obj, for a reader
// (landReady), unless it is already held, cached or in flight. It never
// waits.
func (l *Loader) startPrefetch(obj store.Object, i int64) pfResult {
	return l.startPrefetchRun(obj, i, i+1)
}

// startPrefetchRun is startPrefetch for blocks i to end-1 of obj: the blocks
// after i that are not held, cached or in flight join block i's fetch, up to
// the first that is or that the budget has no room for, and one GET
// (runBlocks, on a goroutine of its own) fetches them in order.
func (l *Loader) startPrefetchRun(obj store.Object, i, end int64) pfResult {
	run, res := l.registerPrefetchRun(obj, i, end, false, landReady, nil)
	if res == pfStarted {
		go l.runBlocks(run)
	}
	return res
}

// registerPrefetchRun is startPrefetchRun but for the fetch: when it
// returns pfStarted, the caller must call runBlocks(run), on its own
// goroutine if it would wait for the run anyway (the planner does: a
// goroutine per file, and the stack each grows, cost more than the wait).
// It returns the run's flights in order. With hold, the caller gets a
// reference on each (to wait on them) and must release it (unhold).
// wanted, when not nil, is asked under l.mu just before the fetch is
// registered: a reader registers its own fetch under l.mu too, so a file
// the reader has reached is never fetched a second time by prefetch.
// With landCache the fetched blocks go to the cache tier only, not to the
// ready map (where they would hold budget until read): the sweep fetches
// far more than the budget, and the tier is where it must land.
func (l *Loader) registerPrefetchRun(obj store.Object, i, end int64, hold bool, land landing, wanted func() bool) ([]*flight, pfResult) {
	k := l.key(obj, i)
	_, n := l.blockRange(obj, i)
	l.mu.Lock()
	_, copied := l.copied[objVersion{obj.Key, obj.ETag}]
	present := l.closed || copied || l.ready[k] != nil || l.flights[k] != nil || l.gaveUpLocked(k)
	full := l.prefetchFullLocked(hold, n)
	l.mu.Unlock()
	if present {
		return nil, pfPresent
	}
	if l.tier != nil && l.tierPresent(obj, k, n, land) {
		return nil, pfPresent
	}
	if full {
		l.stats.PrefetchSkipped.Add(1)
		return nil, pfNoRoom
	}
	charge := n + blockOverhead
	if !l.mem.tryAcquire(charge) && !(l.evictOne(true) && l.mem.tryAcquire(charge)) {
		l.stats.PrefetchSkipped.Add(1)
		return nil, pfNoRoom
	}
	// Blocks after i may join the run, up to the first the tier has.
	last := i + 1
	for last < end && !l.tierHas(l.key(obj, last)) {
		last++
	}
	l.mu.Lock()
	// The tier again, from its index: a read may have fetched the block and
	// left the flights map since the look above.
	if l.closed || l.ready[k] != nil || l.flights[k] != nil || l.gaveUpLocked(k) || wanted != nil && !wanted() || l.tierHas(k) {
		l.mu.Unlock()
		l.mem.release(charge)
		return nil, pfPresent
	}
	if l.prefetchFullLocked(hold, n) {
		l.mu.Unlock() // another prefetch took the room since the first look
		l.mem.release(charge)
		l.stats.PrefetchSkipped.Add(1)
		return nil, pfNoRoom
	}
	if l.tier == nil {
		land &^= landCache
	}
	run := []*flight{l.registerLocked(obj, i, n, true, false)}
	for j := i + 1; j < last && l.pflights < l.maxPfetch; j++ {
		kj := l.key(obj, j)
		_, nj := l.blockRange(obj, j)
		if l.ready[kj] != nil || l.flights[kj] != nil || l.gaveUpLocked(kj) || !l.mem.tryAcquire(nj+blockOverhead) {
			break
		}
		run = append(run, l.registerLocked(obj, j, nj, true, true))
	}
	for _, f := range run {
		f.land = land
		if hold {
			f.refs++
		}
	}
	l.wg.Add(1) // done by runBlocks
	l.mu.Unlock()
	return run, pfStarted
}

// prefetchFullLocked says whether a prefetch of n more bytes must wait: too
// many prefetches in flight or, for prefetch across files (hold), too many
// bytes. What the network carries in a round trip or so keeps it busy; far
// more only makes every file arrive later, the one needed next included.
func (l *Loader) prefetchFullLocked(hold bool, n int64) bool {
	return l.pflights >= l.maxPfetch || hold && l.pflights > 0 && l.pbytes+n > l.opts.PrefetchBytes
}

// unhold drops a reference taken by registerPrefetchRun with hold, or by a push.
func (l *Loader) unhold(f *flight) {
	l.mu.Lock()
	charge := l.unrefLocked(f)
	l.mu.Unlock()
	if charge > 0 {
		l.mem.release(charge)
	}
}
