package fuse

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/dataccel/dataccel/store"
)

// LocalCopies gives whole local copies of objects (package localcopy).
type LocalCopies interface {
	// Acquire returns a read-only file holding all of obj, kept until
	// release is called; an error means there is none to be had.
	Acquire(ctx context.Context, obj store.Object) (f *os.File, release func(), err error)
	// Has reports whether a whole copy of obj is held now.
	Has(obj store.Object) bool
}

// Passthrough: a file of at least Config.PassthroughMinSize is read by the
// kernel from a whole local copy of it (FUSE passthrough, Linux 6.9+): at
// the speed of the local disk's page cache, large folios and all, with no
// request to this process. Its open waits for the copy, made from the
// loader's blocks (prefetched ahead of the job, or fetched then), or for the
// check of one kept from the last mount.
//
// It costs an OPEN (and a RELEASE) per file: the kernel sends them to a
// file system that answers OPEN at all, and it is told so, or told never
// to send them again (ENOSYS), once for the whole mount, and for good. A
// small file pays that round trip more than its read, so the mount weighs
// the opens it has answered: it answers them while the large files opened
// hold at least smallOpenCost bytes per small file opened, and stops for
// good once, after decideAfter opens at least, they no longer do (a dataset
// of small files, one large index file opened first or not). It stops only
// while no file is open from its copy: the kernel refuses to open an inode
// through the page cache while it is open from a copy.
const (
	ptOn  int32 = iota // opens answered, large files read from copies
	ptOff              // opens not answered, for good
)

// decideAfter: the opens answered before passthrough may turn off.
const decideAfter = 64

// smallOpenCost: an answered OPEN costs a small file about what a copy
// saves on this many bytes of a large file's warm read through the mount
// (bench/RESULTS.md, session 29).
const smallOpenCost = 128 << 10

const noPassthroughKernel = "the kernel has no FUSE passthrough (Linux 6.9 or later)"

// passthroughMissing says why this mount cannot use passthrough ("" if it
// can), from the kernel's INIT flags: registering a backing file needs
// CAP_SYS_ADMIN, and a copy nobody can use would only delay opens.
func passthroughMissing(kernelFlags uint64) string {
	if kernelFlags&gofuse.CAP_PASSTHROUGH == 0 {
		return noPassthroughKernel
	}
	return passthroughNeedsRoot()
}

func passthroughNeedsRoot() string {
	if os.Geteuid() != 0 {
		return "FUSE passthrough needs root"
	}
	return ""
}

// PassthroughUnavailable is passthroughMissing for a caller without a
// mount (dataccel warm, which makes copies for the next one): the kernel's
// version stands in for its INIT flags.
func PassthroughUnavailable() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil || !kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 9) {
		return noPassthroughKernel
	}
	return passthroughNeedsRoot()
}

