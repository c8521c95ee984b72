// Package fuse serves a bucket prefix as a read-only POSIX directory tree
// through go-fuse v2: directory listings with a metadata cache (listed
// ahead of a walker), stat, open and read at any offset. It is the only
// importer of go-fuse and holds the single error-to-errno mapping.
//
// It does not fetch data itself: reads go to a Reader from the Opener it is
// given (the prefetch loader in production). It does not cache data: the
// kernel page cache and the prefetch loader do; FS.Store lets prefetch put
// files into the kernel's page cache before they are read. Large files can
// be read by the kernel from whole local copies (FUSE passthrough), which
// it asks a LocalCopies for.
package fuse

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/dataccel/dataccel/store"
)

// Reader reads one open file; the prefetch loader's readers satisfy it.
type Reader interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Close() error
}

// viewReader is a Reader that can hand out its bytes without a copy into p
// (prefetch's reader does): the slice it returns is written to the kernel
// as it is, and done, when not nil, is called once it is written.
type viewReader interface {
	ReadView(ctx context.Context, p []byte, off int64) (data []byte, done func(), err error)
}

// Opener makes a Reader for an object version (one per pass over a file).
type Opener interface {
	Open(obj store.Object) Reader
}

// OpenerFunc adapts a function to Opener.
type OpenerFunc func(store.Object) Reader

// Open implements Opener.
func (f OpenerFunc) Open(obj store.Object) Reader { return f(obj) }

// Config describes one mount.
type Config struct {
	Store  store.Store
	Opener Opener
	// Prefix is the key prefix shown as the mount's root ("" or ending in "/").
	Prefix string
	// FsName is shown by mount(8) and df, e.g. "s3://bucket/prefix".
	FsName string
	// MetadataTTL bounds how long listings and attributes are trusted, both
	// here and in the kernel. Datasets rarely change under training.
	MetadataTTL time.Duration
	// OutageGrace is how long past MetadataTTL a listing serves while the
	// store fails the LISTs of its directory on errors that sending again
	// may cure (unreachable, 5xx, timeouts); 0: not at all.
	OutageGrace time.Duration
	UID, GID    uint32
	AllowOther  bool
	Logger      *slog.Logger
	Debug       bool
	// Control, when set, serves the control directory (.dataccel/).
	Control Control
	// AnnounceAnyUser lets every user who sees the mount write
	// .dataccel/prefetch. Otherwise only UID, GID's members and root can:
	// with AllowOther, another user of the machine would steer this
	// mount's prefetch and evict its cache. (A pod's mount is seen by the
	// pod's containers alone.)
	AnnounceAnyUser bool
	// Preload: directory listings saved by an earlier mount (a manifest),
	// installed before the mount serves. PreloadListed is when they were
	// listed (no later than the manifest says): they are trusted for
	// MetadataTTL from then, not from the remount, so that a manifest saved
	// days ago is listed again instead of trusted for another TTL. Zero
	// means now.
	Preload       []store.ManifestDir
	PreloadListed time.Time
	// ListAhead is how many LISTs at a time list the subdirectories ahead
	// of a walker once it has listed two of one directory; 0 turns it off.
	ListAhead int
	// Copies and PassthroughMinSize, when both are set, serve files of at
	// least that size from whole local copies (see passthrough.go).
	Copies             LocalCopies
	PassthroughMinSize int64
}

// passthrough reports whether the mount may serve files from local copies
// (and so answers OPEN while it does).
func (c *Config) passthrough() bool { return c.Copies != nil && c.PassthroughMinSize > 0 }

// FS is the mounted filesystem's state shared by all nodes.
type FS struct {
	cfg     Config
	ns      *namespace
	log     *slog.Logger
	mounted time.Time
	root    *dirNode           // set once by New, before the mount serves
	walk    *walkAhead         // lists directories ahead of a walker
	stop    context.CancelFunc // ends the mount's background work (walk's LISTs)
	pt      atomic.Int32       // passthrough: ptOn until it turns ptOff for good; ptOff from the start without copies
	ptOpens ptOpens            // the opens passthrough weighs

	// mountpoint is where the mount is, ending in "/" (set by New before
	// it serves; nil for an FS that is not mounted).
	mountpoint []byte

	// dirReads shares one read of a directory through the mount among the
	// pushes that want it (readThroughMount).
	dirReads  singleflight.Group
	dirReadMu sync.Mutex
	dirPushes map[string]*dirPushes // guarded by dirReadMu: per directory pushes found files unknown to the kernel in, at most maxDirReads
	selfReads map[string]int        // guarded by dirReadMu: the directories (keys) readThroughMount reads now, whose readdirs are no walker's

	healMu  sync.Mutex
	healing map[string]map[*fileNode]bool // guarded by healMu: per directory being healed, its stale files still to do
	// staleSince: when a read first found each version (by its inode
	// number: key and ETag) changed or gone; a listing made after that and
	// still showing it is the store's last word, not a reason to list
	// again. Guarded by healMu; cleared when it passes staleVersions.
	staleSince map[uint64]time.Time
	// disagreed: the versions a listing made after their failure still
	// showed (the store's GETs and LISTs disagree), warned about once.
	// Guarded by healMu; cleared with staleSince.
	disagreed map[uint64]bool
	// answers: by key, what the store said last of a key whose version
	// went stale (asked by askLoop while the directory is listed again),
	// which lookups hand out until that listing lands; by key, so that an
	// object overwritten twice meanwhile gets the store's latest word.
	// reported: the stale versions heal has logged. Both guarded by
	// healMu; cleared with staleSince.
	answers  map[string]storeAnswer
	reported map[uint64]bool
	// asking: the stale files whose keys askLoop is to ask the store about,
	// at most maxAsking; askRunning: askLoop is at work. Guarded by healMu.
	asking     map[*fileNode]bool
	askRunning bool
	// healLists bounds the LISTs heal runs at once: a re-uploaded dataset
	// makes every directory stale together.
	healLists chan struct{}

	dropMu      sync.Mutex
	dropping    map[string]map[string]bool // guarded by dropMu: per directory, names whose kernel entries are to go
	forgetting  map[string]bool            // guarded by dropMu: directories whose files' kernel entries are to go (forgetFiles)
	dropRunning bool                       // guarded by dropMu: dropEntries is at work
}

