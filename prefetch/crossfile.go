package prefetch

import (
	"path"
	"sync"
	"time"

	"github.com/dataccel/dataccel/store"
)

// Siblings gives directory listing order; the fuse layer implements it from
// its listings. Next returns up to n files after key in key's directory, in
// listing (key) order. It should answer from memory: it is called often.
type Siblings interface {
	Next(key string, n int) []store.Object
	// Files returns every file directly in dir (a prefix ending in "/"):
	// nil when dir has no listing (yet), an empty slice when it has no file.
	Files(dir string) []store.Object
	// Dirs returns the directories directly in dir, as prefixes ending in
	// "/", in listing order.
	Dirs(dir string) []string
}

// Bounds on the planner's own state, so a job walking millions of files in
// thousands of directories costs a fixed amount of memory.
const maxDirs = 1024

// stepWindow: an open within this many files after the previous one still
// counts as walking the directory in order. Data-loader workers sharing a
// directory open its files a few places out of order.
const stepWindow = 8

// planner runs cross-file prefetch on a fixed pool of workers. It keeps a
// bounded lead ahead of the reader, in the announced order when there is one
// and the file is in it, else in directory order once the reader is seen to
// walk a directory.
type planner struct {
	l    *Loader
	wake chan struct{} // one pending wake-up for the workers

	// dirMu serializes directory tracking, which calls Siblings.Next.
	dirMu sync.Mutex
	dirs  map[string]*dirState // guarded by dirMu

	mu    sync.Mutex
	sib   Siblings       // guarded by mu
	epoch int            // guarded by mu: bumped by every Announce
	order []store.Object // guarded by mu: announced order
	cum   []int64        // guarded by mu: cum[i] = prefetch bytes of order[:i]
	index *orderIndex    // guarded by mu: finds a key in order
	pos   int            // guarded by mu: highest index opened (-1: none)
	low   int            // guarded by mu: lowest index not opened
	seen  []bool         // guarded by mu: seen[i]: order[i] was opened
	sched []bool         // guarded by mu: sched[i]: order[i] was handed to a worker
	next  int            // guarded by mu: below it, every index is seen or scheduled
	// heads are the readers' positions: indices opened whose successor is
	// not, most recent last (at most maxHeads). Data-loader workers each
	// read their own batch in order: when their batches lie further apart
	// than the lead, each is followed on its own.
	heads []head // guarded by mu
	opens int64  // guarded by mu: opens in this epoch
	queue []job  // guarded by mu: directory-order files to fetch
}

type dirState struct {
	last      string // furthest key opened in the current walk
	hits      int    // consecutive in-order steps
	scheduled string // highest key handed to the workers in this walk
	queued    int    // files queued in this walk (every dirSentinel-th keeps its tail)
	low       string // key the current walk started at
}

// head is one reader's position in the announced order.
type head struct {
	pos int   // last index it opened
	at  int64 // planner.opens when it did
}

// job is one file for a worker; idx >= 0 for the announced order.
type job struct {
	obj   store.Object
	epoch int
	idx   int
	tail  bool // push all but the last page: its read shows where the reader is
}

// Pushed files never reach this process again: the reader finds them in the
// page cache. Every few files in the lead keep their last page out of it, so
// that reading them sends a (one-page) READ: the planner still sees where
// the readers are and keeps its lead bounded. Directory order must see a
// step within stepWindow.
const (
	announcedSentinel = 8 // every 8th file of the announced order
	dirSentinel       = 4 // every 4th file queued in directory order
)

func newPlanner(l *Loader) *planner {
	return &planner{
		l:     l,
		wake:  make(chan struct{}, 1),
		dirs:  make(map[string]*dirState),
		sib:   l.opts.Siblings,
		pos:   -1,
		index: newOrderIndex(nil),
	}
}

// start launches the workers; they end with the loader's context.
func (p *planner) start() {
	for range p.l.opts.Workers {
		p.l.wg.Add(1)
		go p.worker()
	}
}

func (p *planner) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *planner) setSiblings(s Siblings) {
	p.mu.Lock()
	p.sib = s
	p.mu.Unlock()
}

