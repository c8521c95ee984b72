package prefetch

import (
	"path"
	"strings"
	"sync"
	"time"

	"github.com/dataccel/dataccel/store"
)

// sweepAfter is how many files of one directory must be opened before the
// rest of it is fetched: a shuffled epoch soon spreads its reads over every
// directory of the dataset, while a listing (ls, find) opens none and a job
// that reads one subtree never touches the others.
const sweepAfter = 2

// spreadAfter is how many subdirectories of one directory must hold a
// directory swept for its own opens before every directory below it is
// swept too: reads that spread over that many siblings are an epoch over
// all of them, and with few files in each directory (ImageNet's 1,000
// classes in a small sample) waiting for two opens in each leaves much of
// the epoch to one GET per file. In a deeper tree
// (train/<class>/<subject>/) the reads spread over four classes as soon as
// over four subjects of one class, and the sweep takes the whole dataset.
const spreadAfter = 4

// sweepBase is how many files of a directory (in listing order) its sweep
// takes at once, and sweepLead how many more it may take for each file
// read in it: a directory of up to sweepBase files (an ImageNet-sized
// sample's class) is swept whole at once, while a larger one is swept
// ahead of its reads. A full epoch reads files of it all along and has it
// all queued once it has read a sixteenth of it; a job that reads a few
// files of each directory (a validation subset, a debugging run) gets
// sweepBase and sweepLead files a file read fetched, not every directory
// whole: two files read of a directory of 2,000 fetched all 2,000.
const (
	sweepBase = 64
	sweepLead = 16
)

// sweeper fetches the rest of each directory whose files are being read,
// into the cache tier, up to Options.SweepBytes in all. An epoch reads every file of the dataset once; when
// the order is unknown (a shuffle nobody announced) but the set is known
// and fits the cache, fetching it at full parallelism turns a latency-bound
// epoch (one round trip per file per reader) into a bandwidth-bound one.
//
// It fetches only the kinds of file (by extension) the job has opened: a
// job that reads the labels (.json, .cls) beside the images, or the
// captions, reads no image, and a sweep of whole directories fetched a
// hundred times the bytes it read. Files of a kind not opened yet wait,
// and queue at the first open of one.
type sweeper struct {
	l *Loader

	mu       sync.Mutex
	dirs     map[string]*sweepDir // guarded by mu
	spread   map[string]int       // guarded by mu: by directory, its subdirectories that hold a swept directory
	unlisted map[string]*unlisted // guarded by mu: parents spread to while some directories had no listing
	kinds    map[string]bool      // guarded by mu: the kinds (kindOf) of the files opened, at most maxKinds
	anyKind  bool                 // guarded by mu: past maxKinds, every kind is fetched
	waiting  map[string][]string  // guarded by mu: by kind not opened yet, the swept directories that hold files of it
	nWaiting int                  // guarded by mu: directories in waiting, at most maxWaiting
	draining bool                 // guarded by mu: drain is at work on the kinds in drains
	drains   []string             // guarded by mu: kinds opened whose waiting directories are to be queued
	queue    []store.Object       // guarded by mu: files to fetch, in order
	bytes    int64                // guarded by mu: bytes queued so far, bounded by SweepBytes
	pushed   int64                // guarded by mu: bytes queued for the page cache, bounded by SweepPushBytes
	running  int                  // guarded by mu: workers alive
	logged   bool                 // guarded by mu: the first sweep was logged
}

// maxWaiting bounds the directories kept for the kinds of file not opened
// yet (a directory with a dozen kinds counts a dozen times); past it such
// files are left to their own reads. Directories, not files: their
// listings hold the files, and a label scan of a million images would
// keep a million.
const maxWaiting = 1 << 18

// maxKinds bounds the kinds of file told apart: past it every kind is
// fetched (names whose extension differs from file to file would
// otherwise keep the sweep from fetching anything).
const maxKinds = 64

// compressedExts are the extensions of a compressed file, whose kind is
// the extension before it too (labels.json.gz is not a shard.tar.gz).
var compressedExts = [...]string{".gz", ".bz2", ".xz", ".zst", ".lz4", ".br", ".z"}

func compressed(ext string) bool {
	for _, c := range compressedExts {
		if strings.EqualFold(ext, c) {
			return true
		}
	}
	return false
}