// ErrNoInode: the kernel holds no inode for the file (never looked up, or
// forgotten since) and none could be looked up, so it has no page cache to
// fill.
var ErrNoInode = errors.New("fuse: the kernel holds no inode for the file")

// Store puts data at offset off into the kernel's page cache of obj's file
// (FUSE_NOTIFY_STORE), for prefetch: a reader then reads it with no request
// to this process. It fills only a file the kernel has looked up (it looks
// one up where it can: lookUpThroughMount), and only the version obj
// names, so a reader never sees another version's bytes.
// It may wait while a READ in progress holds the pages, and for this
// process's answer to a LOOKUP it makes (answered from memory); it never
// waits for the loader.
func (f *FS) Store(obj store.Object, off int64, data []byte) error {
	if f.passthroughFor(obj) {
		return fmt.Errorf("store %s in the page cache: %w", obj.Key, ErrPassthrough)
	}
	n := f.lookedUp(obj.Key)
	if n == nil && f.lookUpThroughMount(obj.Key) {
		n = f.lookedUp(obj.Key)
	}
	if n == nil {
		return fmt.Errorf("store %s in the page cache: %w", obj.Key, ErrNoInode)
	}
	if n.obj.ETag != obj.ETag || n.obj.Size != obj.Size {
		return fmt.Errorf("store %s in the page cache: %w", obj.Key, store.ErrChanged)
	}
	if errno := n.WriteCache(off, data); errno != 0 {
		return fmt.Errorf("store %s in the page cache: %w", obj.Key, errno)
	}
	return nil
}

// lookUpThroughMount has the kernel look up key's file, by a stat of its
// path through the mount: a job that opens files from a list of paths
// (no walk, no readdir) has the kernel know a file only at its open, too
// late for a push. Only where every directory on the way is listed and
// fresh, so that the LOOKUPs are answered from memory, never wait on the
// store, and cost what the job's own open would have (which they save);
// the check counts no use of a listing (the LOOKUPs do). A syscall, not a
// page fault: the runtime can stop this goroutine while it waits for the
// mount's own answer. Reports whether the stat found it.
func (f *FS) lookUpThroughMount(key string) bool {
	rel, ok := strings.CutPrefix(key, f.cfg.Prefix)
	if !ok || rel == "" || strings.HasSuffix(rel, "/") || f.mountpoint == nil {
		return false
	}
	for i := 0; ; {
		if !f.ns.answersNow(f.cfg.Prefix + rel[:i]) {
			return false
		}
		j := strings.IndexByte(rel[i:], '/')
		if j < 0 {
			break
		}
		i += j + 1
	}
	dir := rel[:strings.LastIndexByte(rel, '/')+1]
	if f.readThroughMount(dir) && f.lookedUp(key) != nil {
		return true
	}
	var st unix.Stat_t
	return unix.Fstatat(unix.AT_FDCWD, string(f.mountpoint)+rel, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// maxDirRead: a directory of more entries is not read through the mount
// for a push: the kernel would hold an inode for each (its files' own
// LOOKUPs then). maxDirReads bounds the directories tracked.
const (
	maxDirRead  = 4096
	maxDirReads = 1 << 14
)

// dirPushes is what pushes found in one directory (FS.dirPushes).
type dirPushes struct {
	unknown int       // pushes that found their file unknown to the kernel since the last read
	read    time.Time // when the directory was last read through the mount (zero: never)
}

// readThroughMount has the kernel look up every file of dir (mount-
// relative, listed and fresh) at once, by a read of the directory through
// the mount: READDIRPLUS answers a page of entries, attributes included,
// a request, where a LOOKUP a file costs a request each, several times the
// CPU of the mount and of the kernel for a directory of small files read
// from a list. Only once pushes have found a thirty-second of its files
// unknown to the kernel (two at least): a job that reads a few files of
// each directory does not pay for inodes of all the others. At most once
// a metadata TTL (the kernel may forget inodes, and a directory read again
// for each would cost its size a file), and only while the listing serves
// for long enough that no entry's lookup waits on the store. Reports
// whether it read dir.
func (f *FS) readThroughMount(dir string) bool {
	key := f.cfg.Prefix + dir
	l := f.ns.held(key)
	if l == nil || len(l.entries) > maxDirRead || !f.ns.servesFor(key, max(f.ns.ttl/8, time.Second)) {
		return false
	}
	now := f.ns.now()
	f.dirReadMu.Lock()
	p := f.dirPushes[dir]
	if p == nil {
		if len(f.dirPushes) >= maxDirReads {
			clear(f.dirPushes) // a hint: at worst a directory's files are looked up one by one
		}
		p = &dirPushes{}
		f.dirPushes[dir] = p
	}
	if !p.read.IsZero() && now.Sub(p.read) < f.ns.ttl {
		f.dirReadMu.Unlock()
		return false
	}
	p.unknown++
	due := p.unknown >= max(2, len(l.entries)/32)
	f.dirReadMu.Unlock()
	if !due {
		return false
	}
	ok, _, _ := f.dirReads.Do(dir, func() (any, error) {
		f.dirReadMu.Lock()
		f.selfReads[key]++
		f.dirReadMu.Unlock()
		err := readDir(string(f.mountpoint) + dir)
		f.dirReadMu.Lock()
		if f.selfReads[key]--; f.selfReads[key] == 0 {
			delete(f.selfReads, key)
		}
		if p := f.dirPushes[dir]; p != nil && err == nil {
			p.unknown, p.read = 0, now
		}
		f.dirReadMu.Unlock()
		if err != nil {
			f.log.Debug("push: reading a directory through the mount failed; its files are looked up one by one", "dir", key, "err", err)
		}
		return err == nil, nil
	})
	return ok.(bool)
}

// selfRead says whether dir (a key) is being read by readThroughMount.
func (f *FS) selfRead(dir string) bool {
	f.dirReadMu.Lock()
	defer f.dirReadMu.Unlock()
	return f.selfReads[dir] > 0
}

// readDir reads every entry of the directory at p and drops them: what
// is wanted is the kernel's lookups on the way. Raw getdents, not
// os.ReadDir: no entry is decoded or kept.
func readDir(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", p, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return fmt.Errorf("read directory %s: %w", p, err)
		}
		if n <= 0 {
			return nil
		}
	}
}

