package prefetch

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"sync/atomic"

	"github.com/dataccel/dataccel/store"
)

// Reader reads one open file. ReadAt has io.ReaderAt semantics: a short
// read happens only at the end of the object, with io.EOF. A Reader is safe
// for concurrent use (the kernel may send several reads of one handle at once).
type Reader interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Close() error
}

// reader keeps only a few words of state, so thousands of open files cost
// nothing until they read; their buffers live in the loader, under its budget.
type reader struct {
	l   *Loader
	obj store.Object

	mu     sync.Mutex
	next   int64 // guarded by mu: offset just after the last read
	window int   // guarded by mu: read-ahead window, in blocks
	issued int64 // guarded by mu: last block read-ahead has covered
	run    int   // guarded by mu: reads in a row that followed the one before (see readAhead)
	begun  bool  // guarded by mu: a read has come (see stream)
	closed bool  // guarded by mu

	parts atomic.Bool // the reader's stream goes on by parts (see piece): read on every read, without mu
}

func (r *reader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

func (r *reader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := r.usable(ctx, off, len(p)); err != nil || len(p) == 0 {
		return 0, err
	}
	l := r.l
	r.stream(off)
	end := min(off+int64(len(p)), r.obj.Size)
	first, last := l.blockOf(r.obj, off), l.blockOf(r.obj, end-1)

	// Blocks are read one at a time: a reader never holds one block (and
	// its budget) while waiting for another, which could deadlock readers
	// against each other on the budget. The later blocks of a read spanning
	// several start at once as prefetch, so their GETs still overlap; but
	// for a reader that jumped here, only those it would read whole: not
	// those the cache tier holds, nor any once the cache is full (piece
	// reads the part it wants then).
	acc := r.readAhead(off, end, last)
	for b := first + 1; b <= last; b++ {
		if acc == streams || !l.cacheFull() && !l.tierHas(l.key(r.obj, b)) {
			l.startPrefetch(r.obj, b)
		}
	}

	n := 0
	for b := first; b <= last; b++ {
		data, _, err := r.piece(ctx, b, off, end, acc, p[n:], false)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], data)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// ReadView reads like ReadAt into p, but when the bytes lie in one block it
// returns a slice of the block itself instead of copying them into p. The
// caller must not modify it. It stays valid until the caller calls done,
// when done is not nil (a buffer of the loader's pool, which the loader
// lends again once its block is let go); else for good (blocks of their
// own are never modified or reused). It returns the bytes read, p[:n] or
// the block's slice.
func (r *reader) ReadView(ctx context.Context, p []byte, off int64) (data []byte, done func(), err error) {
	l := r.l
	end := min(off+int64(len(p)), r.obj.Size)
	if off < 0 || len(p) == 0 || off >= end || l.blockOf(r.obj, off) != l.blockOf(r.obj, end-1) {
		n, err := r.ReadAt(ctx, p, off)
		return p[:n], nil, err
	}
	if err := r.usable(ctx, off, len(p)); err != nil {
		return nil, nil, err
	}
	r.stream(off)
	b := l.blockOf(r.obj, off)
	acc := r.readAhead(off, end, b)
	data, done, err = r.piece(ctx, b, off, end, acc, p, true)
	if err == nil && len(data) < len(p) {
		err = io.EOF
	}
	return data, done, err
}

// usable says why a read of n bytes at off cannot start, if it cannot;
// io.EOF at or past the end. An empty read needs no live context.
func (r *reader) usable(ctx context.Context, off int64, n int) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("prefetch: read %q: %w", r.obj.Key, fs.ErrClosed)
	case off < 0:
		return fmt.Errorf("prefetch: read %q at %d: %w", r.obj.Key, off, fs.ErrInvalid)
	case off >= r.obj.Size:
		return io.EOF
	case n == 0:
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("prefetch: read %q: %w", r.obj.Key, err)
	}
	return nil
}

