// Package fuse serves a bucket prefix as a read-only POSIX directory tree
// through go-fuse v2: directory listings with a metadata cache, stat, open
// and read at any offset. It is the only importer of go-fuse and holds the
// single error-to-errno mapping.
//
// It does not fetch data itself: reads go to a Reader from the Opener it is
// given (the prefetch loader in production). It does not cache data: the
// kernel page cache and the prefetch loader do.
package fuse

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/dataccel/dataccel/store"
)

// Reader reads one open file; the prefetch loader's readers satisfy it.
type Reader interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Close() error
}

// Opener makes a Reader for an object version (one per open handle).
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
	UID, GID    uint32
	AllowOther  bool
	Logger      *slog.Logger
	Debug       bool
	// Control, when set, serves the control directory (.dataccel/).
	Control Control
	// Preload, when set, is a full listing of Prefix (a manifest) installed
	// before the mount serves.
	Preload []store.Object
}

// FS is the mounted filesystem's state shared by all nodes.
type FS struct {
	cfg     Config
	ns      *namespace
	log     *slog.Logger
	mounted time.Time
}

func newFS(cfg Config) *FS {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MetadataTTL <= 0 {
		cfg.MetadataTTL = time.Hour
	}
	return &FS{cfg: cfg, ns: newNamespace(cfg.Store, cfg.MetadataTTL, cfg.Logger), log: cfg.Logger, mounted: time.Now()}
}

// Next returns up to n files that follow key in its directory's listing
// order, from cached listings only (for directory-order prefetch).
func (f *FS) Next(key string, n int) []store.Object { return f.ns.next(key, n) }

// Files returns the files directly in dir (a key prefix ending in "/"),
// from cached listings only.
func (f *FS) Files(dir string) []store.Object { return f.ns.files(dir) }

// Load installs a full listing of the mounted prefix (from a manifest or a
// parallel listing): afterwards stat, readdir and open cost no request
// until the metadata TTL passes.
func (f *FS) Load(objs []store.Object) { f.ns.load(f.cfg.Prefix, objs) }

func inoOf(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	// 0 and 1 are reserved (1 is the root).
	return h.Sum64() | 2
}

func (f *FS) dirAttr(out *gofuse.Attr) {
	out.Mode = syscall.S_IFDIR | 0o555
	out.Nlink = 2
	out.Owner = gofuse.Owner{Uid: f.cfg.UID, Gid: f.cfg.GID}
	out.SetTimes(nil, &f.mounted, &f.mounted)
}

func (f *FS) fileAttr(obj store.Object, out *gofuse.Attr) {
	out.Mode = syscall.S_IFREG | 0o444
	out.Nlink = 1
	out.Size = uint64(obj.Size)
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.Owner = gofuse.Owner{Uid: f.cfg.UID, Gid: f.cfg.GID}
	mt := obj.ModTime
	out.SetTimes(nil, &mt, &mt)
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
	if d.IsRoot() && name == ControlDir {
		return d.controlDir(ctx, out)
	}
	e, ok, err := d.fsys.ns.lookup(ctx, d.key, name)
	if err != nil {
		return nil, d.fsys.fail("lookup", d.key+name, err)
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
	d.fsys.fileAttr(e.obj, &out.Attr)
	out.Ino = inoOf(e.obj.Key)
	if ch := d.GetChild(name); ch != nil {
		if fn, isFile := ch.Operations().(*fileNode); isFile {
			fn.setObject(e.obj)
			return ch, 0
		}
	}
	return d.NewInode(ctx, &fileNode{fsys: d.fsys, obj: e.obj}, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: out.Ino}), 0
}

func (d *dirNode) controlDir(ctx context.Context, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.fsys.cfg.Control == nil {
		return nil, syscall.ENOENT
	}
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
	out := make([]gofuse.DirEntry, 0, len(l.entries))
	for _, e := range l.entries {
		if d.IsRoot() && e.name == ControlDir {
			continue // shadowed by the control directory
		}
		if e.dir {
			out = append(out, gofuse.DirEntry{Name: e.name, Mode: syscall.S_IFDIR, Ino: inoOf(d.key + e.name + "/")})
		} else {
			out = append(out, gofuse.DirEntry{Name: e.name, Mode: syscall.S_IFREG, Ino: inoOf(e.obj.Key)})
		}
	}
	return gofs.NewListDirStream(out), 0
}