// ErrPassthrough: the kernel reads the file from its local copy, not from
// the page cache a push would fill.
var ErrPassthrough = errors.New("fuse: the file is read from its local copy")

// lookedUp returns the file node the kernel knows for key, or nil.
func (f *FS) lookedUp(key string) *fileNode {
	in := f.inodeAt(key)
	if in == nil {
		return nil
	}
	n, _ := in.Operations().(*fileNode) // nil for the root, a directory
	return n
}

// inodeAt returns the inode the kernel knows for key (a file, or a
// directory's prefix ending in "/"), or nil.
func (f *FS) inodeAt(key string) *gofs.Inode {
	rel, ok := strings.CutPrefix(key, f.cfg.Prefix)
	if !ok || f.root == nil {
		return nil
	}
	in := f.root.EmbeddedInode()
	for rel = strings.TrimSuffix(rel, "/"); in != nil && rel != ""; {
		var name string
		name, rel, _ = strings.Cut(rel, "/")
		in = in.GetChild(name)
	}
	return in
}

func newFS(cfg Config) *FS {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MetadataTTL <= 0 {
		cfg.MetadataTTL = time.Hour
	}
	ctx, stop := context.WithCancel(context.Background())
	ns := newNamespace(ctx, cfg.Store, cfg.MetadataTTL, cfg.Logger)
	ns.grace = cfg.OutageGrace
	f := &FS{cfg: cfg, ns: ns, log: cfg.Logger, mounted: time.Now(),
		walk: newWalkAhead(ctx, ns, cfg.ListAhead, cfg.Logger), stop: stop, dirPushes: map[string]*dirPushes{}, selfReads: map[string]int{}, healing: map[string]map[*fileNode]bool{},
		staleSince: map[uint64]time.Time{}, disagreed: map[uint64]bool{}, answers: map[string]storeAnswer{}, reported: map[uint64]bool{}, asking: map[*fileNode]bool{}, healLists: make(chan struct{}, healParallel),
		dropping: map[string]map[string]bool{}, forgetting: map[string]bool{}}
	ns.changed = f.entriesChanged
	ns.idle = f.forgetFiles
	if !cfg.passthrough() {
		f.pt.Store(ptOff) // no copies to read: opens never need answering
	}
	return f
}

// Next returns up to n files that follow key in its directory's listing
// order, from cached listings only (for directory-order prefetch).
func (f *FS) Next(key string, n int) []store.Object { return f.ns.next(key, n) }

// Files returns the files directly in dir (a key prefix ending in "/"),
// from cached listings only: nil when dir has none.
func (f *FS) Files(dir string) []store.Object { return f.ns.files(dir) }

// Dirs returns the directories directly in dir (key prefixes ending in
// "/"), from cached listings only.
func (f *FS) Dirs(dir string) []string { return f.ns.subdirs(dir) }

// Restore installs directory listings saved by an earlier mount (a
// manifest), listed at listed (zero: now): afterwards, stat, readdir and
// open in those directories cost no request until the metadata TTL passes
// from then.
func (f *FS) Restore(dirs []store.ManifestDir, listed time.Time) {
	f.ns.restore(f.cfg.Prefix, dirs, listed)
}

// Snapshot returns the directory listings the mount holds (for a
// manifest), a generation number that changes whenever a listing is made,
// and when the oldest of them was listed (zero when none is held).
func (f *FS) Snapshot() (dirs iter.Seq[store.ManifestDir], gen uint64, listed time.Time) {
	return f.ns.snapshot()
}

// Empty lists the mount's root (the listing is kept, as a lookup's) and
// says whether it holds nothing: a mistyped prefix mounts as an empty
// directory, which a job would read as an empty dataset.
func (f *FS) Empty(ctx context.Context) (bool, error) {
	l, err := f.ns.list(ctx, f.cfg.Prefix)
	if err != nil {
		return false, err
	}
	f.warnShadowed(l)
	return len(l.entries) == 0, nil
}

// warnShadowed warns, once, when the root's listing l holds an entry the
// control directory hides: those objects cannot be read through the mount.
func (f *FS) warnShadowed(l *listing) {
	if f.cfg.Control == nil {
		return
	}
	if e, ok := lookUp(l, ControlDir); ok {
		key := f.cfg.Prefix + ControlDir
		if e.dir {
			key += "/"
		}
		f.ns.warn(key, "the mount's control directory "+ControlDir+" takes that name at the root: the objects under it are hidden")
	}
}

// Generation is the number Snapshot would return, without the copy.
func (f *FS) Generation() uint64 { return f.ns.generation() }

func inoOf(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	// 0 and 1 are reserved (1 is the root).
	return h.Sum64() | 2
}

// dirIno numbers the directory key: 1 for the mount's root, as go-fuse's
// root (RootStableAttr), else as Lookup numbers it.
func (f *FS) dirIno(key string) uint64 {
	if key == f.cfg.Prefix {
		return 1
	}
	return inoOf(key)
}

// parentKey is the key of the directory above key (the root's is itself).
func (f *FS) parentKey(key string) string {
	if key == f.cfg.Prefix {
		return key
	}
	return key[:strings.LastIndex(strings.TrimSuffix(key, "/"), "/")+1]
}

// fileIno numbers one version of an object.
func fileIno(o store.Object) uint64 { return inoOf(o.Key + "\x00" + o.ETag) }

func (f *FS) dirAttr(out *gofuse.Attr) {
	out.Mode = syscall.S_IFDIR | 0o555
	out.Nlink = 2
	out.Owner = gofuse.Owner{Uid: f.cfg.UID, Gid: f.cfg.GID}
	out.SetTimes(&f.mounted, &f.mounted, &f.mounted)
}

