package fuse

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
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
	// Offer asks for a copy of obj, made in the background if it can be
	// without a fetch: obj was just read through the mount.
	Offer(obj store.Object)
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
// to send them again (ENOSYS), once for the whole mount. So the mount
// decides once, at the first open of a file: passthrough if that file is
// large enough, else never (a dataset of small files keeps its opens free:
// an OPEN costs a small file more than its read).
const (
	ptUndecided int32 = iota
	ptOn
	ptOff
)

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
// deciding it at the first open of a file, obj.
func (f *FS) opensAnswered(obj store.Object) bool {
	if f.cfg.Copies == nil || f.cfg.PassthroughMinSize <= 0 {
		return false
	}
	mode := f.pt.Load()
	if mode == ptUndecided {
		want := ptOff
		if obj.Size >= f.cfg.PassthroughMinSize {
			want = ptOn
		}
		if f.pt.CompareAndSwap(ptUndecided, want) {
			f.log.Info("passthrough decided by the first file opened",
				"on", want == ptOn, "file_bytes", obj.Size, "min_bytes", f.cfg.PassthroughMinSize)
		}
		mode = f.pt.Load()
	}
	return mode == ptOn
}

// openControl answers the open of a control file: like a file's when the
// mount does not answer opens, but while passthrough is undecided or on it
// must not say ENOSYS, which would decide it off for every file. Reads and
// writes then go straight to the file (FOPEN_DIRECT_IO): its content
// changes from one read to the next.
func (f *FS) openControl() (gofs.FileHandle, uint32, syscall.Errno) {
	if f.cfg.Copies == nil || f.cfg.PassthroughMinSize <= 0 || f.pt.Load() == ptOff {
		return nil, 0, syscall.ENOSYS
	}
	return nil, gofuse.FOPEN_DIRECT_IO, 0
}

// passthroughFor reports whether obj would be read from a local copy: a
// push into the FUSE page cache of such a file is wasted, as the kernel
// reads the copy's (unless the copy finds no room, and the file is read
// through the mount: its reads are served from the loader's blocks).
func (f *FS) passthroughFor(obj store.Object) bool {
	return f.pt.Load() == ptOn && obj.Size >= f.cfg.PassthroughMinSize
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
	o := &h.n.opens
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.copy == nil {
		return -1, false
	}
	return int(o.copy.Fd()), true
}

// Release of a handle read through this process offers the file for a
// copy: once a job has read a large file whole, its blocks are in the cache,
// and the next open of it can be served from a copy made from them.
func (h *openHandle) Release(ctx context.Context) syscall.Errno {
	o := &h.n.opens
	if !h.pt {
		o.mu.Lock()
		o.cached--
		o.mu.Unlock()
		if h.n.obj.Size >= h.n.fsys.cfg.PassthroughMinSize {
			h.n.fsys.cfg.Copies.Offer(h.n.obj)
		}
		return 0
	}
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
	o := &n.opens
	cached := func() (gofs.FileHandle, uint32, syscall.Errno) {
		o.cached++
		return &openHandle{n: n}, gofuse.FOPEN_KEEP_CACHE, 0
	}
	o.mu.Lock()
	if o.pt > 0 {
		o.pt++
		o.mu.Unlock()
		return &openHandle{n: n, pt: true}, 0, 0
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
		if !errors.Is(err, context.Canceled) && !errors.Is(err, fs.ErrNotExist) { // none held yet (made after a read)
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
	o.pt++
	return &openHandle{n: n, pt: true}, 0, 0
}

// withoutCopies drops from an announced order the files a local copy
// serves (unless passthrough is off): prefetching them would fetch bytes
// the kernel reads from the copy instead.
func (f *FS) withoutCopies(order []store.Object) []store.Object {
	if f.cfg.Copies == nil || f.cfg.PassthroughMinSize <= 0 || f.pt.Load() == ptOff {
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