// kernelAtLeast reports whether a kernel release string ("6.18.44-fc")
// is at least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	minorDigits, _, _ := strings.Cut(parts[1], "-") // "10-rc1"
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(minorDigits)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// opensAnswered reports whether this mount answers OPEN (passthrough on),
// at the open of a file, obj, which it counts.
func (f *FS) opensAnswered(obj store.Object) bool {
	if f.pt.Load() == ptOff {
		return false
	}
	p := &f.ptOpens
	if obj.Size >= f.cfg.PassthroughMinSize {
		p.largeBytes.Add(obj.Size)
	} else {
		p.small.Add(1)
	}
	opens := p.opens.Add(1)
	small, large := p.small.Load(), p.largeBytes.Load()
	if opens < decideAfter || small*smallOpenCost <= large || p.ptHandles.Load() > 0 {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ptHandles.Load() > 0 { // a file opened from its copy since
		return true
	}
	if f.pt.CompareAndSwap(ptOn, ptOff) {
		f.log.Info("passthrough off for good: small files dominate the opens, which it would cost a round trip each",
			"opens", opens, "small_files", small, "large_file_bytes", large, "min_bytes", f.cfg.PassthroughMinSize)
	}
	return false
}

// ptOpens weighs the opens a mount answers (opensAnswered).
type ptOpens struct {
	opens      atomic.Int64 // files opened
	small      atomic.Int64 // of them, smaller than PassthroughMinSize
	largeBytes atomic.Int64 // the bytes of the others
	ptHandles  atomic.Int64 // handles open from a copy now

	// mu orders the turn off against a new handle from a copy: none may
	// start after it (see ptOpen).
	mu sync.Mutex
}

// openControl answers the open of a control file: like a file's when the
// mount does not answer opens, but while passthrough is undecided or on it
// must not say ENOSYS, which would decide it off for every file. Reads and
// writes then go straight to the file (FOPEN_DIRECT_IO): its content
// changes from one read to the next.
func (f *FS) openControl() (gofs.FileHandle, uint32, syscall.Errno) {
	if f.pt.Load() == ptOff {
		return nil, 0, syscall.ENOSYS
	}
	return nil, gofuse.FOPEN_DIRECT_IO, 0
}

// passthroughFor reports whether obj would be read from a local copy: a
// push into the FUSE page cache of such a file is wasted, as the kernel
// reads the copy's (unless the copy finds no room, and the file is read
// through the mount: its reads are served from the loader's blocks).
func (f *FS) passthroughFor(obj store.Object) bool {
	return f.pt.Load() != ptOff && obj.Size >= f.cfg.PassthroughMinSize
}

// openHandle is one open of a file on a mount that answers OPEN: through
// the local copy (pt) or through this process's reads, as any file.
//
// The kernel refuses an open in one mode while the inode is open in the
// other (EIO to the caller), so a node keeps the mode of its open handles:
// a file open through reads stays so until all its handles are released.
type openHandle struct {
	n  *fileNode
	pt bool
}

var (
	_ gofs.FilePassthroughFder = (*openHandle)(nil)
	_ gofs.FileReleaser        = (*openHandle)(nil)
)

// nodeOpens is a file node's open handles on a mount that answers OPEN.
//
// Lock order: nodeOpens.mu, then FS.ptOpens.mu.
type nodeOpens struct {
	mu      sync.Mutex
	cached  int      // guarded by mu: handles read through this process
	pt      int      // guarded by mu: handles read from the copy
	copy    *os.File // guarded by mu: the copy, while pt > 0
	release func()   // guarded by mu: releases copy
}

// PassthroughFd hands go-fuse the copy to register with the kernel (it asks
// only for the first passthrough open of an inode not open so already).
func (h *openHandle) PassthroughFd() (int, bool) {
	if !h.pt {
		return -1, false
	}
	o := h.n.opens
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.copy == nil {
		return -1, false
	}
	return int(o.copy.Fd()), true
}

func (h *openHandle) Release(ctx context.Context) syscall.Errno {
	o := h.n.opens
	if !h.pt {
		o.mu.Lock()
		o.cached--
		o.mu.Unlock()
		return 0
	}
	h.n.fsys.ptOpens.ptHandles.Add(-1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pt--; o.pt == 0 {
		o.release()
		o.copy, o.release = nil, nil
	}
	return 0
}

// openAnswered opens n on a mount that answers OPEN. A read through this
// process keeps the page cache (FOPEN_KEEP_CACHE), as it does when opens
// are not answered.
func (n *fileNode) openAnswered(ctx context.Context) (gofs.FileHandle, uint32, syscall.Errno) {
	o := n.opens
	cached := func() (gofs.FileHandle, uint32, syscall.Errno) {
		o.cached++
		return &openHandle{n: n}, gofuse.FOPEN_KEEP_CACHE, 0
	}
	// ptOpen opens from the copy, unless passthrough turned off since this
	// open began (the kernel would then refuse opens of the inode that
	// reach it without OPEN). Called with o.mu held.
	ptOpen := func() (gofs.FileHandle, uint32, syscall.Errno) {
		p := &n.fsys.ptOpens
		p.mu.Lock()
		defer p.mu.Unlock()
		if n.fsys.pt.Load() == ptOff {
			if o.pt == 0 && o.copy != nil { // the copy this open just took
				o.release()
				o.copy, o.release = nil, nil
			}
			return cached()
		}
		o.pt++
		p.ptHandles.Add(1)
		return &openHandle{n: n, pt: true}, 0, 0
	}
	o.mu.Lock()
	if o.pt > 0 {
		defer o.mu.Unlock()
		return ptOpen()
	}
	if o.cached > 0 || n.obj.Size < n.fsys.cfg.PassthroughMinSize {
		defer o.mu.Unlock()
		return cached()
	}
	o.mu.Unlock()

	f, release, err := n.fsys.cfg.Copies.Acquire(ctx, n.obj)
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, 0, syscall.EINTR
	case err != nil:
		if !errors.Is(err, context.Canceled) {
			n.fsys.log.Debug("no local copy; the file is read through the mount", "key", n.obj.Key, "err", err)
		}
		return cached()
	case o.pt > 0: // another open got a copy meanwhile: share it
		release()
	case o.cached > 0: // another open went through reads meanwhile
		release()
		return cached()
	default:
		o.copy, o.release = f, release
	}
	return ptOpen()
}

// withoutCopies drops from an announced order the files a local copy
// serves (unless passthrough is off): prefetching them would fetch bytes
// the kernel reads from the copy instead.
func (f *FS) withoutCopies(order []store.Object) []store.Object {
	if f.pt.Load() == ptOff {
		return order
	}
	out := make([]store.Object, 0, len(order))
	for _, o := range order {
		if o.Size < f.cfg.PassthroughMinSize || !f.cfg.Copies.Has(o) {
			out = append(out, o)
		}
	}
	return out
}