func (f *FS) fileAttr(obj store.Object, out *gofuse.Attr) {
	out.Mode = syscall.S_IFREG | 0o444
	out.Nlink = 1
	out.Size = uint64(obj.Size)
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.Owner = gofuse.Owner{Uid: f.cfg.UID, Gid: f.cfg.GID}
	mt := obj.ModTime
	out.SetTimes(&mt, &mt, &mt) // an atime of 1970 would look ancient to cache cleaners
}

// dirNode is a directory: a key prefix ending in "/" (or the mount's root prefix).
type dirNode struct {
	gofs.Inode
	readOnly
	fsys *FS
	key  string
}

var (
	_ gofs.NodeLookuper  = (*dirNode)(nil)
	_ gofs.NodeReaddirer = (*dirNode)(nil)
	_ gofs.NodeGetattrer = (*dirNode)(nil)
	_ gofs.NodeStatfser  = (*dirNode)(nil)
)

func (d *dirNode) Getattr(ctx context.Context, _ gofs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	d.fsys.dirAttr(&out.Attr)
	return 0
}

func (d *dirNode) Statfs(ctx context.Context, out *gofuse.StatfsOut) syscall.Errno {
	out.Bsize = 1 << 20
	out.Frsize = 1 << 20
	out.NameLen = 255
	return 0
}

func (d *dirNode) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.IsRoot() && name == ControlDir && d.fsys.cfg.Control != nil {
		return d.controlDir(ctx, out)
	}
	listed := d.fsys.ns.serving(d.key) != nil
	e, ok, err := d.fsys.ns.lookup(ctx, d.key, name)
	if err != nil {
		return nil, d.fsys.fail("lookup", d.key+name, err)
	}
	if !listed && !d.IsRoot() {
		// A job that opens files from a list of paths lists each directory
		// on its first lookup, in turn: the same walk, without readdir.
		d.fsys.walk.listed(d.key)
	}
	if !ok {
		return nil, syscall.ENOENT
	}
	if e.dir {
		key := d.key + name + "/"
		d.fsys.dirAttr(&out.Attr)
		out.Ino = inoOf(key)
		if ch := d.GetChild(name); ch != nil {
			if _, isDir := ch.Operations().(*dirNode); isDir {
				return ch, 0
			}
		}
		return d.NewInode(ctx, &dirNode{fsys: d.fsys, key: key}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: out.Ino}), 0
	}
	obj, err := d.fsys.current(d.key, e.obj)
	if err != nil {
		return nil, d.fsys.fail("lookup", d.key+name, err)
	}
	d.fsys.fileAttr(obj, &out.Attr)
	out.Ino = fileIno(obj)
	if ch := d.GetChild(name); ch != nil {
		if fn, isFile := ch.Operations().(*fileNode); isFile && fn.obj.ETag == obj.ETag {
			return ch, 0
		}
	}
	// A new version is a new inode; the old one lives on for open files.
	return d.NewInode(ctx, d.fsys.newFileNode(obj), gofs.StableAttr{Mode: syscall.S_IFREG, Ino: out.Ino}), 0
}

// storeAnswer is what a HEAD said of a stale version's key: the object
// under it, or that there is none, as of at (sent then).
type storeAnswer struct {
	obj  store.Object
	gone bool
	at   time.Time
}

// current is the version of a listed object a lookup hands out: for a
// version a read found changed or deleted after its listing was made, what
// the store said of its key since (askLoop asks while heal lists the
// directory again), until that listing lands. Otherwise a job that opens
// the file again after ESTALE would get ESTALE for as long as the LIST
// takes, long in a large directory. Lookups never wait on the store
// here: a readdir looks up every name it lists. An answer from before the
// version went stale (an earlier change of the key) is not the store's
// word on it.
func (f *FS) current(dir string, obj store.Object) (store.Object, error) {
	f.healMu.Lock()
	ans, known := f.answers[obj.Key]
	f.healMu.Unlock()
	if !known {
		return obj, nil // the common case: no lookup waits for more
	}
	var listedAt time.Time // none held: older than any staleness
	if l := f.ns.held(dir); l != nil {
		listedAt = l.at
	}
	f.healMu.Lock()
	use := f.answerForLocked(obj, listedAt, ans)
	f.healMu.Unlock()
	switch {
	case !use:
		return obj, nil
	case ans.gone:
		return store.Object{}, fmt.Errorf("%s: deleted since it was listed: %w", obj.Key, store.ErrNotExist)
	}
	return ans.obj, nil
}

// answerForLocked says whether ans is the store's word on obj, the version
// a listing made at listedAt shows: obj went stale after that listing (a
// listing made since is the store's last word), and ans was asked after
// it went stale (an earlier change of the key is no word on it), and not
// its own version went stale since (no better). Callers hold healMu.
func (f *FS) answerForLocked(obj store.Object, listedAt time.Time, ans storeAnswer) bool {
	since, stale := f.staleSince[fileIno(obj)]
	if !stale || !listedAt.Before(since) || ans.at.Before(since) {
		return false
	}
	if !ans.gone {
		if s, ok := f.staleSince[fileIno(ans.obj)]; ok && !s.Before(ans.at) {
			return false
		}
	}
	return true
}

const (
	// headsPerRound is how many stale keys askLoop asks the store about
	// before it drops their kernel entries, headParallel at a time, each
	// round within headWait (a store that does not answer leaves the
	// files to their directory's relisting).
	headsPerRound = 64
	headParallel  = 8
	headWait      = 10 * time.Second
	// maxAsking bounds the files waiting for askLoop: a re-uploaded
	// dataset makes every file read stale, and the relisting of their
	// directories heals those beyond it (askLoop skips the files of a
	// directory listed since).
	maxAsking = 4096
)