// stream fetches a large file of up to ReadAhead blocks with one GET (a run
// of all its blocks, as the sweep does) when its first read starts at
// offset 0 while the loader is busy: with StreamAt GETs in flight the link
// has parallelism to spare, and one GET per block would only cost requests
// (and servers that send a whole object straight from the file copy
// ranges). A sequential reader reads the blocks in the order they arrive.
// An idle loader keeps fetching block by block, in parallel, which is what
// gives a lone reader its bandwidth. So does a cache that churns: a first
// read at offset 0 is then no stream yet (see readAhead).
func (r *reader) stream(off int64) {
	r.mu.Lock()
	first := !r.begun
	r.begun = true
	r.mu.Unlock()
	l := r.l
	if !first || off != 0 || l.opts.StreamAt < 0 || l.stats.Inflight.Load() < int64(l.opts.StreamAt) || l.cacheChurns() {
		return
	}
	// Up to a full read-ahead window: what a sequential reader would have
	// in flight soon anyway, and a bound on what a reader that stops early
	// (a format sniffer) makes the loader fetch.
	if nb := l.numBlocks(r.obj); nb > 1 && nb <= int64(l.opts.ReadAhead) {
		l.startPrefetchRun(r.obj, 0, nb)
	}
}

// piece waits for block b and returns its bytes within [off, end), as a
// slice of the block (full capacity cut, so an append cannot write it) or,
// when a reader that jumped there reads only them (from the disk tier or
// the store: see part.go) or the block is a buffer of the pool, in dst,
// which has room for them. With view, a block in a buffer of the pool is
// handed out as a slice too, and held until the caller calls done; done is
// nil otherwise.
// acc says how the read follows the reader's reads before it: a stream's
// next read most likely reads on in this block.
func (r *reader) piece(ctx context.Context, b, off, end int64, acc access, dst []byte, view bool) (_ []byte, done func(), _ error) {
	l := r.l
	bOff, bn := l.blockRange(r.obj, b)
	lo, hi := max(off, bOff)-bOff, min(end, bOff+bn)-bOff
	// A block in a RAM tier that copies out parts is read so, whatever
	// the access: no block held for the next pieces, and no piece of it
	// counts as lost below.
	if l.readRAMPart(r.obj, b, dst[:hi-lo], lo) {
		l.handed.mark(l.key(r.obj, b), hi-lo)
		return dst[:hi-lo], nil, nil
	}
	// A stream reads whole blocks, and holds a block from the disk tier
	// ready for its next pieces; with no budget to hold it, each piece
	// would read the whole block from disk again, so it reads its part.
	// So may a reader's first read (begins): from disk, never as a part
	// fetch, since a stream would fetch the block whole right after. And
	// so does a stream's read in the middle of a block no one holds: it
	// read it whole and lost it (partLost). Such a stream reads its next
	// blocks by parts too while memory has no room for them: fetched
	// whole, they would be lost the same way, and another stream's with
	// them.
	random := acc == jumped || acc == nearby
	lost := acc == streams && (lo > 0 || r.parts.Load() && !l.mem.room(bn+blockOverhead))
	if random || lost || !l.mem.room(bn+blockOverhead) {
		fetch := partNever
		switch {
		case random:
			fetch = partMissed
		case lost:
			fetch = partLost
		}
		part, err := l.readPart(ctx, r.obj, b, dst[:hi-lo], lo, fetch)
		if err != nil {
			return nil, nil, err
		}
		if part {
			if lost {
				r.parts.Store(true)
			}
			l.handed.mark(l.key(r.obj, b), hi-lo)
			return dst[:hi-lo], nil, nil
		}
	}
	if acc == streams && r.parts.Load() {
		r.parts.Store(false)
	}
	h, err := l.startRead(r.obj, b)
	if err != nil {
		return nil, nil, fmt.Errorf("prefetch: read %q: %w", r.obj.Key, err)
	}
	data, err := l.wait(ctx, h)
	if err != nil {
		l.release(h, relDrop)
		return nil, nil, err
	}
	out := data[lo:hi:hi]
	lent := h.f != nil && h.f.lent
	if lent && !view {
		// The pool lends the buffer again once the block is let go.
		out = dst[:copy(dst, out)]
	}
	mode := relKeep
	switch {
	case hi == bn:
		mode = relConsumed
	case acc == streams:
		mode = relKeepStream
	case acc == jumped && l.tier != nil:
		// A reader that jumped here most likely reads elsewhere next; the
		// tier keeps the block for whoever reads it. Kept ready too, it
		// would hold budget that the RAM tier then gives up.
		mode = relConsumed
	}
	l.handed.mark(l.key(r.obj, b), hi-lo) // the kernel keeps what a read returns
	if lent && view {
		var once sync.Once
		return out, func() { once.Do(func() { l.release(h, mode) }) }, nil
	}
	l.release(h, mode)
	return out, nil, nil
}

