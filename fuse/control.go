package fuse

import (
	"bytes"
	"context"
	"errors"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/store"
)

// ControlDir is the name of the control directory at the mount's root. It
// is found by lookup but never listed, so dataset walkers do not see it.
const ControlDir = ".dataccel"

// maxPathLen bounds a line of an announced list: Linux's PATH_MAX, and
// four times the longest S3 key.
const maxPathLen = 4096

// maxAnnounceBytes bounds one write of .dataccel/prefetch: ImageNet-1k's
// 1.28M paths (train/n01440764/n01440764_10026.JPEG) take about 50 MB.
const maxAnnounceBytes = 256 << 20

// Control is what the control files reach in the rest of dataccel.
type Control interface {
	// Announce sets the order in which files will be read next (an epoch).
	Announce(order []store.Object)
	// Stats returns a JSON snapshot of the mount's counters.
	Stats() []byte
}

// ctlDir is MOUNT/.dataccel.
type ctlDir struct {
	gofs.Inode
	readOnly
	fsys *FS
}

var (
	_ gofs.NodeLookuper  = (*ctlDir)(nil)
	_ gofs.NodeReaddirer = (*ctlDir)(nil)
	_ gofs.NodeGetattrer = (*ctlDir)(nil)
)

func (c *ctlDir) Getattr(ctx context.Context, _ gofs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	c.fsys.dirAttr(&out.Attr)
	out.Mode = syscall.S_IFDIR | 0o755
	return 0
}

func (c *ctlDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream([]gofuse.DirEntry{
		{Name: "prefetch", Mode: syscall.S_IFREG},
		{Name: "stats", Mode: syscall.S_IFREG},
	}), 0
}

func (c *ctlDir) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	var node gofs.InodeEmbedder
	switch name {
	case "prefetch":
		node = &announceFile{fsys: c.fsys}
	case "stats":
		node = &statsFile{fsys: c.fsys}
	default:
		return nil, syscall.ENOENT
	}
	ch := c.GetChild(name)
	if ch == nil {
		ch = c.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: inoOf("\x00ctl/" + name)})
	}
	var attr gofuse.AttrOut
	ch.Operations().(gofs.NodeGetattrer).Getattr(ctx, nil, &attr)
	out.Attr = attr.Attr
	// The stats change all the time: the kernel must ask every time. Not
	// 0, which go-fuse replaces with the mount's (long) timeouts.
	out.SetEntryTimeout(askAgain)
	out.SetAttrTimeout(askAgain)
	return ch, 0
}

// announceFile is MOUNT/.dataccel/prefetch: a job writes the paths of its
// next epoch, one per line relative to the mount, from offset 0. An fsync
// applies the list before it returns. Opens and closes reach this process
// no more (see fileNode), so without an fsync the list is taken once writes
// pause for announceQuiet; a later write continuing the same list (a slow
// writer) announces the longer list again. A write or an announcement
// supersedes the announcements in progress: they stop, and are not applied,
// so a long list written in many pieces is resolved once, not once a pause.
type announceFile struct {
	gofs.Inode
	fsys *FS

	mu     sync.Mutex
	buf    bytes.Buffer       // guarded by mu
	timer  *time.Timer        // guarded by mu
	seq    uint64             // guarded by mu: bumped by every write and announcement
	cancel context.CancelFunc // guarded by mu: stops the announcement in progress
}

// announceQuiet is the pause after the last write that ends a list.
const announceQuiet = 30 * time.Millisecond

var (
	_ gofs.NodeOpener    = (*announceFile)(nil)
	_ gofs.NodeGetattrer = (*announceFile)(nil)
	_ gofs.NodeSetattrer = (*announceFile)(nil)
	_ gofs.NodeWriter    = (*announceFile)(nil)
	_ gofs.NodeWritever  = (*announceFile)(nil)
	_ gofs.NodeReader    = (*announceFile)(nil)
	_ gofs.NodeFsyncer   = (*announceFile)(nil)
)

func (a *announceFile) Getattr(ctx context.Context, _ gofs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	// The kernel checks these bits (default_permissions).
	out.Mode = syscall.S_IFREG | 0o664
	if a.fsys.cfg.AnnounceAnyUser {
		out.Mode |= 0o002
	}
	out.Nlink = 1
	out.Owner = gofuse.Owner{Uid: a.fsys.cfg.UID, Gid: a.fsys.cfg.GID}
	return 0
}