// askLoop serves healStale's queue of files to ask the store about until
// it is empty: a round of HEADs, then the kernel's entries of those names
// dropped, so that the next open gets the object as it is now without
// waiting for the directory's LIST, long in a large directory.
func (f *FS) askLoop() {
	for {
		f.healMu.Lock()
		batch := map[*fileNode]bool{}
		for n := range f.asking {
			delete(f.asking, n)
			batch[n] = true
			if len(batch) == headsPerRound {
				break
			}
		}
		if len(batch) == 0 {
			f.askRunning = false
			f.healMu.Unlock()
			return
		}
		f.healMu.Unlock()
		f.askStore(batch)
		f.dropStaleEntries(batch)
	}
}

// askStore asks the store what is under the keys of nodes' stale versions,
// but those whose directory was listed since, and files the answers for
// current.
func (f *FS) askStore(nodes map[*fileNode]bool) {
	ctx, cancel := context.WithTimeout(f.ns.bg, headWait)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(headParallel)
	for n := range nodes {
		ino := fileIno(n.obj)
		dir, _ := splitKey(n.obj.Key)
		f.healMu.Lock()
		since, stale := f.staleSince[ino]
		f.healMu.Unlock()
		if !stale {
			continue
		}
		if l := f.ns.held(dir); l != nil && !l.at.Before(since) {
			continue // the listing knows now
		}
		key := n.obj.Key
		g.Go(func() error {
			at := f.ns.now()
			now, err := f.cfg.Store.Stat(gctx, key)
			ans := storeAnswer{obj: now, at: at}
			switch {
			case errors.Is(err, store.ErrNotExist):
				ans = storeAnswer{gone: true, at: at}
			case err != nil:
				f.log.Debug("asking the store for a changed object failed; its directory's relisting will tell", "key", key, "err", err)
				return nil
			}
			if l := f.ns.held(dir); l != nil && !l.at.Before(since) {
				return nil // listed since the version went stale, while the store was asked: current would not hand it out
			}
			f.healMu.Lock()
			// Not cleared meanwhile, and no later word on the key (two
			// versions of it asked about at once).
			if _, stale := f.staleSince[ino]; stale {
				if old, ok := f.answers[key]; !ok || !ans.at.Before(old.at) {
					f.answers[key] = ans
				}
			}
			f.healMu.Unlock()
			return nil
		})
	}
	g.Wait()
}

func (d *dirNode) controlDir(ctx context.Context, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.fsys.dirAttr(&out.Attr)
	out.Ino = inoOf("\x00ctl")
	if ch := d.GetChild(ControlDir); ch != nil {
		return ch, 0
	}
	return d.NewInode(ctx, &ctlDir{fsys: d.fsys}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: out.Ino}), 0
}

func (d *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	l, err := d.fsys.ns.list(ctx, d.key)
	if err != nil {
		return nil, d.fsys.fail("readdir", d.key, err)
	}
	if !d.IsRoot() && !d.fsys.selfRead(d.key) {
		d.fsys.walk.listed(d.key)
	}
	answered := d.fsys.answeredIn(d.key, l)
	out := make([]gofuse.DirEntry, 0, len(l.entries)+2)
	// "." and ".." as every file system lists them (ls -a); loaders'
	// listings (os.scandir, os.ReadDir) skip them.
	out = append(out, gofuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: d.fsys.dirIno(d.key)},
		gofuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: d.fsys.dirIno(d.fsys.parentKey(d.key))})
	for _, e := range l.entries {
		if d.IsRoot() && e.name == ControlDir && d.fsys.cfg.Control != nil {
			d.fsys.warnShadowed(l)
			continue
		}
		switch {
		case e.dir:
			out = append(out, gofuse.DirEntry{Name: e.name, Mode: syscall.S_IFDIR, Ino: inoOf(d.key + e.name + "/")})
		case answered[e.name]:
			// Listed as lookups see it (current): a name whose object the
			// store says is gone is not listed, so that ls -l does not
			// show it as "?" until the relisting lands.
			obj, err := d.fsys.current(d.key, e.obj)
			if err != nil {
				continue
			}
			out = append(out, gofuse.DirEntry{Name: e.name, Mode: syscall.S_IFREG, Ino: fileIno(obj)})
		default:
			out = append(out, gofuse.DirEntry{Name: e.name, Mode: syscall.S_IFREG, Ino: fileIno(e.obj)})
		}
	}
	return gofs.NewListDirStream(out), 0
}

// answeredIn returns the names of l (dir's listing) that the store has
// been asked about since a read found them stale (nil when none): the
// entries whose listed version current may replace. One lock for the
// whole listing, over the smaller of the answers and the entries.
func (f *FS) answeredIn(dir string, l *listing) map[string]bool {
	f.healMu.Lock()
	defer f.healMu.Unlock()
	var names map[string]bool
	add := func(name string) {
		if names == nil {
			names = map[string]bool{}
		}
		names[name] = true
	}
	if len(f.answers) <= len(l.entries) {
		for key := range f.answers {
			if d, name := splitKey(key); d == dir {
				if e, ok := lookUp(l, name); ok && !e.dir {
					add(name)
				}
			}
		}
		return names
	}
	key := []byte(dir)
	for _, e := range l.entries {
		if e.dir {
			continue
		}
		key = append(key[:len(dir)], e.name...)
		if _, ok := f.answers[string(key)]; ok { // no allocation for the lookup
			add(e.name)
		}
	}
	return names
}

// fileNode is one version of one object: its metadata never changes. A
// lookup after the metadata TTL that finds a new ETag makes a new node (a
// new inode, with an empty page cache), while files already open keep the
// node, and so the version, they opened: a read never mixes versions.
//
// Opens cost no round trip: Open answers ENOSYS, which tells the kernel
// (FUSE_NO_OPEN_SUPPORT) to stop sending OPEN, FLUSH is refused the same
// way, and reads arrive without a file handle. A warm epoch then runs at
// page-cache speed, with no request to this process per file. A mount that
// serves large files from local copies answers OPEN instead (passthrough.go).
type fileNode struct {
	gofs.Inode
	readOnly
	fsys *FS
	obj  store.Object // immutable

	// Lock order: mu, then what Opener.Open takes under it (prefetch's
	// locks, and through its Siblings the namespace's ns.mu); none of
	// those is held while mu is asked for.
	mu sync.Mutex
	r  Reader // guarded by mu: the reader of the latest pass over the file

	opens *nodeOpens // on a mount that may answer OPEN (passthrough), else nil: a mount holds a node per file

	// drops counts refused writes whose pages are still to be dropped
	// (dropWritten); the goroutine that drops them runs while it is > 0.
	drops atomic.Int64
}

