package bench

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/dataccel/dataccel/internal/testenv"
)

// ioctlFile is a file of a test FUSE file system that counts the ioctls
// the kernel forwards to it (and answers them as go-fuse does by default).
type ioctlFile struct {
	gofs.MemRegularFile
	ioctls *atomic.Int64
}

func (f *ioctlFile) Ioctl(context.Context, gofs.FileHandle, uint32, uint64, []byte, []byte) (int32, syscall.Errno) {
	f.ioctls.Add(1)
	return 0, syscall.ENOTTY
}

type ioctlRoot struct {
	gofs.Inode
	sizes  []int
	ioctls *atomic.Int64
}

func (r *ioctlRoot) OnAdd(ctx context.Context) {
	for i, size := range r.sizes {
		f := &ioctlFile{MemRegularFile: gofs.MemRegularFile{Data: make([]byte, size), Attr: fuse.Attr{Mode: 0o444}}, ioctls: r.ioctls}
		r.AddChild(fmt.Sprintf("f%03d.JPEG", i), r.NewPersistentInode(ctx, f, gofs.StableAttr{}), false)
	}
}

// mountIoctlCounter mounts files of the given sizes on a FUSE file system
// served by this process and returns the mount point and the ioctl count.
func mountIoctlCounter(t *testing.T, sizes []int) (string, *atomic.Int64) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "no /dev/fuse on this machine: FUSE tests need it (and root)")
	}
	dir := t.TempDir()
	root := &ioctlRoot{sizes: sizes, ioctls: new(atomic.Int64)}
	srv, err := gofs.Mount(dir, root, &gofs.Options{MountOptions: fuse.MountOptions{FsName: "ioctl-counter"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Unmount() })
	if err := testenv.SettleFUSEPoll(dir); err != nil {
		t.Fatal(err)
	}
	return dir, root.ioctls
}

// A Python-style open asks isatty() once per file, which a FUSE mount is
// asked in turn; a plain one asks nothing. Both read every byte.
func TestReadPathPythonOpen(t *testing.T) {
	sizes := []int{0, 1, 4096, 1<<20 + 7, 3 << 20}
	dir, ioctls := mountIoctlCounter(t, sizes)
	for _, tc := range []struct {
		name       string
		pythonOpen bool
		wantIoctls int64
	}{
		{"plain", false, 0},
		{"python", true, int64(len(sizes))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ioctls.Store(0)
			src := DirSource{Root: dir, PythonOpen: tc.pythonOpen}
			buf := make([]byte, 1<<20)
			for i, size := range sizes {
				n, err := src.ReadFile(context.Background(), File{Name: fmt.Sprintf("f%03d.JPEG", i)}, buf)
				if err != nil || n != int64(size) {
					t.Errorf("file %d: read %d bytes, err %v; want %d", i, n, err, size)
				}
			}
			if got := ioctls.Load(); got != tc.wantIoctls {
				t.Errorf("%d ioctls reached the file system, want %d", got, tc.wantIoctls)
			}
		})
	}
	if _, err := (DirSource{Root: dir}).ReadFile(context.Background(), File{Name: "missing"}, make([]byte, 16)); err == nil {
		t.Error("reading a missing file: no error")
	}
}

// RunConfig.PythonOpen reaches the directory sources of a run.
func TestRunPythonOpen(t *testing.T) {
	sizes := make([]int, 24)
	for i := range sizes {
		sizes[i] = 1000 + i
	}
	dir, ioctls := mountIoctlCounter(t, sizes)
	res, err := Run(context.Background(), RunConfig{Workers: 2, Batch: 4, Epochs: 2, Seed: 1, PythonOpen: true}, DirSource{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ioctls.Load(), int64(2*len(sizes)); got != want {
		t.Errorf("%d ioctls in 2 epochs of %d files, want %d", got, len(sizes), want)
	}
	if !res.Config.PythonOpen {
		t.Error("the result does not record python_open")
	}
}