// Setattr accepts the truncation that open(O_TRUNC) implies, which starts
// a new list: one that nothing is written to is the empty order, which
// ends the last one's prefetch (an empty write never reaches the mount,
// so without this an fsync of it applied the previous list again).
func (a *announceFile) Setattr(ctx context.Context, _ gofs.FileHandle, in *gofuse.SetAttrIn, out *gofuse.AttrOut) syscall.Errno {
	sz, ok := in.GetSize()
	if ok && sz != 0 {
		return syscall.EINVAL
	}
	if ok {
		a.mu.Lock()
		a.buf.Reset()
		a.armLocked()
		a.mu.Unlock()
	}
	return a.Getattr(ctx, nil, out)
}

// Open: no per-open state (see fileNode.Open and FS.openControl).
func (a *announceFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return a.fsys.openControl()
}

func (a *announceFile) Read(ctx context.Context, _ gofs.FileHandle, dest []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	return gofuse.ReadResultData(nil), 0
}

func (a *announceFile) Writev(ctx context.Context, f gofs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	return a.Write(ctx, f, bytes.Join(data, nil), off)
}

func (a *announceFile) Write(ctx context.Context, _ gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if off == 0 {
		a.buf.Reset() // a new list
	}
	if off != int64(a.buf.Len()) {
		return 0, syscall.EINVAL // the list is written front to back
	}
	if a.buf.Len()+len(data) > maxAnnounceBytes {
		return 0, syscall.EFBIG
	}
	a.buf.Write(data)
	a.armLocked()
	return uint32(len(data)), 0
}

// armLocked supersedes what came before and announces the list as it is
// once writes pause for announceQuiet. Called with a.mu held.
func (a *announceFile) armLocked() {
	a.supersedeLocked()
	armed := a.seq
	a.timer = time.AfterFunc(announceQuiet, func() { a.announce(armed) })
}

// supersedeLocked stops the pending timer and the announcement in
// progress, and makes sure the latter is not applied. Called with a.mu held.
func (a *announceFile) supersedeLocked() {
	a.seq++
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if a.cancel != nil {
		a.cancel()
		a.cancel = nil
	}
}

// Fsync applies the list written so far before it returns: a job that
// starts its epoch after the fsync has the order in effect, and resolving
// it does not compete with the epoch's first reads (the quiet timer would
// fire during them). An order is a hint: a failure to apply it (a listing
// that fails while the store is down, with every file in the cache) is
// logged, not returned, so the job's fsync never fails for it.
func (a *announceFile) Fsync(ctx context.Context, _ gofs.FileHandle, _ uint32) syscall.Errno {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch err := a.apply(actx, cancel, 0); {
	case err == nil:
	case ctx.Err() != nil:
		return syscall.EINTR
	case errors.Is(err, errSuperseded) || actx.Err() != nil:
		// A later write superseded this list: it is announced in turn.
	default:
		a.fsys.log.Warn("announced order not applied", "err", err)
	}
	return 0
}

// announce runs on its own goroutine with its own deadline, within the
// mount's life, once writes have paused since the write that armed it (seq
// armed): the writer has gone by now, so a failure can only be logged.
func (a *announceFile) announce(armed uint64) {
	ctx, cancel := context.WithTimeout(a.fsys.ns.bg, 5*time.Minute)
	defer cancel()
	if err := a.apply(ctx, cancel, armed); err != nil && ctx.Err() == nil && !errors.Is(err, errSuperseded) {
		a.fsys.log.Warn("announced order not applied", "err", err)
	}
}

// errSuperseded: a write or another announcement came after this one.
var errSuperseded = errors.New("announce: superseded")

// apply resolves the list written so far and announces it unless a write or
// another announcement superseded it meanwhile (then ctx is cancelled and
// nothing is applied). cancel cancels ctx. With armed > 0 (the quiet timer)
// it starts only if nothing happened since that sequence number: a timer
// that fires as an fsync starts must not cancel it. The Control is called
// under a.mu, so that no superseded list lands after its successor (lock
// order: a.mu, then the Control's own locks).
func (a *announceFile) apply(ctx context.Context, cancel context.CancelFunc, armed uint64) error {
	a.mu.Lock()
	if armed > 0 && armed != a.seq {
		a.mu.Unlock()
		return errSuperseded
	}
	a.supersedeLocked()
	a.cancel = cancel
	seq := a.seq
	list := bytes.Clone(a.buf.Bytes())
	a.mu.Unlock()
	order, err := a.fsys.resolve(ctx, list)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if seq != a.seq {
		return errSuperseded
	}
	a.cancel = nil
	a.fsys.cfg.Control.Announce(a.fsys.withoutCopies(order))
	a.fsys.log.Info("announced order", "files", len(order))
	return nil
}

