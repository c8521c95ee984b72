package fuse

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"github.com/dataccel/dataccel/store"
)

// errno is the one place where errors become FUSE status codes. go-fuse's
// own ToErrno only knows bare syscall.Errno values and turns a wrapped error
// into ENOSYS, so every error from below goes through here.
// passThrough are the errnos this package raises itself; any other errno
// from below (ECONNREFUSED from a dial, say) means nothing to a reader of a
// file and becomes EIO.
var passThrough = map[syscall.Errno]bool{
	syscall.EROFS: true, syscall.EISDIR: true, syscall.ENOTDIR: true, syscall.ENOENT: true,
	syscall.EINVAL: true, syscall.EBADF: true, syscall.ETIMEDOUT: true,
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	switch {
	case errors.Is(err, store.ErrChanged): // before ErrNotExist: "deleted since open" is both
		return syscall.ESTALE
	case errors.Is(err, store.ErrNotExist), errors.Is(err, store.ErrNoBucket):
		return syscall.ENOENT
	case errors.Is(err, store.ErrAccess):
		return syscall.EACCES
	case errors.Is(err, fs.ErrClosed): // before Canceled, which the loader's close wraps too: a reader would retry EINTR on a mount that is gone
		return syscall.EIO
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.As(err, &en) && passThrough[en]:
		return en
	}
	return syscall.EIO
}