// newFileNode makes the node of obj.
func (f *FS) newFileNode(obj store.Object) *fileNode {
	n := &fileNode{fsys: f, obj: obj}
	if f.cfg.passthrough() {
		n.opens = new(nodeOpens)
	}
	return n
}

var (
	_ gofs.NodeGetattrer = (*fileNode)(nil)
	_ gofs.NodeOpener    = (*fileNode)(nil)
	_ gofs.NodeReader    = (*fileNode)(nil)
	_ gofs.NodeWriter    = (*fileNode)(nil)
	_ gofs.NodeFlusher   = (*fileNode)(nil)
)

func (n *fileNode) Getattr(ctx context.Context, _ gofs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	n.fsys.fileAttr(n.obj, &out.Attr)
	return 0
}

// Open refuses writers and, for readers, asks the kernel never to send
// OPEN again (ENOSYS on OPEN means "opens need no message"), unless the
// mount serves large files from local copies (passthrough.go).
func (n *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EROFS
	}
	if n.fsys.opensAnswered(n.obj) {
		return n.openAnswered(ctx)
	}
	return nil, 0, syscall.ENOSYS
}

// Flush has nothing to do on a read-only file: ENOSYS stops the kernel
// from sending FLUSH on every close.
func (n *fileNode) Flush(ctx context.Context, _ gofs.FileHandle) syscall.Errno { return syscall.ENOSYS }

// Write is refused: with opens answered by the kernel alone, a file opened
// for writing learns it here.
func (n *fileNode) Write(ctx context.Context, _ gofs.FileHandle, _ []byte, _ int64) (uint32, syscall.Errno) {
	n.dropWritten()
	return 0, syscall.EROFS
}

// dropWritten drops the file's pages from the kernel's page cache after a
// refused write. A write(2) leaves none behind, but a write through a
// shared mapping (root may open any file for writing: opens reach no one)
// changes the cached pages themselves, which every reader of the file
// shares; its write back is the first this process hears of it. Left
// there, those bytes, which no one stored, would serve for the mount's
// life. The drop waits for this WRITE's answer (the kernel ends the write
// back with it), so it runs on a goroutine of its own: one per file at
// most, going round again while writes keep coming.
func (n *fileNode) dropWritten() {
	if n.drops.Add(1) > 1 {
		return
	}
	n.fsys.log.Warn("a write to a file of the read-only mount was refused; its cached pages are dropped so that readers get the object's bytes",
		"key", n.obj.Key)
	go func() {
		for {
			want := n.drops.Load()
			// ENOENT: the kernel forgot the inode; EBADF: unmounted.
			if errno := n.NotifyContent(0, 0); errno != 0 && errno != syscall.ENOENT && errno != syscall.EBADF {
				n.fsys.log.Warn("dropping the pages of a refused write", "key", n.obj.Key, "errno", errno.Error())
			}
			if n.drops.Add(-want) == 0 {
				return
			}
		}
	}()
}

// reader returns the reader for a read at off. A read from offset 0 starts
// a new pass over the file (an open, as far as prefetch can tell): it gets
// a fresh reader, which also tells the prefetcher where the job is.
func (n *fileNode) reader(off int64) Reader {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.r == nil || off == 0 {
		// The old reader holds no resources and may still serve a
		// concurrent pass: it is dropped, not closed.
		n.r = n.fsys.cfg.Opener.Open(n.obj)
	}
	return n.r
}

// done forgets r once its pass has read the end of the file: a file read
// once keeps no reader (an epoch over millions of files would keep one
// each). A read of the same pass arriving late gets a fresh reader.
func (n *fileNode) done(r Reader) {
	n.mu.Lock()
	if n.r == r {
		n.r = nil
	}
	n.mu.Unlock()
}

func (n *fileNode) Read(ctx context.Context, _ gofs.FileHandle, dest []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	if off >= n.obj.Size {
		return gofuse.ReadResultData(nil), 0
	}
	var data []byte
	var done func()
	var err error
	rd := n.reader(off)
	switch r := rd.(type) {
	case viewReader:
		data, done, err = r.ReadView(ctx, dest, off)
	default:
		var got int
		got, err = r.ReadAt(ctx, dest, off)
		data = dest[:got]
	}
	if off+int64(len(data)) >= n.obj.Size {
		n.done(rd)
	}
	if errors.Is(err, store.ErrNotExist) {
		// Deleted since it was listed: this version went stale.
		err = fmt.Errorf("%w: deleted: %w", store.ErrChanged, err)
	}
	if errors.Is(err, store.ErrChanged) {
		n.fsys.healStale(n)
	}
	if errors.Is(err, io.EOF) && off+int64(len(data)) < n.obj.Size && len(data) < len(dest) {
		// The kernel was told Size: an end before it would read as a whole,
		// shorter file.
		err = fmt.Errorf("%w: ended at %d of %d bytes", io.ErrUnexpectedEOF, off+int64(len(data)), n.obj.Size)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		if done != nil {
			done()
		}
		return nil, n.fsys.fail("read", fmt.Sprintf("%s@%d", n.obj.Key, off), err)
	}
	if done != nil {
		return &viewResult{data: data, done: done}, 0
	}
	return gofuse.ReadResultData(data), 0
}

// viewResult is a READ reply written from a view its reader holds until
// the reply is written: go-fuse calls Done after the write. Slices makes
// go-fuse write it as it is, in every mode: a ReadResult without it has
// its Done called before the write where splice is off (go-fuse v2.12).
type viewResult struct {
	data []byte
	done func()
}

func (r *viewResult) Size() int { return len(r.data) }

func (r *viewResult) Bytes([]byte) ([]byte, gofuse.Status) { return r.data, gofuse.OK }