// announce starts a new epoch. The planner keeps order (it must not be
// modified afterwards); its index is built by the first open that needs it.
func (p *planner) announce(order []store.Object) {
	cum := make([]int64, len(order)+1)
	for i, o := range order {
		cum[i+1] = cum[i] + p.l.prefetchBytes(o)
	}
	p.mu.Lock()
	p.epoch++
	p.order, p.cum, p.index = order, cum, newOrderIndex(order)
	p.seen = make([]bool, len(order))
	p.sched = make([]bool, len(order))
	p.pos, p.low, p.next = -1, 0, 0
	p.heads, p.opens = p.heads[:0], 0
	p.mu.Unlock()
	p.signal()
}

// opened moves the reader's position in the announced order or, for a file
// not in it, in its directory. It does no I/O (Siblings answers from memory),
// and tracks directories in open order, which an asynchronous queue would
// scramble.
func (p *planner) opened(obj store.Object) Siblings {
	var i int
	var announced bool
	p.mu.Lock()
	for {
		index := p.index
		p.mu.Unlock()
		i, announced = index.find(obj.Key) // outside mu: the first find builds it
		p.mu.Lock()
		if index == p.index {
			break
		}
		// A new epoch was announced meanwhile: find the file in its order.
	}
	if announced {
		// A jump ahead is a new reader (a data-loader worker starting its
		// batch) or a skip; readers behind it that stop opening files fall
		// out of the live heads, and the lead follows the live ones.
		p.pos = max(p.pos, i)
		p.seen[i] = true
		p.moveHead(i)
		for p.low < len(p.seen) && p.seen[p.low] {
			p.low++
		}
	}
	sib := p.sib
	p.mu.Unlock()
	if announced {
		p.signal()
	} else if sib != nil {
		p.dirEvent(sib, obj.Key)
	}
	return sib
}

// orderIndex finds a key's first index in an announced order. It is built
// when first asked, not when the order is announced: an epoch read from the
// page cache (a warm re-read) never asks, and the announcement, which the
// job waits for, does not pay for it: hashing every key of a shuffled order
// touches each at random, a cache miss or two per file.
type orderIndex struct {
	order []store.Object
	once  sync.Once
	index map[string]int // written once, by the first find
}

func newOrderIndex(order []store.Object) *orderIndex { return &orderIndex{order: order} }

// find returns the first index of key in the order. Concurrent callers wait
// for the one that builds the index.
func (x *orderIndex) find(key string) (int, bool) {
	x.once.Do(func() {
		x.index = make(map[string]int, len(x.order))
		for i, o := range x.order {
			if _, dup := x.index[o.Key]; !dup {
				x.index[o.Key] = i
			}
		}
	})
	i, ok := x.index[key]
	return i, ok
}

// maxHeads bounds the reader positions followed: more than the workers of
// a few data loaders.
const maxHeads = 64

// moveHead records that index i was opened: the run that reached the files
// just before i (or a new one) is now at i. Runs step by up to
// announcedSentinel: the files in between were pushed and read from the
// page cache.
func (p *planner) moveHead(i int) {
	p.opens++
	best := -1
	for k, h := range p.heads {
		if h.pos <= i && h.pos >= i-announcedSentinel && (best < 0 || h.pos > p.heads[best].pos) {
			best = k
		}
	}
	if best >= 0 {
		p.heads = append(p.heads[:best], p.heads[best+1:]...)
	}
	if i+1 < len(p.seen) && !p.seen[i+1] {
		if len(p.heads) == maxHeads {
			p.heads = p.heads[1:]
		}
		p.heads = append(p.heads, head{pos: i, at: p.opens})
	}
}

// live says whether a reader is still reading: it opened a file within the
// last few rounds of opens by all readers. A reader that stopped (a skip,
// the end of its batches) stops drawing the lead.
func (p *planner) live(h head) bool {
	return p.opens-h.at <= int64(8*len(p.heads)+32)
}