// Announce resolves a list of mount-relative paths (one per line) and
// announces it, as a write of .dataccel/prefetch does.
func (f *FS) Announce(ctx context.Context, paths []byte) error {
	if f.cfg.Control == nil {
		return errors.New("announce: the mount has no control")
	}
	order, err := f.resolve(ctx, paths)
	if err != nil {
		return err
	}
	f.cfg.Control.Announce(f.withoutCopies(order))
	f.log.Info("announced order", "files", len(order))
	return nil
}

// resolve turns mount-relative paths into objects, listing each directory
// at most once (in parallel). Unknown or unsafe paths are skipped and
// counted in one warning. An epoch's list is long (1.28M lines for
// ImageNet) and is resolved before the epoch starts, with the cores idle:
// a long list is cut into parts at line boundaries, one goroutine per core,
// each parsing and then looking up its own lines. A clean line (as a
// generated list has) is looked up where it lies in data, with no string or
// copy per line, and its directory is looked up only when it differs from
// the line before. A shuffled list touches a listing entry at random per
// line, which costs cache misses more than computation.
func (f *FS) resolve(ctx context.Context, data []byte) ([]store.Object, error) {
	return f.resolveIn(ctx, data, max(1, min(runtime.GOMAXPROCS(0), len(data)/resolvePartBytes)))
}

// resolveLists is how many directories resolve lists at a time (a round
// trip per directory the job has not walked, thousands in a deep tree):
// the parallelism measured best for listing ahead of a walker
// (bench/RESULTS.md, session 25).
const resolveLists = 32

// resolveTrees is how many tree listings resolve runs at a time: each
// lists its pages several key ranges at once.
const resolveTrees = 4

// treeDirLines: a directory the list names more files of is listed on its
// own, never as part of a tree. A tree pays where its directories are a
// small share of a page each (a page then answers for dozens of them);
// directories listed on their own are listed many at a time, where one
// tree's pages are a few at a time, so larger ones (a flat dataset's
// classes, ImageNet's) list faster each on its own (bench/RESULTS.md,
// session 51).
const treeDirLines = 20