// kindOf is the extension of key's name in lower case and without its
// digits ("" for none), with the one before it for a compressed file: the
// kind of file a sweep fetches once one of its kind is opened. Without the
// digits, numbered shards are one kind (x.tfrecord-00000-of-01024,
// frame.000001).
func kindOf(key string) string {
	name := key[strings.LastIndexByte(key, '/')+1:]
	ext := path.Ext(name)
	if compressed(ext) {
		ext = path.Ext(name[:len(name)-len(ext)]) + ext
	}
	plain := true
	for i := 0; i < len(ext) && plain; i++ {
		c := ext[i]
		plain = (c < 'A' || c > 'Z') && (c < '0' || c > '9')
	}
	if plain {
		return ext // no copy: the common case
	}
	b := make([]byte, 0, len(ext))
	for i := 0; i < len(ext); i++ {
		switch c := ext[i]; {
		case c >= '0' && c <= '9':
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// fetchesLocked says whether the sweep fetches files of kind. Callers hold
// mu.
func (s *sweeper) fetchesLocked(kind string) bool { return s.anyKind || s.kinds[kind] }

// leaveUnopened returns objs (files in listing order) less those after
// key whose kind no file opened has: directory order fetches ahead only
// the kinds the job reads (labels read beside images leave the images),
// and a later walk, once one of a kind is opened, fetches those. The files
// up to key were scheduled already and are not looked at. One lock for
// the window; objs itself when nothing is left out.
func (s *sweeper) leaveUnopened(objs []store.Object, key string) []store.Object {
	kinds := make([]string, len(objs)) // outside mu, which every open takes
	for i, o := range objs {
		if o.Key > key && !o.IsPrefix {
			kinds[i] = kindOf(o.Key)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var kept []store.Object
	for i, o := range objs {
		leave := o.Key > key && !o.IsPrefix && !s.fetchesLocked(kinds[i])
		switch {
		case leave && kept == nil:
			kept = append(make([]store.Object, 0, len(objs)), objs[:i]...)
		case !leave && kept != nil:
			kept = append(kept, o)
		}
	}
	if kept == nil {
		return objs
	}
	return kept
}

// kindOpened records the kind of a file opened (with every open, sweep or
// not: directory-order prefetch asks too, so before the planner hears of
// the open), and reports whether it is a kind not fetched before (fresh)
// and whether startDrain is to be called for the directories that waited
// for it.
func (s *sweeper) kindOpened(key string) (fresh, drain bool) {
	kind := kindOf(key) // outside mu, which every open takes
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fetchesLocked(kind) {
		return false, false
	}
	return true, s.kindOpenedLocked(kind)
}

// kindOpenedLocked records that a file of kind was opened, and queues for
// drain the directories that waited for it (all of them once past
// maxKinds). It reports whether drain is to be started (startDrain).
// Callers hold mu.
func (s *sweeper) kindOpenedLocked(kind string) (start bool) {
	if s.fetchesLocked(kind) {
		return false
	}
	if len(s.kinds) < maxKinds {
		s.kinds[kind] = true
		if len(s.waiting[kind]) > 0 {
			s.drains = append(s.drains, kind)
		}
	} else {
		s.anyKind = true
		for k := range s.waiting {
			s.drains = append(s.drains, k)
		}
	}
	if len(s.drains) == 0 || s.draining {
		return false
	}
	s.draining = true
	return true
}

// startDrain starts drain, unless the loader is closing (or has no
// listings to drain from). Under Loader.mu, as every wg.Add (see
// queueFiles), with mu not held.
func (s *sweeper) startDrain(sib Siblings) {
	l := s.l
	l.mu.Lock()
	if !l.closed && sib != nil {
		l.wg.Add(1)
		go s.drain(sib)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	s.mu.Lock()
	s.draining = false
	s.mu.Unlock()
}

// drain queues the files of the kinds in drains from the directories that
// waited for them, in the order they were swept, as far as SweepBytes
// allows. In the background: a directory's files are listed for it, and a
// dataset of a thousand directories holds a million files.
func (s *sweeper) drain(sib Siblings) {
	defer s.l.wg.Done()
	for {
		s.mu.Lock()
		if len(s.drains) == 0 || s.l.ctx.Err() != nil {
			s.draining = false
			s.mu.Unlock()
			return
		}
		kind := s.drains[0]
		s.drains = s.drains[1:]
		dirs := s.waiting[kind]
		delete(s.waiting, kind)
		s.nWaiting -= len(dirs)
		s.mu.Unlock()
		for _, d := range dirs {
			if s.l.ctx.Err() != nil {
				break // closing: the loop above ends it
			}
			listed := sib.Files(d)
			s.mu.Lock()
			if sd := s.dirs[d]; sd != nil {
				// What its sweep took while the kind waited: what it
				// took since came as the kind was fetched, and the rest
				// comes as its reads do.
				listed = listed[:min(sd.waits[kind], len(listed))]
				delete(sd.waits, kind)
			}
			s.mu.Unlock()
			var files []store.Object
			for _, f := range listed {
				if kindOf(f.Key) == kind {
					files = append(files, f)
				}
			}
			s.queueFiles(nil, files, 0) // a smaller directory later may still fit
		}
	}
}

// sweepDir is the sweep's state of one directory, guarded by sweeper.mu.
type sweepDir struct {
	opens   int     // distinct files opened in it before its sweep began
	first   string  // the key of the first file opened: opening it again counts no more
	queued  bool    // its sweep began
	reads   float64 // files read in it since, as far as the opens seen tell (see opened)
	allowed int     // files of its listing the sweep may take: sweepBase, then sweepLead a file read
	taken   int     // files of its listing the sweep took (queued, or left waiting for their kind)
	listed  int     // files in its listing when the sweep last took some
	whole   bool    // the sweep took every file of its listing
	counted bool    // in its parent's spread: it holds a swept directory
	// waits: by kind not opened yet, how many files of its listing the
	// sweep had taken when it last left files of that kind waiting (drain
	// queues those, no more: files taken later came as their kind was
	// fetched); the directory is in sweeper.waiting[kind] once.
	waits map[string]int
}

// unlisted is what a spread over a parent left for later: its directories
// that had no listing yet, and when it ran.
type unlisted struct {
	parent string
	dirs   []string
	at     time.Time
}

// respreadEvery bounds how often a spread returns to the directories it
// left unlisted: it runs on a reader's open, and each pass looks at all
// of them.
const respreadEvery = 20 * time.Millisecond

// maxSweepDirs bounds the directories tracked (ImageNet has 1,000).
const maxSweepDirs = 1 << 16

func parentOf(key string) string { return key[:strings.LastIndexByte(key, '/')+1] }

// opened counts an open in the file's directory and, once enough of it is
// being read, queues the rest of it, and once enough of its siblings are,
// every directory below their parent, while the sweep stays within
// SweepBytes. Once an ancestor's reads have spread, a directory below it is
// swept at its first open: a job that opens files from a list of paths,
// never walking the tree, has no listing of a directory before its first
// open, so the spread could not queue it.
func (s *sweeper) opened(sib Siblings, obj store.Object) {
	if sib == nil {
		return
	}
	dir := parentOf(obj.Key)
	s.mu.Lock()
	d := s.dirLocked(dir)
	if d == nil || d.whole {
		s.mu.Unlock()
		return
	}
	if d.queued { // a directory larger than sweepBase: its sweep keeps ahead of its reads
		// Files the sweep took may be read from the page cache it pushed
		// them into, with no open reaching the mount: an open seen stands
		// for as many reads as a job reading the directory evenly makes
		// for each read of a file not taken.
		d.reads += float64(d.listed) / float64(max(1, d.listed-d.taken))
		d.allowed = max(d.allowed, int(sweepLead*d.reads))
		// In steps of half what it took: each step copies the listing.
		more := d.allowed >= min(d.taken+max(sweepBase/2, d.taken/2), d.listed)
		s.mu.Unlock()
		if more {
			s.takeFiles(d, sib.Files(dir)) // from memory, outside the lock
		}
		return
	}
	need := sweepAfter
	if s.spreadOverLocked(dir) {
		need = 1
	}
	// Opens of distinct files: a file read again (a re-read, or the
	// kernel's retry of a failed read, which comes to a new reader) is not
	// a second file of the directory (counted as one, it swept the
	// directory whole).
	if d.opens == 1 && obj.Key == d.first && need > 1 {
		s.mu.Unlock()
		return
	}
	if d.opens == 0 {
		d.first = obj.Key
	}
	if d.opens++; d.opens < need {
		s.mu.Unlock()
		return
	}
	d.queued = true
	d.reads = float64(d.opens)
	d.allowed = max(sweepBase, sweepLead*d.opens)
	first := !s.logged
	s.logged = true
	// Each ancestor counts its children that hold a swept directory (this
	// one, or one below), and spreads at spreadAfter of them; the bucket's
	// top level has no parent. Earlier spreads may have left directories
	// below any ancestor unlisted.
	var spreads []string // innermost first
	var respread []unlisted
	counting := true
	for a, child := parentOf(strings.TrimSuffix(dir, "/")), dir; child != ""; a, child = parentOf(strings.TrimSuffix(a, "/")), a {
		if u := s.unlisted[a]; u != nil && time.Since(u.at) >= respreadEvery {
			respread = append(respread, *u) // this spread takes them; it files what is still unlisted
			delete(s.unlisted, a)
		}
		if c := s.dirLocked(child); counting && c != nil && !c.counted {
			c.counted = true
			if s.spread[a]++; s.spread[a] == spreadAfter {
				spreads = append(spreads, a)
			}
		} else {
			counting = false // counted before, and so were its ancestors
		}
	}
	s.mu.Unlock()

	if first {
		// Once: a job that reads a few files of each directory learns
		// where its extra GETs come from, and how to stop them.
		s.l.log.Info("prefetch: reads spread over a directory: files of it, and of each directory they spread over, are fetched ahead of them as far as the cache keeps them (an epoch reads every file; --sweep=false for a job that reads only a few files of each directory)",
			"directory", dir)
	}
	s.takeFiles(d, sib.Files(dir)) // from memory, outside the lock
	for _, a := range spreads {
		if !s.spreadTo(sib, a, sib.Dirs(a)) {
			return
		}
	}
	for _, u := range respread {
		if !s.spreadTo(sib, u.parent, u.dirs) {
			return
		}
	}
}

// spreadOverLocked reports whether reads have spread over an ancestor of
// dir. Callers hold mu.
func (s *sweeper) spreadOverLocked(dir string) bool {
	for a := dir; a != ""; {
		a = parentOf(strings.TrimSuffix(a, "/"))
		if s.spread[a] >= spreadAfter {
			return true
		}
	}
	return false
}

// spreadTo queues the files of each of dirs (directories of parent) not
// queued yet whose listing is held, and of every directory below them.
// Those not listed yet are left for a later spread (the mount lists ahead
// of a reader that opens files across directories) or for their own first
// open. It reports false once the sweep is full.
func (s *sweeper) spreadTo(sib Siblings, parent string, dirs []string) bool {
	var later []string
	for _, sub := range dirs {
		s.mu.Lock()
		d := s.dirLocked(sub)
		skip := d == nil || d.queued
		s.mu.Unlock()
		if skip {
			continue
		}
		files := sib.Files(sub)
		if files == nil {
			later = append(later, sub)
			continue
		}
		s.mu.Lock()
		skip = d.queued
		if !skip {
			d.queued = true
			d.allowed = sweepBase // none of it read yet: its reads take it further
		}
		s.mu.Unlock()
		if !skip && !s.takeFiles(d, files) {
			return false // the sweep is full: no later spread can add any
		}
		if below := sib.Dirs(sub); len(below) > 0 && !s.spreadTo(sib, sub, below) {
			return false
		}
	}
	if len(later) > 0 {
		s.mu.Lock()
		s.unlisted[parent] = &unlisted{parent: parent, dirs: later, at: time.Now()}
		s.mu.Unlock()
	}
	return true
}

// takeFiles queues the files of d's listing, files, that d's sweep may
// take (sweepDir.allowed) and has not taken yet (those before taken were taken already; a
// relisting that moved them only costs a file fetched twice, which the
// tier then holds, or one left to its read). It reports false once the
// sweep is full (queueFiles).
func (s *sweeper) takeFiles(d *sweepDir, files []store.Object) bool {
	if files == nil {
		return true // no listing (dropped while idle): a later open tries again
	}
	s.mu.Lock()
	from, to := min(d.taken, len(files)), min(d.allowed, len(files))
	if to > from {
		d.taken = to
	}
	d.listed = len(files)
	d.whole = d.whole || to == len(files)
	s.mu.Unlock()
	if to <= from {
		return true
	}
	// A chunk that would take the sweep past SweepBytes stays untaken for
	// good, as a whole directory did: a smaller one later may still fit.
	return s.queueFiles(d, files[from:to], to)
}

// dirLocked returns the state of dir, new if need be (kept for the
// loader's life: callers hold on to it outside mu); nil past maxSweepDirs.
func (s *sweeper) dirLocked(dir string) *sweepDir {
	d := s.dirs[dir]
	if d == nil && len(s.dirs) < maxSweepDirs {
		d = &sweepDir{}
		s.dirs[dir] = d
	}
	return d
}

// queueFiles queues files, those of d's listing up to taken that its sweep
// takes now, of the kinds opened (d waits for a file of each other kind to
// be opened; nil d: drain's, of a kind now fetched), and starts workers for
// them; it reports false, queueing none, when they would take the sweep
// past SweepBytes.
func (s *sweeper) queueFiles(d *sweepDir, files []store.Object, taken int) bool {
	kinds := make([]string, len(files)) // outside mu, which every open takes
	for i, f := range files {
		kinds[i] = kindOf(f.Key)
	}
	s.mu.Lock()
	var size int64
	n := 0
	for i, f := range files {
		if s.fetchesLocked(kinds[i]) {
			size += f.Size
			n++
		}
	}
	if s.bytes+size > s.l.opts.SweepBytes {
		s.mu.Unlock()
		return false // the cache could not keep it: fetching would only evict
	}
	s.bytes += size
	if n == len(files) {
		s.queue = append(s.queue, files...)
	} else {
		for i, f := range files {
			kind := kinds[i]
			if s.fetchesLocked(kind) {
				s.queue = append(s.queue, f)
				continue
			}
			if d == nil {
				continue // drain queues one kind, which is fetched
			}
			if _, waits := d.waits[kind]; !waits {
				if s.nWaiting >= maxWaiting {
					continue
				}
				if d.waits == nil {
					d.waits = map[string]int{}
				}
				s.waiting[kind] = append(s.waiting[kind], parentOf(f.Key))
				s.nWaiting++
			}
			d.waits[kind] = taken
		}
	}
	start := s.workers() - s.running
	if n == 0 {
		start = 0 // nothing queued: no worker to start
	}
	s.running += start
	s.mu.Unlock()
	if start == 0 {
		return true
	}
	// Under Loader.mu, as every wg.Add: once Close has set closed and
	// waits, no worker may start (the open that queued them can race it).
	l := s.l
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		s.mu.Lock()
		s.running -= start
		s.mu.Unlock()
		return true
	}
	l.wg.Add(start)
	l.mu.Unlock()
	for range start {
		go s.worker()
	}
	return true
}

func (s *sweeper) take() (store.Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 || s.l.ctx.Err() != nil {
		s.running--
		return store.Object{}, false
	}
	o := s.queue[0]
	s.queue = s.queue[1:]
	return o, true
}

// landFor says where a file about to be fetched lands: the tier and, while
// SweepPushBytes allows, the page cache too.
func (s *sweeper) landFor(obj store.Object) landing {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pushed+obj.Size > s.l.opts.SweepPushBytes {
		return landCache
	}
	s.pushed += obj.Size
	return landCache | landKernel
}

func (s *sweeper) worker() {
	defer s.l.wg.Done()
	l := s.l
	for {
		obj, ok := s.take()
		if !ok {
			return
		}
		land := landing(0)
		for b, nb := int64(0), l.numBlocks(obj); b < nb; {
			if l.tierHas(l.key(obj, b)) {
				b++ // cached by an earlier epoch or mount: no read, no GET
				continue
			}
			if !s.waitForDisk() {
				return // closing
			}
			if land == 0 {
				land = s.landFor(obj)
			}
			var ok bool
			if b, ok = l.fetchAhead(obj, b, nb, land, nil); !ok {
				return // closing
			}
		}
	}
}

// waitForDisk waits while the cache tier's disk writes are behind: what the
// sweep fetches lands only in the cache, and a block the disk queue drops
// would be a GET for nothing. It reports false once the loader closes.
func (s *sweeper) waitForDisk() bool {
	b, ok := s.l.tier.(backlogger)
	for ok && b.Backlogged() {
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-s.l.ctx.Done():
			t.Stop()
			return false
		}
	}
	return s.l.ctx.Err() == nil
}

// workers is the sweep's share of the store. Measured on a loaded
// 2-core server: half the slots beat both a quarter (too little in flight)
// and all prefetch slots (readers' own GETs queue behind the sweep).
func (s *sweeper) workers() int { return max(1, s.l.opts.MaxInflight/2) }