// take returns the next file to fetch.
func (p *planner) take() (j job, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if ok {
			p.signal() // there may be more: wake another worker
		}
	}()
	// The announced order is the order in which the job's steps consume
	// files, whichever worker reads them: fetch it front to back (earliest
	// deadline first) from the lowest file not yet opened. Files between
	// it and the furthest reader are the other workers' batches. Past the
	// furthest reader, stay within FileLead files and ByteLead bytes
	// (always at least one file).
	start := max(p.next, p.low)
	for start < len(p.order) && (p.seen[start] || p.sched[start]) {
		start++
	}
	p.next = start
	front := p.pos + 1
	lead := p.l.opts
	if front-start > 4*lead.FileLead {
		// The readers are spread further than the lead (large batches,
		// many workers) or one skipped ahead: follow each live reader,
		// then lead the furthest one.
		if i, ok := p.nextForHeads(); ok {
			p.sched[i] = true
			return p.announcedJob(i), true
		}
		start = front
		for start < len(p.order) && (p.seen[start] || p.sched[start]) {
			start++
		}
	}
	if start < len(p.order) && (start <= front ||
		start-front < lead.FileLead && p.cum[start+1]-p.cum[front] <= lead.ByteLead) {
		p.sched[start] = true
		if start == p.next {
			p.next = start + 1
		}
		return p.announcedJob(start), true
	}
	if len(p.queue) > 0 {
		j := p.queue[0]
		p.queue = p.queue[1:]
		return j, true
	}
	return job{}, false
}

// announcedJob is the job for index i of the announced order. Called with
// p.mu held.
func (p *planner) announcedJob(i int) job {
	return job{obj: p.order[i], epoch: p.epoch, idx: i, tail: i%announcedSentinel == announcedSentinel-1}
}

// nextForHeads picks, for readers spread too far apart for one lead, the
// file one of them needs soonest: the first one not yet opened or
// scheduled after each live reader's position, nearest first, within
// FileLead files of lead in all.
func (p *planner) nextForHeads() (int, bool) {
	if len(p.heads) == 0 {
		return 0, false
	}
	depth := max(1, p.l.opts.FileLead/len(p.heads))
	for d := 1; d <= depth; d++ {
		open := false // some reader still has files ahead of it
		for _, h := range p.heads {
			if !p.live(h) {
				continue
			}
			i := h.pos + d
			if i >= len(p.order) {
				continue
			}
			open = true
			if !p.seen[i] && !p.sched[i] {
				return i, true
			}
		}
		if !open {
			break
		}
	}
	return 0, false
}

// relevant says whether a job is still ahead of the reader: in the current
// epoch of the announced order, or past the furthest file opened in its
// directory. If the reader got there first, its own read fetches the file;
// fetching it again here would be a second GET.
func (p *planner) relevant(j job) bool {
	if j.idx < 0 {
		p.dirMu.Lock()
		defer p.dirMu.Unlock()
		st := p.dirs[path.Dir(j.obj.Key)]
		return st == nil || j.obj.Key > st.last
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return j.epoch == p.epoch && !p.seen[j.idx] && j.idx >= p.low
}

func (p *planner) worker() {
	defer p.l.wg.Done()
	ctx := p.l.ctx
	for {
		j, ok := p.take()
		if !ok {
			select {
			case <-p.wake:
			case <-ctx.Done():
				return
			}
			continue
		}
		p.fetchFile(j)
		if ctx.Err() != nil {
			return
		}
	}
}

// fetchFile fetches the leading blocks of one file and waits for them, so
// the number of cross-file fetches in flight is the number of workers. When
// the budget is full it waits for room rather than skip: skipping would
// leave a hole in the lead that the reader then waits on.
func (p *planner) fetchFile(j job) {
	l := p.l
	wanted := func() bool { return p.relevant(j) }
	land := landKernel // and the ready map
	if j.tail {
		land |= landTail
	}
	nb := min(l.numBlocks(j.obj), int64(l.opts.FileBlocks))
	for b, ok := int64(0), true; b < nb && ok; {
		b, ok = l.fetchAhead(j.obj, b, nb, land, wanted)
	}
}

// fetchAhead prefetches blocks b to end-1 of obj, as one run (one GET) as
// far as they are missing, and waits for them, waiting for room (budget or
// a prefetch slot) when there is none: skipping would leave a hole that the
// reader then waits on. It returns the block after those it fetched or
// found present, and false when they are no longer wanted or the loader is
// closing.
func (l *Loader) fetchAhead(obj store.Object, b, end int64, land landing, wanted func() bool) (int64, bool) {
	for {
		if wanted != nil && !wanted() || l.ctx.Err() != nil {
			return b, false
		}
		room := l.mem.released()
		run, res := l.registerPrefetchRun(obj, b, end, true, land, wanted)
		switch res {
		case pfStarted:
			l.runBlocks(run) // here: this goroutine would wait for it anyway
			for _, f := range run {
				l.unhold(f)
			}
			return b + int64(len(run)), true
		case pfPresent:
			return b + 1, true
		}
		// The slot cap is not signalled by the budget: poll it too.
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-room:
		case <-t.C:
		case <-l.ctx.Done():
		}
		t.Stop()
	}
}