// fileNode is one object. Its metadata follows the directory listing; each
// open handle is pinned to the version it opened.
type fileNode struct {
	gofs.Inode
	readOnly
	fsys *FS

	mu       sync.Mutex
	obj      store.Object // guarded by mu
	openETag string       // guarded by mu; the version the kernel's page cache holds
}

var (
	_ gofs.NodeGetattrer = (*fileNode)(nil)
	_ gofs.NodeOpener    = (*fileNode)(nil)
)

func (n *fileNode) object() store.Object {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.obj
}

func (n *fileNode) setObject(o store.Object) {
	n.mu.Lock()
	n.obj = o
	n.mu.Unlock()
}

// refresh re-reads the object's metadata from its directory listing (which
// is re-listed only when older than the TTL).
func (n *fileNode) refresh(ctx context.Context) (store.Object, error) {
	cur := n.object()
	dir, name := splitKey(cur.Key)
	e, ok, err := n.fsys.ns.lookup(ctx, dir, name)
	if err != nil {
		return store.Object{}, err
	}
	if !ok || e.dir {
		return store.Object{}, fmt.Errorf("open %q: %w", cur.Key, store.ErrNotExist)
	}
	n.setObject(e.obj)
	return e.obj, nil
}

func (n *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		n.fsys.fileAttr(h.obj, &out.Attr) // an open handle keeps its version's size
		return 0
	}
	obj, err := n.refresh(ctx)
	if err != nil {
		return n.fsys.fail("getattr", n.object().Key, err)
	}
	n.fsys.fileAttr(obj, &out.Attr)
	return 0
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EROFS
	}
	obj, err := n.refresh(ctx)
	if err != nil {
		return nil, 0, n.fsys.fail("open", n.object().Key, err)
	}
	// Content under one ETag never changes, so the kernel may keep its page
	// cache across opens, unless the version changed since the last open:
	// then the kernel must drop what it holds of the old version.
	n.mu.Lock()
	keep := n.openETag == obj.ETag
	n.openETag = obj.ETag
	n.mu.Unlock()
	// Nothing to flush on a read-only file: NOFLUSH spares close(2) a
	// round trip to this process.
	fuseFlags := uint32(gofuse.FOPEN_NOFLUSH)
	if keep {
		fuseFlags |= gofuse.FOPEN_KEEP_CACHE
	}
	return &handle{fsys: n.fsys, obj: obj, r: n.fsys.cfg.Opener.Open(obj)}, fuseFlags, 0
}

// handle is one open file, pinned to one object version.
type handle struct {
	fsys *FS
	obj  store.Object
	r    Reader
}

var (
	_ gofs.FileReader   = (*handle)(nil)
	_ gofs.FileReleaser = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	if off >= h.obj.Size {
		return gofuse.ReadResultData(nil), 0
	}
	n, err := h.r.ReadAt(ctx, dest, off)
	if errors.Is(err, store.ErrNotExist) {
		// Deleted since the open: for this handle the file went stale.
		err = fmt.Errorf("%w: deleted: %w", store.ErrChanged, err)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, h.fsys.fail("read", fmt.Sprintf("%s@%d", h.obj.Key, off), err)
	}
	return gofuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	if err := h.r.Close(); err != nil {
		h.fsys.log.Debug("close reader", "key", h.obj.Key, "err", err)
	}
	return 0
}

// fail maps err to an errno, logging the ones a user needs to see.
func (f *FS) fail(op, what string, err error) syscall.Errno {
	e := errno(err)
	switch e {
	case syscall.ENOENT, syscall.EINTR:
		f.log.Debug(op, "path", what, "err", err)
	default:
		f.log.Warn(op+" failed", "path", what, "errno", e.Error(), "err", err)
	}
	return e
}