func (r *viewResult) Slices() ([][]byte, gofuse.Status) { return [][]byte{r.data}, gofuse.OK }

func (r *viewResult) Done() { r.done() }

// healStale asks the store about n's key (askLoop) and lists n's directory
// again (heal) after a read found its object changed or deleted since it
// was listed (unless the listing knows already), and drops the kernel's
// entry for it: the next open looks it up and gets the object as it is
// now, instead of ESTALE until the metadata TTL passes (an hour by
// default: every epoch of a job would fail on a re-uploaded file). Files
// open keep their version, and their reads stay ESTALE: no read mixes
// versions. One goroutine per directory at most
// (heal), which takes the files that go stale while it runs too.
func (f *FS) healStale(n *fileNode) {
	dir, _ := splitKey(n.obj.Key)
	f.healMu.Lock()
	if _, seen := f.staleSince[fileIno(n.obj)]; !seen {
		if len(f.staleSince) >= staleVersions {
			clear(f.staleSince) // a store that disagrees gets one LIST more per version
			clear(f.disagreed)
			clear(f.answers)
			clear(f.reported)
		}
		f.staleSince[fileIno(n.obj)] = f.ns.now()
		if len(f.asking) < maxAsking {
			f.asking[n] = true
			if !f.askRunning {
				f.askRunning = true
				go f.askLoop()
			}
		}
	}
	queued, running := f.healing[dir]
	if !running {
		queued = map[*fileNode]bool{}
		f.healing[dir] = queued
	}
	queued[n] = true
	f.healMu.Unlock()
	if !running {
		go f.heal(dir)
	}
}

// entriesChanged drops the kernel's entries of names in dir that a new
// listing added, removed or changed. The kernel keeps an entry for
// --metadata-ttl from its last lookup (a readdir renews it), so without
// this an object deleted from the store stayed openable, its cached bytes
// served, for up to twice the ttl, and a name added after a failed lookup
// stayed ENOENT. It runs in the background: the kernel takes the
// directory's lock to drop an entry, which a lookup waiting on this very
// listing holds.
func (f *FS) entriesChanged(dir string, names []string) {
	if f.mountpoint == nil || len(names) == 0 {
		return // not mounted: the kernel holds nothing
	}
	f.dropMu.Lock()
	defer f.dropMu.Unlock()
	set := f.dropping[dir]
	if set == nil {
		set = map[string]bool{}
		f.dropping[dir] = set
	}
	for _, n := range names {
		set[n] = true
	}
	if !f.dropRunning {
		f.dropRunning = true
		go f.dropEntries()
	}
}

// forgetFiles drops the kernel's entries of the files in dir, whose listing
// went unused for two ttls and was given back: the kernel then forgets
// their inodes, and this process its nodes of them (most of the memory a
// file listed costs). Otherwise a mount that walked a large bucket once
// would hold a node for each file until the kernel ran short of memory.
// The kernel has not used those entries for a ttl (a lookup after that
// would have used the listing), nor will it without asking again; if it
// asks before they are dropped, the directory is listed again and they
// stay. Subdirectories stay: their own listings go when they are idle.
// Like entriesChanged, it runs in the background.
func (f *FS) forgetFiles(dir string) {
	if f.mountpoint == nil {
		return
	}
	f.dropMu.Lock()
	defer f.dropMu.Unlock()
	f.forgetting[dir] = true
	if !f.dropRunning {
		f.dropRunning = true
		go f.dropEntries()
	}
}

// dropEntries serves entriesChanged and forgetFiles until nothing is queued.
func (f *FS) dropEntries() {
	for {
		f.dropMu.Lock()
		var dir string
		var names map[string]bool
		for dir, names = range f.dropping {
			break
		}
		idle := false
		if names == nil {
			for dir = range f.forgetting {
				idle = true
				break
			}
		}
		if names == nil && !idle {
			f.dropRunning = false
			f.dropMu.Unlock()
			return
		}
		if idle {
			delete(f.forgetting, dir)
		} else {
			delete(f.dropping, dir) // names coming in meanwhile make a new set
		}
		f.dropMu.Unlock()
		parent := f.inodeAt(dir)
		if parent == nil {
			continue
		}
		if idle {
			if f.ns.held(dir) != nil {
				continue // listed again: the kernel's entries may be its
			}
			names = map[string]bool{}
			for name, ch := range parent.Children() {
				if _, isFile := ch.Operations().(*fileNode); isFile {
					names[name] = true
				}
			}
		}
		for name := range names {
			switch errno := parent.NotifyEntry(name); errno {
			case 0, syscall.ENOENT: // ENOENT: the kernel has no such entry
			case syscall.EBADF, syscall.ENODEV: // unmounted: nothing is left to drop
				f.dropMu.Lock()
				clear(f.dropping)
				clear(f.forgetting)
				f.dropRunning = false
				f.dropMu.Unlock()
				return
			default:
				f.log.Warn("dropping the kernel's entry of a name", "dir", dir, "name", name, "idle", idle, "errno", errno.Error())
			}
		}
	}
}

// healParallel is how many directories heal lists again at once, as
// relistDue does.
const healParallel = 2

// staleVersions bounds healStale's memory of stale versions.
const staleVersions = 1 << 16

// heal serves healStale for dir until no stale file of it is queued.
func (f *FS) heal(dir string) {
	for {
		f.healMu.Lock()
		nodes := f.healing[dir]
		if len(nodes) == 0 {
			delete(f.healing, dir)
			f.healMu.Unlock()
			return
		}
		f.healing[dir] = map[*fileNode]bool{}
		f.healMu.Unlock()
		judgedAt := f.ns.now()
		judged, due, warn := f.listingShows(dir, nodes)
		for _, n := range warn {
			f.log.Warn("the store's GET of an object disagrees with its LIST (another size or ETag, or not found) after a listing made since: "+
				"its reads fail ESTALE until the store agrees", "key", n.obj.Key, "listed_size", n.obj.Size, "listed_etag", n.obj.ETag)
		}
		if fresh := f.unreported(nodes); len(fresh) > 0 {
			f.log.Info("objects changed or deleted since they were listed: their reads fail ESTALE, new opens get them as they are now",
				"dir", dir, "files", len(fresh), "keys", someKeys(fresh, 5))
		}
		if due {
			f.healLists <- struct{}{}
			err := f.ns.awaitSince(dir, judged, judgedAt)
			<-f.healLists
			if err != nil {
				f.log.Warn("listing a directory again after a changed object failed; its old entries serve until --metadata-ttl passes",
					"dir", dir, "err", err)
				continue
			}
		}
		f.forgetAnswers(dir, nodes)
		// askLoop dropped the entries once it had the store's word; a
		// lookup that raced it may have put the old version back.
		f.dropStaleEntries(nodes)
	}
}

