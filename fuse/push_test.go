package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
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

// TestStoreReadsSmallDirectories: pushes into files the kernel does not
// know have it look up every file of their directory at once (a read of the
// directory through the mount: READDIRPLUS) once a thirty-second of the
// directory's files (two at least) were found unknown, where the directory
// is small enough; the next pushes into its files find them looked up. A
// directory of more than maxDirRead entries is not read: only the files
// pushed are looked up.
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
	for _, dir := range []string{"", "small/", "large/"} {
		if _, err := m.FS.ns.list(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
	}

	if err := m.FS.Store(obj("small/f07.bin"), 0, objs["small/f07.bin"]); err != nil {
		t.Fatal(err)
	}
	if m.FS.lookedUp("small/f08.bin") != nil {
		t.Fatal("small/f08.bin has an inode after one push into its directory: read for one file")
	}
	if err := m.FS.Store(obj("small/f11.bin"), 0, objs["small/f11.bin"]); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if key := fmt.Sprintf("small/f%02d.bin", i); m.FS.lookedUp(key) == nil {
			t.Fatalf("%s: no inode after two pushes into files of its directory", key)
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

	for i := range maxDirRead / 16 {
		key := fmt.Sprintf("large/f%05d", i)
		if err := m.FS.Store(obj(key), 0, nil); err != nil {
			t.Fatal(err)
		}
		if m.FS.lookedUp(key) == nil {
			t.Fatalf("%s: no inode after a push into it", key)
		}
	}
	if key := fmt.Sprintf("large/f%05d", maxDirRead/16); m.FS.lookedUp(key) != nil {
		t.Errorf("%s has an inode: a directory of %d files was read for a push", key, maxDirRead+1)
	}
}

// TestReadThroughMountWhen: a directory is read through the mount once a
// thirty-second of its files (two at least) were pushed unknown, at most
// once a metadata TTL, never while its listing is close to expiring (its
// lookups would wait on the store), and a read that failed does not count.
func TestReadThroughMountWhen(t *testing.T) {
	st := &growingStore{memStore: memStore{objs: map[string][]byte{"top": nil}}}
	const ttl = time.Hour
	m := mountCfg(t, Config{Store: st, MetadataTTL: ttl})
	var shift atomic.Int64 // the namespace's clock, ahead of the wall's
	m.FS.ns.now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	list := func(dir string) {
		t.Helper()
		if _, err := m.FS.ns.listAt(t.Context(), dir, m.FS.ns.now()); err != nil {
			t.Fatal(err)
		}
	}
	list("")
	for i := range 40 {
		st.put(fmt.Sprintf("d/f%02d", i), []byte{byte(i)})
	}
	list("d/") // the root's listing has no d yet: a read of d fails
	for i := range 2 {
		if m.FS.readThroughMount("d/") {
			t.Fatalf("call %d: read d/ through the mount while the root's listing lacks it", i+1)
		}
	}
	list("")
	waitFor(t, "the kernel to find d", func() bool { _, err := os.Stat(filepath.Join(m.Dir, "d")); return err == nil })
	for i, want := range []bool{true, false, false} {
		if got := m.FS.readThroughMount("d/"); got != want {
			t.Fatalf("call %d after the root listed d: read %v, want %v (a failed read is no read; then one read a TTL)", i+1, got, want)
		}
	}
	if m.FS.lookedUp("d/f39") == nil {
		t.Fatal("d/f39: no inode after its directory was read")
	}

	shift.Store(int64(ttl + time.Second)) // a TTL later, the listings made again
	list("")
	list("d/")
	for i, want := range []bool{false, true} {
		if got := m.FS.readThroughMount("d/"); got != want {
			t.Fatalf("call %d a TTL later: read %v, want %v", i+1, got, want)
		}
	}

	shift.Store(int64(2*ttl + 2*time.Second))
	list("")
	list("d/")
	shift.Add(int64(ttl - ttl/16)) // d/'s listing serves a sixteenth of a TTL more
	for i := range 3 {
		if m.FS.readThroughMount("d/") {
			t.Fatalf("call %d: read a directory whose listing expires in %v", i+1, ttl/16)
		}
	}
}

// TestReadThroughMountIsNoWalk: the mount's own reads of two sibling
// directories for pushes are no walker's: nothing is listed ahead.
func TestReadThroughMountIsNoWalk(t *testing.T) {
	st := newListCounter(20, 3, time.Millisecond)
	st.objs["ds/d01/sub/g"] = []byte("g")
	m := mountCfg(t, Config{Store: st, ListAhead: 4, MetadataTTL: time.Hour})
	for _, d := range []string{"", "ds/", "ds/d00/", "ds/d01/"} {
		if _, err := m.FS.ns.list(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := st.counts()
	for _, dir := range []string{"ds/d00/", "ds/d01/"} {
		read := m.FS.readThroughMount(dir)
		if !read {
			read = m.FS.readThroughMount(dir) // the second push into it
		}
		if !read {
			t.Fatalf("%s: not read by the second call", dir)
		}
	}
	w := m.FS.walk
	waitFor(t, "the walk-ahead workers to stop", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.running == 0 })
	after, _ := st.counts()
	for k, v := range after {
		if v != before[k] {
			t.Errorf("%s: listed %d times after the mount read two directories for pushes", k, v-before[k])
		}
	}
}

// growingStore is a memStore that objects can be added to while it serves.
type growingStore struct {
	mu sync.Mutex
	memStore
}

func (g *growingStore) put(key string, data []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.objs[key] = data
}

func (g *growingStore) Stat(ctx context.Context, key string) (store.Object, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.memStore.Stat(ctx, key)
}

func (g *growingStore) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.memStore.List(ctx, prefix, recursive, fn)
}

func (g *growingStore) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.memStore.ReadRange(ctx, obj, off, n)
}