// dirEvent tracks in-order opens per directory and, once DirHits in-order
// steps are seen, queues the next files of the directory, up to FileLead
// files and ByteLead bytes past the one just opened. Keys are compared as
// strings: listing order is key order, as S3 lists.
func (p *planner) dirEvent(sib Siblings, key string) {
	p.dirMu.Lock()
	defer p.dirMu.Unlock()
	dir := path.Dir(key)
	st := p.dirs[dir]
	if st == nil {
		if len(p.dirs) >= maxDirs {
			for d := range p.dirs { // drop any one: a walk resumes in a few opens
				delete(p.dirs, d)
				break
			}
		}
		st = &dirState{}
		p.dirs[dir] = st
	}
	switch {
	case st.last == "":
		st.last, st.scheduled, st.low = key, key, key
	case key == st.last:
		return // reopened: no news
	case key > st.last:
		if within(sib, st.last, key, stepWindow) {
			st.hits++
		} else {
			st.hits = 0
		}
		st.last = key
	case key > st.low && within(sib, key, st.last, 4*p.l.opts.FileLead):
		// Behind, but after the walk's start and not far: a reader
		// lagging the others in a shared walk. Restarting here would
		// fetch again the files the others have read.
		return
	default:
		// Back to the walk's start or far back (e.g. the next epoch): a
		// new walk from here. Files still held or cached are not fetched
		// again; the rest are wanted.
		st.hits, st.last, st.scheduled, st.low, st.queued = 0, key, key, key, 0
	}
	if st.hits < p.l.opts.DirHits {
		return
	}
	var (
		bytes int64
		add   []job
	)
	for i, o := range p.l.sweep.leaveUnopened(sib.Next(key, p.l.opts.FileLead), st.scheduled) {
		if o.IsPrefix {
			continue
		}
		bytes += p.l.prefetchBytes(o)
		if i > 0 && bytes > p.l.opts.ByteLead {
			break
		}
		if o.Key > st.scheduled {
			st.queued++
			add = append(add, job{obj: o, idx: -1, tail: st.queued%dirSentinel == 0})
			st.scheduled = o.Key
		}
	}
	if len(add) == 0 {
		return
	}
	p.mu.Lock()
	room := max(0, 4*p.l.opts.FileLead-len(p.queue))
	p.queue = append(p.queue, add[:min(room, len(add))]...)
	p.mu.Unlock()
	p.signal()
}

// prefetchBytes is how many bytes cross-file prefetch fetches of obj.
func (l *Loader) prefetchBytes(obj store.Object) int64 {
	if obj.Size <= l.opts.SmallObject {
		return max(obj.Size, 0)
	}
	return min(obj.Size, int64(l.opts.FileBlocks)*l.opts.BlockSize)
}

// kindAdded takes each directory's walk back to its reader: files of a
// kind not opened before were passed over, and are wanted now (a
// directory of .jpg and .png files whose first .png is opened after a
// few .jpg). Files held or cached are not fetched again.
func (p *planner) kindAdded() {
	p.dirMu.Lock()
	defer p.dirMu.Unlock()
	for _, st := range p.dirs {
		st.scheduled = min(st.scheduled, st.last)
	}
}

// within says whether key is among the n files after from.
func within(sib Siblings, from, key string, n int) bool {
	for _, o := range sib.Next(from, n) {
		if o.Key == key {
			return true
		}
	}
	return false
}