// forgetAnswers drops the store's answers about nodes' keys that dir's
// listing has caught up with (made since the version went stale, or saying
// the same): current has nothing more to hand out from them, and every
// readdir of dir would look at them for the mount's life.
func (f *FS) forgetAnswers(dir string, nodes map[*fileNode]bool) {
	l := f.ns.held(dir)
	if l == nil {
		return
	}
	f.healMu.Lock()
	defer f.healMu.Unlock()
	for n := range nodes {
		key := n.obj.Key
		ans, ok := f.answers[key]
		if !ok {
			continue
		}
		// What current would do with it for the version the listing
		// shows; one that says the same adds nothing.
		_, name := splitKey(key)
		e, listed := lookUp(l, name)
		usable := listed && !e.dir && f.answerForLocked(e.obj, l.at, ans)
		same := !ans.gone && listed && !e.dir && e.obj.ETag == ans.obj.ETag && e.obj.Size == ans.obj.Size
		if !usable || same {
			delete(f.answers, key)
		}
	}
}

// dropStaleEntries drops the kernel's entries of nodes' names that still
// lead to them.
func (f *FS) dropStaleEntries(nodes map[*fileNode]bool) {
	for n := range nodes {
		// A lookup since may have put the new version under the name
		// (the old inode keeps its parent link): its entry stays.
		if name, parent := n.Parent(); parent != nil && parent.GetChild(name) == n.EmbeddedInode() {
			// ENOENT: the kernel has no such entry (forgotten, or
			// looked up again meanwhile); EBADF: unmounted.
			if errno := parent.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT && errno != syscall.EBADF {
				f.log.Warn("dropping the kernel's entry of a changed object", "key", n.obj.Key, "errno", errno.Error())
			}
		}
	}
}

// unreported returns nodes' stale versions heal has not logged yet, but
// those a listing made since still shows (the disagreeing ones, warned
// about apart), and marks them logged: each failed read(2) queues its file
// twice (the kernel retries the page), and a version read again stale is
// no news.
func (f *FS) unreported(nodes map[*fileNode]bool) map[*fileNode]bool {
	f.healMu.Lock()
	defer f.healMu.Unlock()
	fresh := map[*fileNode]bool{}
	for n := range nodes {
		if ino := fileIno(n.obj); !f.reported[ino] && !f.disagreed[ino] {
			f.reported[ino] = true
			fresh[n] = true
		}
	}
	return fresh
}

// someKeys names up to limit of nodes' keys for a log line, and how many
// more there are (a key once, though two of its versions went stale).
func someKeys(nodes map[*fileNode]bool, limit int) string {
	keys := make([]string, 0, len(nodes))
	for n := range nodes {
		keys = append(keys, n.obj.Key)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) <= limit {
		return strings.Join(keys, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(keys[:limit], ", "), len(keys)-limit)
}

// listingShows says whether dir's listing, made before one of nodes was
// found stale, still holds its version: only then is a LIST due. (A store
// whose GETs refuse the version its LIST shows would otherwise have every
// failing read list the directory again.) warn holds the nodes, not
// reported before, whose version a listing made after their failure still
// shows: the store's last word, which its GETs refuse.
func (f *FS) listingShows(dir string, nodes map[*fileNode]bool) (l *listing, due bool, warn []*fileNode) {
	l = f.ns.held(dir)
	if l == nil {
		return nil, false, nil
	}
	f.healMu.Lock()
	defer f.healMu.Unlock()
	for n := range nodes {
		_, name := splitKey(n.obj.Key)
		ino := fileIno(n.obj)
		since, seen := f.staleSince[ino]
		if e, ok := lookUp(l, name); ok && !e.dir && e.obj.ETag == n.obj.ETag {
			if !seen || l.at.Before(since) {
				due = true
				continue
			}
			if !f.disagreed[ino] {
				f.disagreed[ino] = true
				warn = append(warn, n)
			}
		}
	}
	return l, due, warn
}

// fail maps err to an errno, logging the ones a user needs to see.
func (f *FS) fail(op, what string, err error) syscall.Errno {
	e := errno(err)
	switch {
	case e == syscall.ENOENT, e == syscall.EINTR, e == syscall.ESTALE: // ESTALE: heal logs one line a directory
		f.log.Debug(op, "path", what, "err", err)
	case errors.Is(err, fs.ErrClosed):
		// The mount is ending (its loader closed first): every read in
		// flight ends so, hundreds of lines of no news at a stop.
		f.log.Debug(op+" stopped: the mount is ending", "path", what, "err", err)
	default:
		f.log.Warn(op+" failed", "path", what, "errno", e.Error(), "err", err)
	}
	return e
}

// Writev is refused like Write.
func (n *fileNode) Writev(ctx context.Context, _ gofs.FileHandle, _ [][]byte, _ int64) (uint32, syscall.Errno) {
	n.dropWritten()
	return 0, syscall.EROFS
}

// Refresh lists again the given directories (key prefixes ending in "/"),
// parallel LISTs at a time, replacing the listings made before the call.
// gate runs before each LIST (a refresh can yield to reads that way); an
// error from it stops the refresh.
func (f *FS) Refresh(ctx context.Context, dirs []string, parallel int, gate func(context.Context) error) error {
	if err := f.ns.refresh(ctx, dirs, parallel, gate); err != nil {
		return fmt.Errorf("refresh the namespace: %w", err)
	}
	return nil
}
