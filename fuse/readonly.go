package fuse

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

// readOnly answers every namespace or attribute change with EROFS. The
// mount cannot carry the kernel's "ro" flag, since the control files under
// .dataccel/ take writes; so each node refuses changes itself (go-fuse's
// default would be ENOTSUP, which tells a user nothing).
type readOnly struct{}

func (readOnly) Setattr(context.Context, gofs.FileHandle, *gofuse.SetAttrIn, *gofuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}
func (readOnly) Mkdir(context.Context, string, uint32, *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (readOnly) Mknod(context.Context, string, uint32, uint32, *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (readOnly) Link(context.Context, gofs.InodeEmbedder, string, *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (readOnly) Symlink(context.Context, string, string, *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (readOnly) Create(context.Context, string, uint32, uint32, *gofuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}
func (readOnly) Allocate(context.Context, gofs.FileHandle, uint64, uint64, uint32) syscall.Errno {
	return syscall.EROFS
}

// Fsync has nothing to write: 0, as on any file system for a file read
// only (tools that fsync what they read fail on EOPNOTSUPP, go-fuse's
// default). Not ENOSYS, which would stop the kernel sending FSYNC for the
// whole mount, the announce file's included. The kernel writes a file's
// dirty pages back before it asks, so a write through a shared mapping
// still fails the fsync (EIO).
func (readOnly) Fsync(context.Context, gofs.FileHandle, uint32) syscall.Errno { return 0 }

func (readOnly) Unlink(context.Context, string) syscall.Errno { return syscall.EROFS }
func (readOnly) Rmdir(context.Context, string) syscall.Errno  { return syscall.EROFS }
func (readOnly) Rename(context.Context, string, gofs.InodeEmbedder, string, uint32) syscall.Errno {
	return syscall.EROFS
}

var (
	_ gofs.NodeSetattrer = readOnly{}
	_ gofs.NodeMkdirer   = readOnly{}
	_ gofs.NodeMknoder   = readOnly{}
	_ gofs.NodeLinker    = readOnly{}
	_ gofs.NodeSymlinker = readOnly{}
	_ gofs.NodeCreater   = readOnly{}
	_ gofs.NodeUnlinker  = readOnly{}
	_ gofs.NodeRmdirer   = readOnly{}
	_ gofs.NodeRenamer   = readOnly{}
	_ gofs.NodeAllocater = readOnly{}
	_ gofs.NodeFsyncer   = readOnly{}
)