// How a read follows the reader's reads before it (readAhead).
type access uint8

const (
	jumped  access = iota // far from where the read before ended
	nearby                // next to it, but fewer than streamRun reads in a row are
	begins                // a first read from offset 0 of a file of several blocks while the cache churns: a stream if the next read follows
	streams               // streamRun reads in a row next to each other, or a first read from offset 0
)

// streamRun is how many reads in a row, each following the one before,
// make a stream. With 3, a reader at random offsets of a 32 MiB file
// (reads within 1 MiB of where the one before ended count as next to it)
// takes about one read in 4,000 for part of a stream, where 1 took one in
// 16.
const streamRun = 3

// readAhead grows the window on sequential reads (1, 2, 4, ... ReadAhead
// blocks past the read) and shrinks it on a jump, then starts fetches for
// blocks of the window not covered yet. It never waits: a block that finds
// no budget is skipped and tried again by a later read. It reports how
// the read follows the reader's reads before it: it streams when it starts
// at offset 0 as the reader's first read, or when it and the streamRun-1
// reads before it each follow the read before them. A read or two that land next to the one before
// are no sign of a stream: a reader at random offsets in a large file
// does that now and then.
func (r *reader) readAhead(off, end, last int64) (acc access) {
	l := r.l
	// Concurrent kernel reads arrive slightly out of order; still sequential.
	slack := min(l.opts.BlockSize, 1<<20)
	nb := l.numBlocks(r.obj)
	r.mu.Lock()
	near := off >= r.next-slack && off <= r.next+slack
	// A read from the start, before the reader went further, begins a
	// stream; a reader that comes back to offset 0 (a format's header or
	// meta page) jumped there. With a cache that churns, it begins one
	// only if the next read follows it: a reader that opens a file, reads
	// its header and jumps away (HDF5, LMDB) would otherwise fetch blocks
	// ahead, or the whole file, that push out blocks readers read, on
	// every open.
	start := off == 0 && r.next <= slack
	begin := start && nb > 1 && l.cacheChurns()
	start = start && !begin
	switch {
	case start:
		r.run = streamRun
	case begin:
		r.run = streamRun - 1 // the next read, if it follows, makes a stream
	case near:
		r.run = min(r.run+1, streamRun)
	default:
		r.run = 0
	}
	switch {
	case start || near && r.run >= streamRun:
		acc = streams
	case begin:
		acc = begins
	case near:
		acc = nearby
	default:
		acc = jumped
	}
	streaming := acc == streams
	if nb <= 1 {
		r.next = end
		r.mu.Unlock()
		return acc
	}
	if streaming {
		r.window = min(max(1, r.window*2), l.opts.ReadAhead)
	} else {
		r.window /= 4
		r.issued = last
	}
	r.next = end
	from, to := max(r.issued+1, last+1), min(last+int64(r.window), nb-1)
	r.mu.Unlock()

	done := int64(-1)
	for b := from; b <= to; b++ {
		if res := l.startPrefetch(r.obj, b); res == pfNoRoom {
			break
		}
		done = b
	}
	if done >= 0 {
		r.mu.Lock()
		r.issued = max(r.issued, done)
		r.mu.Unlock()
	}
	return acc
}