// resolveIn is resolve with the list cut into n parts.
func (f *FS) resolveIn(ctx context.Context, data []byte, n int) ([]store.Object, error) {
	parts := cutLines(data, n)
	g, gctx := errgroup.WithContext(ctx)
	for _, p := range parts {
		p.mountpoint = f.mountpoint
		g.Go(func() error { return p.parse(gctx) })
	}
	if err := g.Wait(); err != nil {
		return nil, err // superseded by a longer list, or interrupted
	}

	// The parts' directories, each listed once: those listed already (the
	// job walked the tree) need no goroutine, the others are listed in
	// parallel.
	type dirListing struct {
		key   string // prefix + directory, ending in "/" (or the prefix alone)
		lines int    // lines of the list in it
		l     *listing
	}
	byDir := map[string]*dirListing{}
	for _, p := range parts {
		for i, d := range p.dirs {
			if byDir[d] == nil {
				byDir[d] = &dirListing{key: f.cfg.Prefix + d}
			}
			byDir[d].lines += p.lines[i]
		}
	}
	unlisted := map[string]*dirListing{} // by key
	var small, large []string            // keys of the unlisted directories the list names a few files of, and the others
	for _, d := range byDir {
		if d.l = f.ns.serving(d.key); d.l == nil {
			unlisted[d.key] = d
			if d.lines <= treeDirLines {
				small = append(small, d.key)
			} else {
				large = append(large, d.key)
			}
		}
	}
	// Trees of small directories not yet listed are listed whole, each with
	// one recursive listing (a tree mostly of files the list does not name,
	// by the trees below it); a directory that none covers, or that no tree
	// listing installed (one failed, or stopped), gets its own LIST. Not
	// while the store fails LISTs: each directory would wait for its LIST
	// to fail twice.
	var trees []string
	if len(small) > 1 && !f.ns.failing() {
		trees = treeRoots(f.cfg.Prefix, small)
	}
	// A tree over a large directory would list it too, a few pages at a
	// time: the trees below it instead.
	for i := 0; i < len(trees); {
		root := trees[i]
		if !slices.ContainsFunc(large, func(key string) bool { return strings.HasPrefix(key, root) }) {
			i++
			continue
		}
		trees = slices.Replace(trees, i, i+1, subtreeRoots(root, small)...)
	}
	isLarge := func(d *dirListing) bool { return d.lines > treeDirLines }
	covered := func(d *dirListing) bool {
		return !isLarge(d) && slices.ContainsFunc(trees, func(root string) bool { return strings.HasPrefix(d.key, root) })
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx = errgroup.WithContext(lctx)
	g.SetLimit(resolveLists)
	listDir := func(d *dirListing) {
		g.Go(func() error {
			l, err := f.ns.list(gctx, d.key)
			d.l = l // each goroutine writes its own directory
			return err
		})
	}
	for _, d := range unlisted {
		if !covered(d) {
			listDir(d)
		}
	}
	asked := func(dir string) bool { d := unlisted[dir]; return d != nil && !isLarge(d) }
	outage := func(err error) bool { return err != nil && !errors.Is(err, errSparseTree) && f.ns.outageErr(err) }
	// listTreeAt lists root's tree or, where that is mostly files the list
	// does not name, the trees its small directories share below root.
	// It returns the error of an outage; other failures leave the
	// directories to their own LISTs.
	var listTreeAt func(root string) error
	listTreeAt = func(root string) error {
		_, err := f.ns.listTree(gctx, root, asked)
		if err != nil && gctx.Err() == nil {
			f.log.Debug("announced order: a tree not listed whole", "tree", root, "err", err)
		}
		if !errors.Is(err, errSparseTree) {
			return err
		}
		var sg errgroup.Group
		sg.SetLimit(resolveTrees)
		for _, sub := range subtreeRoots(root, small) {
			sg.Go(func() error {
				if err := listTreeAt(sub); outage(err) {
					return err
				}
				return nil
			})
		}
		return sg.Wait()
	}
	var tg errgroup.Group
	tg.SetLimit(resolveTrees)
	for _, root := range trees {
		tg.Go(func() error {
			err := listTreeAt(root)
			if outage(err) && gctx.Err() == nil {
				// Listings held then serve (they ride it out); a
				// directory with none would only fail again.
				f.ns.failed(root, err)
			}
			for key, d := range unlisted {
				if !strings.HasPrefix(key, root) || isLarge(d) {
					continue // listed on its own already
				}
				if d.l = f.ns.serving(key); d.l != nil {
					continue
				}
				if outage(err) {
					return err
				}
				listDir(d)
			}
			return nil
		})
	}
	if err := tg.Wait(); err != nil {
		stop() // the other directories' LISTs would fail too, each after its retries
		g.Wait()
		return nil, err
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	n, bad := 0, 0
	for _, p := range parts {
		p.listings = make([]*listing, len(p.dirs))
		for i, d := range p.dirs {
			p.listings[i] = byDir[d].l
		}
		n += len(p.items)
		bad += p.bad
	}
	order := make([]store.Object, n)
	var wg sync.WaitGroup
	off := 0
	for _, p := range parts {
		out := order[off : off+len(p.items)]
		wg.Go(func() { p.find(ctx, out) })
		off += len(p.items)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	example := "" // the first line skipped, unparsable or not found
	off = 0
	for _, p := range parts {
		miss := slices.IndexFunc(order[off:off+len(p.items)], func(o store.Object) bool { return o.Key == "" }) // a file's key is never empty
		switch {
		case p.bad > 0 && (miss < 0 || p.badBefore <= miss):
			example = p.firstBad
		case miss >= 0:
			example = p.dirs[p.items[miss].dir] + string(p.items[miss].name)
		}
		if example != "" {
			break
		}
		off += len(p.items)
	}
	kept := order[:0]
	for _, o := range order {
		if o.Key != "" {
			kept = append(kept, o)
		}
	}
	bad += len(order) - len(kept)
	if bad > 0 {
		f.log.Warn("announced order: skipped paths that are not files of the mount", "skipped", bad, "kept", len(kept), "first", example)
	}
	return kept, nil
}

// treeRoots picks, for directories to be listed (prefixes ending in "/",
// under root), the directories to list as whole trees: the nearest common
// ancestor, at or under root, of two or more of them (or of one and the
// ancestor itself), climbing as long as such ancestors share one in turn.
// A directory that shares none with another is left to its own LIST.
func treeRoots(root string, dirs []string) []string {
	nodes := make(map[string]bool, len(dirs)) // a node -> it is a tree (it took in others)
	for _, d := range dirs {
		nodes[d] = false
	}
	for {
		under := map[string]int{} // parent -> nodes right under it
		for n := range nodes {
			if p, ok := parentDir(root, n); ok {
				under[p]++
			}
		}
		next := make(map[string]bool, len(nodes))
		for p, k := range under {
			if _, node := nodes[p]; k >= 2 || node {
				next[p] = true // it takes in the nodes under it (each round has fewer nodes)
			}
		}
		if len(next) == 0 {
			break
		}
		for n, tree := range nodes {
			if p, ok := parentDir(root, n); ok && next[p] {
				continue // taken in
			}
			if !next[n] {
				next[n] = tree
			}
		}
		nodes = next
	}
	var trees []string
	for n, tree := range nodes {
		if tree {
			trees = append(trees, n)
		}
	}
	// A tree that climbed no further stays one when another climbed past
	// it: drop those under another tree (sorted, a tree comes right
	// before those under it).
	slices.Sort(trees)
	out := trees[:0]
	for _, t := range trees {
		if len(out) == 0 || !strings.HasPrefix(t, out[len(out)-1]) {
			out = append(out, t)
		}
	}
	return out
}

// subtreeRoots is treeRoots within each subdirectory of root: the trees
// below root, for a root whose own tree was mostly files not asked for.
func subtreeRoots(root string, dirs []string) []string {
	groups := map[string][]string{}
	for _, d := range dirs {
		if len(d) <= len(root) || !strings.HasPrefix(d, root) {
			continue
		}
		child := d[:len(root)+strings.IndexByte(d[len(root):], '/')+1]
		groups[child] = append(groups[child], d)
	}
	var trees []string
	for child, ds := range groups {
		trees = append(trees, treeRoots(child, ds)...)
	}
	slices.Sort(trees)
	return trees
}

// parentDir returns the directory that holds dir ("a/b/" -> "a/"), unless
// dir is root: nothing above root is listed.
func parentDir(root, dir string) (string, bool) {
	if len(dir) <= len(root) {
		return "", false
	}
	return dir[:strings.LastIndexByte(dir[:len(dir)-1], '/')+1], true
}

// resolvePartBytes is the least of a list that resolve gives a goroutine of
// its own: about 1,600 lines of ImageNet paths.
const resolvePartBytes = 64 << 10

// linePart is one part of an announced list, resolved by one goroutine.
type linePart struct {
	data       []byte
	mountpoint []byte // "/mnt/data/": a line under it names a file by its path in the mount
	items      []lineItem
	dirs       []string   // the directories of items (without the prefix), first seen first
	lines      []int      // lines[i]: the items in dirs[i]
	listings   []*listing // listings[i] lists dirs[i]
	bad        int        // lines that cannot name a file of the mount
	firstBad   string     // the first of them (for the warning)
	badBefore  int        // how many items came before it
}

// skip counts line as one that cannot name a file of the mount.
func (p *linePart) skip(line []byte) {
	if p.bad++; p.bad == 1 {
		p.firstBad, p.badBefore = string(line), len(p.items)
	}
}

// lineItem is one line: its directory (an index in linePart.dirs) and file name.
type lineItem struct {
	dir  int
	name []byte // in data, or in a copy for a line that needed cleaning
}

// cutLines cuts data into n parts of about equal size at line ends.
func cutLines(data []byte, n int) []*linePart {
	parts := make([]*linePart, 0, n)
	for i := n; i > 0 && len(data) > 0; i-- {
		cut := len(data)
		if i > 1 {
			cut = len(data) / i
			if j := bytes.IndexByte(data[cut:], '\n'); j >= 0 {
				cut += j + 1
			} else {
				cut = len(data)
			}
		}
		parts = append(parts, &linePart{data: data[:cut]})
		data = data[cut:]
	}
	return parts
}

// parse splits the part into items.
func (p *linePart) parse(ctx context.Context) error {
	data := p.data
	p.items = make([]lineItem, 0, bytes.Count(data, []byte{'\n'})+1)
	dirIndex := map[string]int{}     // directory -> index in p.dirs
	last, lastDir := -1, []byte(nil) // the directory of the line before
	var cleaned []byte
	controlDir := []byte(ControlDir + "/")
	for n := 0; len(data) > 0; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		// A job's own paths (ImageFolder's samples) name the mountpoint.
		line = bytes.TrimPrefix(line, p.mountpoint)
		if len(line) > maxPathLen {
			p.skip(line[:64]) // longer than any key of the store
			continue
		}
		rel := line
		if !isCleanRel(rel) {
			start := len(cleaned)
			cleaned = appendCleanRel(cleaned, rel) // rooted: ".." cannot climb out
			rel = cleaned[start:len(cleaned):len(cleaned)]
		}
		if len(rel) == 0 || bytes.HasPrefix(rel, controlDir) {
			p.skip(line)
			continue
		}
		slash := bytes.LastIndexByte(rel, '/') + 1
		if dir := rel[:slash]; last < 0 || !bytes.Equal(dir, lastDir) {
			d, ok := dirIndex[string(dir)]
			if !ok {
				d = len(p.dirs)
				dirIndex[string(dir)] = d
				p.dirs = append(p.dirs, string(dir))
				p.lines = append(p.lines, 0)
			}
			last, lastDir = d, dir
		}
		p.lines[last]++
		p.items = append(p.items, lineItem{dir: last, name: rel[slash:]})
	}
	return nil
}

// find writes to order[i] the object of item i when it names a file.
func (p *linePart) find(ctx context.Context, order []store.Object) {
	for i, it := range p.items {
		if i%4096 == 0 && ctx.Err() != nil {
			return
		}
		if e, ok := lookUp(p.listings[it.dir], it.name); ok && !e.dir {
			order[i] = e.obj
		}
	}
}

// appendCleanRel appends p made relative to the mount root and cleaned as
// path.Clean("/"+p) would, without the leading slash. Lines of a generated
// list are clean already and are copied as they are.
func appendCleanRel(dst, p []byte) []byte {
	if isCleanRel(p) {
		return append(dst, p...)
	}
	return append(dst, path.Clean("/" + string(p))[1:]...)
}

// isCleanRel reports whether p is a relative path that cleaning leaves
// alone: no leading or trailing slash, no empty, "." or ".." element.
func isCleanRel(p []byte) bool {
	if len(p) == 0 || p[0] == '/' || p[len(p)-1] == '/' {
		return false
	}
	for {
		i := bytes.IndexByte(p, '/')
		elem := p
		if i >= 0 {
			elem = p[:i]
		}
		if len(elem) == 0 || elem[0] == '.' && (len(elem) == 1 || len(elem) == 2 && elem[1] == '.') {
			return false
		}
		if i < 0 {
			return true
		}
		p = p[i+1:]
	}
}

// statsFile is MOUNT/.dataccel/stats: a JSON snapshot of the counters.
// Each read(2) asks for the attributes (timeout askAgain); a snapshot newer
// than statsFresh is reused, so the size and the bytes of one read agree, and a
// new one gets a new mtime, which makes the kernel drop the old pages.
type statsFile struct {
	gofs.Inode
	fsys *FS

	mu   sync.Mutex
	data []byte    // guarded by mu
	at   time.Time // guarded by mu
}

const statsFresh = 200 * time.Millisecond

var (
	_ gofs.NodeOpener    = (*statsFile)(nil)
	_ gofs.NodeGetattrer = (*statsFile)(nil)
	_ gofs.NodeReader    = (*statsFile)(nil)
)

func (s *statsFile) snapshot() ([]byte, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil || time.Since(s.at) > statsFresh {
		s.data, s.at = s.fsys.cfg.Control.Stats(), time.Now()
	}
	return s.data, s.at
}

func (s *statsFile) Getattr(ctx context.Context, _ gofs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	data, at := s.snapshot()
	out.Mode = syscall.S_IFREG | 0o444
	out.Nlink = 1
	out.Size = uint64(len(data))
	out.SetTimes(nil, &at, &at)
	out.Owner = gofuse.Owner{Uid: s.fsys.cfg.UID, Gid: s.fsys.cfg.GID}
	out.SetTimeout(askAgain)
	return 0
}

// askAgain is a timeout that has passed by the next request. (A timeout of
// 0 from a node means "the mount's default" to go-fuse.)
const askAgain = time.Nanosecond

func (s *statsFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	return s.fsys.openControl()
}

func (s *statsFile) Read(ctx context.Context, _ gofs.FileHandle, dest []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	data, _ := s.snapshot()
	if off >= int64(len(data)) {
		return gofuse.ReadResultData(nil), 0
	}
	return gofuse.ReadResultData(data[off:min(int64(len(data)), off+int64(len(dest)))]), 0
}
