package fuse

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// pushMount mounts objs (each version's ETag "e") and returns the mount,
// a count of the readers it opened (reads that reached it), and the
// version of a key.
func pushMount(t *testing.T, objs map[string][]byte) (*Mount, *atomic.Int64, func(string) store.Object) {
	t.Helper()
	st := memStore{objs: objs}
	opens := new(atomic.Int64)
	m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Opener: OpenerFunc(func(o store.Object) Reader {
		opens.Add(1)
		return DirectOpener{Store: st}.Open(o)
	})})
	return m, opens, func(key string) store.Object {
		return store.Object{Key: key, Size: int64(len(objs[key])), ETag: "e"}
	}
}

// readsPushed reads path and wants the pushed bytes, with no read reaching
// the mount (opens counts them).
func readsPushed(t *testing.T, path string, pushed []byte, opens *atomic.Int64) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pushed) {
		t.Fatalf("read %d bytes that are not the pushed ones: the read reached the mount", len(got))
	}
	if n := opens.Load(); n != 0 {
		t.Fatalf("%d reads reached the mount, want none", n)
	}
}

// TestStore: FS.Store puts bytes into the kernel's page cache of a file the
// kernel has looked up, and a read then gets them with no READ reaching the
// mount. The test pushes bytes that differ from the object's, so that only
// a read served from the page cache can return them. A file never looked
// up, another version, or a key outside the mount is refused.
func TestStore(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	objs := map[string][]byte{
		"d/a.bin": randBytes(r, 300<<10+123), // not a whole number of pages
		"d/b.bin": randBytes(r, 5000),
	}
	m, opens, obj := pushMount(t, objs)

	if err := m.FS.Store(obj("d/b.bin"), 0, objs["d/b.bin"]); !errors.Is(err, ErrNoInode) {
		t.Fatalf("store into a file never looked up: %v, want ErrNoInode", err)
	}
	if _, err := os.Stat(filepath.Join(m.Dir, "d", "a.bin")); err != nil {
		t.Fatal(err)
	}
	pushed := randBytes(r, len(objs["d/a.bin"]))
	if err := m.FS.Store(obj("d/a.bin"), 0, pushed); err != nil {
		t.Fatalf("store: %v", err)
	}
	readsPushed(t, filepath.Join(m.Dir, "d", "a.bin"), pushed, opens)

	other := obj("d/a.bin")
	other.ETag = "another version"
	if err := m.FS.Store(other, 0, pushed); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("store of another version: %v, want ErrChanged", err)
	}
	if err := m.FS.Store(obj("elsewhere/a.bin"), 0, pushed); !errors.Is(err, ErrNoInode) {
		t.Fatalf("store outside the mount's files: %v, want ErrNoInode", err)
	}
	// A file read normally still reads the object's bytes.
	got, err := os.ReadFile(filepath.Join(m.Dir, "d", "b.bin"))
	if err != nil || !bytes.Equal(got, objs["d/b.bin"]) {
		t.Fatalf("read d/b.bin: %v", err)
	}
	if n := opens.Load(); n != 1 {
		t.Fatalf("%d readers opened, want 1 (for d/b.bin)", n)
	}
}

// TestStoreLooksUpListedFiles: a job that opens files from a list of paths
// has the kernel look a file up only at its open, too late for a push. So
// FS.Store looks the file up through the mount itself where its
// directories are listed (here, "d/e/" listed as an announcement lists it,
// the kernel knowing neither "e" nor the file), and the job's read then
// gets the pushed bytes with no READ reaching the mount. Where a directory
// on the way is not listed, it refuses as before and lists nothing: a push
// never waits on the store.
func TestStoreLooksUpListedFiles(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	objs := map[string][]byte{
		"d/a.bin":   randBytes(r, 4000),
		"d/e/b.bin": randBytes(r, 200<<10+17),
		"u/c.bin":   randBytes(r, 3000),
	}
	m, opens, obj := pushMount(t, objs)

	if _, err := os.Stat(filepath.Join(m.Dir, "d", "a.bin")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.FS.ns.list(t.Context(), "d/e/"); err != nil {
		t.Fatal(err)
	}
	if m.FS.lookedUp("d/e/b.bin") != nil {
		t.Fatal("the kernel looked d/e/b.bin up before the push: the test proves nothing")
	}
	pushed := randBytes(r, len(objs["d/e/b.bin"]))
	if err := m.FS.Store(obj("d/e/b.bin"), 0, pushed); err != nil {
		t.Fatalf("store into a listed file the kernel had not looked up: %v", err)
	}
	readsPushed(t, filepath.Join(m.Dir, "d", "e", "b.bin"), pushed, opens)

	if err := m.FS.Store(obj("u/c.bin"), 0, objs["u/c.bin"]); !errors.Is(err, ErrNoInode) {
		t.Fatalf("store into a file of a directory never listed: %v, want ErrNoInode", err)
	}
	if m.FS.ns.held("u/") != nil {
		t.Fatal("a push listed u/: it waited on the store")
	}
	if err := m.FS.Store(obj("d/nope.bin"), 0, pushed); !errors.Is(err, ErrNoInode) {
		t.Fatalf("store into a name the listing lacks: %v, want ErrNoInode", err)
	}
}

// TestStoreReadsSmallDirectories: a push into a file the kernel does not
// know has it look up every file of the file's directory at once (a read
// of the directory through the mount: READDIRPLUS), where the directory is
// small enough; the next pushes into its files find them looked up. A
// directory of more than maxDirRead entries is not read: only the file
// pushed is looked up.
func TestStoreReadsSmallDirectories(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	objs := map[string][]byte{}
	for i := range 40 {
		objs[fmt.Sprintf("small/f%02d.bin", i)] = randBytes(r, 1000+i)
	}
	objs["small/sub/g.bin"] = randBytes(r, 10)
	for i := range maxDirRead + 1 {
		objs[fmt.Sprintf("large/f%05d", i)] = nil
	}
	m, opens, obj := pushMount(t, objs)
	for _, dir := range []string{"small/", "large/"} {
		if _, err := m.FS.ns.list(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.FS.ns.list(t.Context(), ""); err != nil {
		t.Fatal(err)
	}

	if err := m.FS.Store(obj("small/f07.bin"), 0, objs["small/f07.bin"]); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if key := fmt.Sprintf("small/f%02d.bin", i); m.FS.lookedUp(key) == nil {
			t.Fatalf("%s: no inode after a push into a file of its directory", key)
		}
	}
	if m.FS.inodeAt("small/sub/") == nil {
		t.Error("small/sub/: no inode after its directory was read")
	}
	pushed := randBytes(r, len(objs["small/f23.bin"]))
	if err := m.FS.Store(obj("small/f23.bin"), 0, pushed); err != nil {
		t.Fatal(err)
	}
	readsPushed(t, filepath.Join(m.Dir, "small", "f23.bin"), pushed, opens)

	if err := m.FS.Store(obj("large/f00001"), 0, nil); err != nil {
		t.Fatal(err)
	}
	if m.FS.lookedUp("large/f00001") == nil {
		t.Fatal("large/f00001: no inode after a push into it")
	}
	if m.FS.lookedUp("large/f00002") != nil {
		t.Errorf("large/f00002 has an inode: a directory of %d files was read for a push", maxDirRead+1)
	}
}
