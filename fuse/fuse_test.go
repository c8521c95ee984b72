package fuse

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"golang.org/x/sys/unix"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/prefetch"
	"github.com/dataccel/dataccel/store"
	"github.com/dataccel/dataccel/store/s3"
)

var srv *testenv.Server

func TestMain(m *testing.M) {
	if p := os.Getenv(mappingWriterEnv); p != "" {
		os.Exit(writeThroughMapping(p, os.Getenv(mappingSyncEnv) != ""))
	}
	inProcessMounts()
	os.Exit(testenv.Run(m, &srv))
}

// mappingWriterEnv names a file that this test binary, started again as a
// child, writes through a shared mapping (writeThroughMapping), and
// mappingSyncEnv, when set, has it fsync the file too. Not in the mount's
// own process: a thread of it waiting in munmap for the write back of its
// own mount held a stop-the-world, and with it the WRITE's answer, for good
// (a CI run of TestSharedMappingWrite hung until the test timeout).
const (
	mappingWriterEnv = "DATACCEL_TEST_MAPPING_WRITE"
	mappingSyncEnv   = "DATACCEL_TEST_MAPPING_SYNC"
)

// writeThroughMapping opens p for writing, writes into a shared mapping of
// it, unmaps it, fsyncs it if asked, and prints what each step said, for
// TestSharedMappingWrite; its exit status is 0 unless a step before the
// write failed.
func writeThroughMapping(p string, sync bool) int {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("open:", err)
		if errors.Is(err, syscall.EROFS) {
			return 0
		}
		return 1
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, len(mappedFile), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fmt.Println("mmap:", err)
		return 1
	}
	copy(m, "CORRUPTED")
	fmt.Println("munmap:", syscall.Munmap(m))
	if sync {
		fmt.Println("fsync:", f.Sync())
	}
	return 0
}

// inProcessMounts leaves the runtime threads to serve a FUSE mount that
// this same process reads from. Go registers each opened file with its
// poller (epoll_ctl), which on a FUSE file waits for the server's answer
// while holding a P; with GOMAXPROCS at 2 (this machine's cores) two such
// opens can hold every P and leave none to answer them. A stop-the-world
// needs every P, however many there are: mountCfg also makes sure the
// kernel has stopped polling the mount (testenv.SettleFUSEPoll). dataccel
// itself never reads its own mount: only tests do.
func inProcessMounts() { runtime.GOMAXPROCS(max(16, runtime.NumCPU())) }

// mountT mounts st's prefix on a fresh directory and unmounts at cleanup.
func mountT(t *testing.T, st store.Store, prefix string, ttl time.Duration) string {
	t.Helper()
	return mountCfg(t, Config{Store: st, Prefix: prefix, MetadataTTL: ttl}).Dir
}

func mountCfg(t testing.TB, cfg Config) *Mount {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "no /dev/fuse on this machine: FUSE tests need it (and root)")
	}
	dir := t.TempDir()
	if cfg.Opener == nil {
		cfg.Opener = DirectOpener{Store: cfg.Store}
	}
	cfg.FsName = "test"
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	m, err := New(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
	})
	if err := testenv.SettleFUSEPoll(m.Dir); err != nil {
		t.Fatal(err)
	}
	return m
}

// putAll uploads objects with 32 in flight.
func putAll(t *testing.T, st *s3.Store, objs map[string][]byte) {
	t.Helper()
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(32)
	for k, v := range objs {
		g.Go(func() error {
			_, err := testenv.PutBytes(ctx, st, k, v)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestTree checks the mounted tree against the bucket: nested and implicit
// directories, marker objects, unsafe keys skipped, and every file's SHA-256
// read by 16 parallel readers.
func TestTree(t *testing.T) {
	st := srv.NewBucket(t)
	r := rand.New(rand.NewPCG(1, 2))
	objs := map[string][]byte{}
	want := map[string][]byte{} // path in mount -> content
	for d := range 24 {
		dir := fmt.Sprintf("data/class%02d/", d)
		if d%3 == 0 {
			dir += fmt.Sprintf("sub%d/", d) // nested, implicit parents
		}
		for i := range 90 {
			k := fmt.Sprintf("%simg%04d.jpg", dir, i)
			objs[k] = randBytes(r, 100+r.IntN(3000))
			want[strings.TrimPrefix(k, "data/")] = objs[k]
		}
	}
	// marker objects: one for an existing dir, one for an empty dir
	objs["data/class01/"] = nil
	objs["data/empty/"] = nil
	// Keys that cannot be paths are covered by TestUnsafeKeys: this
	// server's POSIX backend normalizes or refuses them.
	// outside the mounted prefix
	objs["other/file"] = []byte("not visible")
	putAll(t, st, objs)

	// Walked with the listing ahead on: each directory is still listed once.
	counting := store.NewCounting(st)
	mnt := mountCfg(t, Config{Store: counting, Prefix: "data/", MetadataTTL: time.Hour, ListAhead: 8}).Dir

	got := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mnt, p)
		if d.IsDir() {
			dirs = append(dirs, rel)
			return nil
		}
		got[rel] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("mount has %d files, want %d", len(got), len(want))
	}
	for p := range want {
		if !got[p] {
			t.Errorf("missing %s", p)
		}
	}
	for p := range got {
		if want[p] == nil {
			t.Errorf("unexpected file %s", p)
		}
	}
	if !contains(dirs, "empty") || !contains(dirs, "class00/sub0") {
		t.Errorf("directories %v lack the marker-only dir or a nested implicit dir", dirs)
	}
	if len(dirs) < 20 {
		t.Errorf("only %d directories", len(dirs))
	}
	if n := counting.C.Lists.Load(); n != int64(len(dirs)) {
		t.Errorf("%d LISTs for a walk of %d directories, want one each", n, len(dirs))
	}
	// stat: size of a file
	fi, err := os.Stat(filepath.Join(mnt, "class05/img0007.jpg"))
	if err != nil || fi.Size() != int64(len(want["class05/img0007.jpg"])) || fi.Mode().Perm() != 0o444 {
		t.Errorf("stat: %v %v", fi, err)
	}

	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	g := new(errgroup.Group)
	g.SetLimit(16)
	for _, p := range paths {
		g.Go(func() error {
			b, err := os.ReadFile(filepath.Join(mnt, p))
			if err != nil {
				return err
			}
			if sha256.Sum256(b) != sha256.Sum256(want[p]) {
				return fmt.Errorf("%s: content differs", p)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestPread reads a 64 MiB object at random offsets and lengths, including
// ranges that cross the end.
func TestPread(t *testing.T) {
	st := srv.NewBucket(t)
	r := rand.New(rand.NewPCG(3, 4))
	data := randBytes(r, 64<<20)
	testenv.Put(t, st, "big.bin", data)
	mnt := mountT(t, st, "", time.Hour)
	f, err := os.Open(filepath.Join(mnt, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 200 {
		off := r.Int64N(int64(len(data)))
		n := 1 + r.IntN(3<<20)
		if i%10 == 0 {
			off = int64(len(data)) - int64(r.IntN(5000)) // across the end
		}
		buf := make([]byte, n)
		got, err := f.ReadAt(buf, off)
		end := min(off+int64(n), int64(len(data)))
		if want := int(end - off); got != want {
			t.Fatalf("ReadAt(%d, %d) = %d bytes, want %d (err %v)", off, n, got, want, err)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:got], data[off:end]) {
			t.Fatalf("ReadAt(%d, %d): wrong bytes", off, n)
		}
	}
}

// sizeRecorder is an Opener that records the largest read the kernel sent.
type sizeRecorder struct {
	DirectOpener
	max atomic.Int64
}

func (o *sizeRecorder) Open(obj store.Object) Reader {
	return recordingReader{o.DirectOpener.Open(obj), &o.max}
}

type recordingReader struct {
	Reader
	max *atomic.Int64
}

func (r recordingReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	for n := int64(len(p)); ; {
		if cur := r.max.Load(); n <= cur || r.max.CompareAndSwap(cur, n) {
			break
		}
	}
	return r.Reader.ReadAt(ctx, p, off)
}

// A file read in sequence reaches the mount in READs larger than the
// kernel's default read-ahead for a FUSE mount (128 KiB): the mount raises
// its read-ahead to max_readahead (1 MiB).
func TestSequentialReadsAreLarge(t *testing.T) {
	st := srv.NewBucket(t)
	data := randBytes(rand.New(rand.NewPCG(5, 6)), 8<<20)
	testenv.Put(t, st, "seq.bin", data)
	rec := &sizeRecorder{DirectOpener: DirectOpener{Store: st}}
	m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Opener: rec})
	if _, err := os.Stat("/sys/class/bdi"); err != nil {
		testenv.Missing(t, "no sysfs here: %v", err)
	}
	raFile, err := readAheadFile(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := os.ReadFile(raFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(ra)); got != strconv.Itoa(maxReadAhead>>10) {
		t.Fatalf("read_ahead_kb %s, want %d", got, maxReadAhead>>10)
	}
	f, err := os.Open(filepath.Join(m.Dir, "seq.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(bufio.NewReaderSize(f, 64<<10)) // small reads, in sequence
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), want the object's %d", len(got), err, len(data))
	}
	if n := rec.max.Load(); n <= 128<<10 {
		t.Fatalf("largest READ %d bytes: the kernel read ahead no more than its default", n)
	}
}

// TestLargeDirectory lists a directory of 10,000 entries.
func TestLargeDirectory(t *testing.T) {
	st := srv.NewBucket(t)
	objs := map[string][]byte{}
	for i := range 10000 {
		objs[fmt.Sprintf("big/f%05d", i)] = []byte{byte(i % 256)}
	}
	putAll(t, st, objs)
	mnt := mountT(t, st, "", time.Hour)
	ents, err := os.ReadDir(filepath.Join(mnt, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 10000 {
		t.Fatalf("%d entries, want 10000", len(ents))
	}
	for i, e := range ents {
		if want := fmt.Sprintf("f%05d", i); e.Name() != want || e.IsDir() {
			t.Fatalf("entry %d = %s, want file %s", i, e.Name(), want)
		}
	}
	b, err := os.ReadFile(filepath.Join(mnt, "big", "f09999"))
	if err != nil || !bytes.Equal(b, []byte{byte(9999 % 256)}) {
		t.Fatalf("read last entry: %v %v", b, err)
	}
}

// TestErrnos checks the error codes of a read-only mount.
func TestErrnos(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "d/file", []byte("hello"))
	mnt := mountT(t, st, "", time.Hour)
	p := func(s string) string { return filepath.Join(mnt, s) }
	// A read first: from then on the kernel sends no OPEN.
	if _, err := os.ReadFile(p("d/file")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		op   func() error
		want syscall.Errno
	}{
		{"stat missing", func() error { _, err := os.Stat(p("nope")); return err }, syscall.ENOENT},
		{"open missing", func() error { _, err := os.Open(p("d/nope")); return err }, syscall.ENOENT},
		{"write existing", func() error { return openWrite(p("d/file"), os.O_WRONLY) }, syscall.EROFS},
		{"append", func() error { return openWrite(p("d/file"), os.O_WRONLY|os.O_APPEND) }, syscall.EROFS},
		{"truncate", func() error { return os.Truncate(p("d/file"), 0) }, syscall.EROFS},
		{"create", func() error { return openWrite(p("d/new"), os.O_CREATE|os.O_WRONLY) }, syscall.EROFS},
		{"truncating open", func() error { return openWrite(p("d/file"), os.O_WRONLY|os.O_TRUNC) }, syscall.EROFS},
		{"mkdir", func() error { return os.Mkdir(p("d/sub"), 0o755) }, syscall.EROFS},
		{"unlink", func() error { return os.Remove(p("d/file")) }, syscall.EROFS},
		{"rmdir", func() error { return syscall.Rmdir(p("d")) }, syscall.EROFS},
		{"rename", func() error { return os.Rename(p("d/file"), p("d/file2")) }, syscall.EROFS},
		{"chmod", func() error { return os.Chmod(p("d/file"), 0o777) }, syscall.EROFS},
		{"file as dir", func() error { _, err := os.Stat(p("d/file/x")); return err }, syscall.ENOTDIR},
		{"read a dir", func() error { _, err := os.ReadFile(p("d")); return err }, syscall.EISDIR},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(p("d/file")); err != nil || string(b) != "hello" {
		t.Fatalf("file changed or unreadable after the failed writes: %q %v", b, err)
	}
	var fi unix.Stat_t
	if err := unix.Stat(p("d/file"), &fi); err != nil || fi.Atim != fi.Mtim || fi.Atim.Sec == 0 {
		t.Fatalf("atime %v, mtime %v (%v): want the object's time for both", fi.Atim, fi.Mtim, err)
	}
	// The root is inode 1, not 0 (which some tools take for no inode),
	// and so is a directory's "..".
	for _, path := range []string{mnt, p("d/..")} {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil || st.Ino != 1 {
			t.Errorf("stat %s: inode %d (%v), want 1", path, st.Ino, err)
		}
	}
	// ls -a shows "." and "..", with the inode numbers stat gives them.
	for _, dir := range []string{mnt, p("d")} {
		out, err := exec.Command("ls", "-ai1", dir).Output()
		if err != nil {
			t.Fatal(err)
		}
		inos := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if ino, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				inos[name] = ino
			}
		}
		for _, name := range []string{".", ".."} {
			var st unix.Stat_t
			if err := unix.Stat(dir+"/"+name, &st); err != nil {
				t.Fatal(err)
			}
			if inos[name] != strconv.FormatUint(st.Ino, 10) {
				t.Errorf("ls -ai %s: %q is inode %q, stat says %d\n%s", dir, name, inos[name], st.Ino, out)
			}
		}
	}
	// fsync and fdatasync of what was only read succeed, as on any file
	// system (tools that sync the files they read failed on EOPNOTSUPP).
	for _, path := range []string{p("d/file"), p("d"), mnt} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Errorf("fsync of %s opened read-only: %v", path, err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			t.Errorf("fdatasync of %s opened read-only: %v", path, err)
		}
		f.Close()
	}
	// Once reads have taught the kernel that opens need no message, a
	// writer is refused all the same.
	if err := openWrite(p("d/file"), os.O_WRONLY); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write after reads: %v, want EROFS", err)
	}
}

// mappedFile is the object TestSharedMappingWrite writes into through a
// mapping.
var mappedFile = bytes.Repeat([]byte("0123456789abcdef"), 1024)

// TestSharedMappingWrite: once opens need no message, root can open a file
// for writing and write to it through a shared mapping. The kernel refuses
// nothing there: the bytes go into the page cache every reader of the file
// shares, and the mount hears of them only when they are written back
// (at msync or fsync, at close, or within about 30 s). Refused then, the
// pages must be dropped, so that readers get the object's bytes again and
// not, for the mount's life, bytes nobody stored.
func TestSharedMappingWrite(t *testing.T) {
	st := srv.NewBucket(t)
	orig := mappedFile
	for _, name := range []string{"fsync", "close"} {
		testenv.Put(t, st, "d/"+name, orig)
	}
	mnt := mountT(t, st, "", time.Hour)
	for _, tc := range []struct {
		name string
		sync bool // the writer syncs; else it only unmaps and closes
	}{{"fsync", true}, {"close", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(mnt, "d", tc.name)
			if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, orig) {
				t.Fatalf("first read: %d bytes, %v", len(b), err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			writer := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			writer.Env = append(os.Environ(), mappingWriterEnv+"="+p)
			if tc.sync {
				writer.Env = append(writer.Env, mappingSyncEnv+"=1")
			}
			out, err := writer.CombinedOutput()
			t.Logf("the writer said: %s", out)
			switch {
			case err != nil:
				t.Fatalf("the writer: %v\n%s", err, out)
			case strings.Contains(string(out), "open: "):
				return // refused at open: nothing reaches the page cache
			case tc.sync && !strings.Contains(string(out), "fsync: ") || strings.Contains(string(out), "fsync: <nil>"):
				t.Errorf("fsync of a write to a read-only file did not fail:\n%s", out)
			}
			// The pages are dropped after the refusal's answer, not in it
			// (the kernel waits for that answer to end the writeback).
			var got []byte
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if got, err = os.ReadFile(p); err != nil {
					t.Fatal(err)
				}
				if bytes.Equal(got, orig) {
					return
				}
			}
			t.Fatalf("10 s after the refused write back, a read returns %q...: bytes nobody stored", got[:12])
		})
	}
}

// openWrite opens p for writing and writes: opens cost no round trip to
// the filesystem once the kernel knows it (FUSE_NO_OPEN_SUPPORT), so the
// refusal may come at open or at the first write.
func openWrite(p string, flag int) error {
	f, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write([]byte("x"))
	return err
}

// TestOverwrite replaces an object while a handle has it open: the handle
// never returns a mix of versions, and after the TTL a new open sees the new
// version whole.
func TestOverwrite(t *testing.T) {
	st := srv.NewBucket(t)
	r := rand.New(rand.NewPCG(5, 6))
	v1 := bytes.Repeat([]byte{1}, 8<<20)
	v2 := randBytes(r, 6<<20)
	testenv.Put(t, st, "obj", v1)
	const ttl = 2 * time.Second
	mnt := mountT(t, st, "", ttl)
	f, err := os.Open(filepath.Join(mnt, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 1<<20)
	if _, err := f.ReadAt(head, 0); err != nil || !bytes.Equal(head, v1[:1<<20]) {
		t.Fatalf("first read: %v", err)
	}
	testenv.Put(t, st, "obj", v2)
	// The rest of the open handle: either v1 bytes or an error, never v2.
	rest := make([]byte, 4<<20)
	n, err := f.ReadAt(rest, 4<<20)
	if err == nil {
		if !bytes.Equal(rest[:n], v1[4<<20:4<<20+n]) {
			t.Fatal("open handle returned bytes of the new version")
		}
		t.Log("read served from data fetched before the overwrite")
	} else if !errors.Is(err, syscall.ESTALE) && !errors.Is(err, syscall.EIO) {
		t.Fatalf("read after overwrite: %v, want ESTALE or EIO", err)
	}
	f.Close()

	time.Sleep(ttl + 500*time.Millisecond)
	got, err := os.ReadFile(filepath.Join(mnt, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, v2) {
		t.Fatalf("after the TTL: got %d bytes, want the new version (%d bytes)", len(got), len(v2))
	}
}

// TestChangedObjectHeals: a read that finds its object changed or deleted
// since it was listed fails (ESTALE: that version is gone), and the next
// open gets the object as it is now, well before the metadata TTL (an
// hour here); it failed ESTALE until the TTL passed.
func TestChangedObjectHeals(t *testing.T) {
	st := srv.NewBucket(t)
	v1, v2 := []byte("version one"), []byte("the second version")
	testenv.Put(t, st, "d/changed", v1)
	testenv.Put(t, st, "d/deleted", v1)
	testenv.Put(t, st, "d/later", v1)
	mnt := mountT(t, st, "", time.Hour)
	p := func(name string) string { return filepath.Join(mnt, "d", name) }
	for _, name := range []string{"changed", "deleted", "later"} {
		if _, err := os.Stat(p(name)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Put(t, st, "d/changed", v2)
	if err := st.Remove(context.Background(), "d/deleted"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(p("changed")); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("read of changed after the change: %v, want ESTALE", err)
	}
	// The heal that read started may have listed d/ again already, and
	// dropped the deleted name: ENOENT then.
	if _, err := os.ReadFile(p("deleted")); !errors.Is(err, syscall.ESTALE) && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read of deleted after the change: %v, want ESTALE or ENOENT", err)
	}
	waitFor(t, "the new version", func() bool {
		b, err := os.ReadFile(p("changed"))
		return err == nil && bytes.Equal(b, v2)
	})
	waitFor(t, "the deleted object gone", func() bool {
		_, err := os.Stat(p("deleted"))
		return errors.Is(err, os.ErrNotExist)
	})
	// A change right after a heal of the same directory heals as well,
	// at once (a rate limit per directory left it ESTALE for seconds).
	if err := st.Remove(context.Background(), "d/later"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := os.ReadFile(p("later"))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if !errors.Is(err, syscall.ESTALE) {
			t.Fatalf("read of a deleted object: %v, want ESTALE then ENOENT", err)
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("still ESTALE %s after the deletion", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heldLists holds every LIST while held is set, as a large directory's
// listing takes long.
type heldLists struct {
	store.Store
	held atomic.Pointer[chan struct{}]
}

func (h *heldLists) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	if c := h.held.Load(); c != nil {
		select {
		case <-*c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Store.List(ctx, prefix, recursive, fn)
}

// TestReopenAfterStaleWithoutRelisting: once a read found its object
// changed or deleted, the next open gets the object as it is now (asked of
// the store) at once, while the relisting of its directory is still under
// way; it failed ESTALE, again and again, for as long as that LIST took.
func TestReopenAfterStaleWithoutRelisting(t *testing.T) {
	bucket := srv.NewBucket(t)
	st := &heldLists{Store: bucket}
	v1, v2 := []byte("version one"), []byte("the second version")
	testenv.Put(t, bucket, "d/changed", v1)
	testenv.Put(t, bucket, "d/deleted", v1)
	mnt := mountT(t, st, "", time.Hour)
	p := func(name string) string { return filepath.Join(mnt, "d", name) }
	for _, name := range []string{"changed", "deleted"} {
		if _, err := os.Stat(p(name)); err != nil {
			t.Fatal(err)
		}
	}
	hold := make(chan struct{})
	st.held.Store(&hold)
	t.Cleanup(func() { close(hold) })
	testenv.Put(t, bucket, "d/changed", v2)
	if err := bucket.Remove(context.Background(), "d/deleted"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"changed", "deleted"} {
		if _, err := os.ReadFile(p(name)); !errors.Is(err, syscall.ESTALE) {
			t.Fatalf("read of %s after the change: %v, want ESTALE", name, err)
		}
	}
	// The heal drops the kernel's entries in the background.
	waitFor(t, "the new version while d/ is being listed again", func() bool {
		b, err := os.ReadFile(p("changed"))
		if err != nil && !errors.Is(err, syscall.ESTALE) {
			t.Fatalf("read of changed: %v, want the new version (or ESTALE for a moment)", err)
		}
		return err == nil && bytes.Equal(b, v2)
	})
	waitFor(t, "the deleted object gone while d/ is being listed again", func() bool {
		_, err := os.ReadFile(p("deleted"))
		return errors.Is(err, os.ErrNotExist)
	})
	// A listing agrees with the lookups: the deleted name is not listed
	// (ls -l showed it as "?"), and the changed one has its new size.
	ents, err := os.ReadDir(filepath.Join(mnt, "d"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		fi, err := e.Info()
		if err != nil {
			t.Errorf("stat of listed %s: %v", e.Name(), err)
		} else if e.Name() == "changed" && fi.Size() != int64(len(v2)) {
			t.Errorf("listed changed has %d bytes, want the new version's %d", fi.Size(), len(v2))
		}
	}
	if !slices.Equal(names, []string{"changed"}) {
		t.Errorf("d/ lists %q while it is being listed again, want only [changed]", names)
	}
}

// An object overwritten twice while its directory is being listed again
// gets the store's latest word: its third version, not the second, after
// the second read found the second version gone too. Each version found
// stale is logged once, though a failed read(2) sends the kernel's READ
// twice.
func TestOverwrittenTwiceDuringRelisting(t *testing.T) {
	bucket := srv.NewBucket(t)
	st := &heldLists{Store: bucket}
	v1, v2, v3 := []byte("version one"), []byte("the second version"), []byte("v3")
	testenv.Put(t, bucket, "d/f", v1)
	var logs testenv.SyncBuffer
	m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p := filepath.Join(m.Dir, "d", "f")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	st.held.Store(&hold)
	size := func() int64 {
		fi, err := os.Stat(p)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	testenv.Put(t, bucket, "d/f", v2)
	if _, err := os.ReadFile(p); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("read after the first overwrite: %v, want ESTALE", err)
	}
	waitFor(t, "the second version's size", func() bool { return size() == int64(len(v2)) })
	// Its bytes were never read: the next read asks the store for them.
	testenv.Put(t, bucket, "d/f", v3)
	if _, err := os.ReadFile(p); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("read of the second version after the second overwrite: %v, want ESTALE", err)
	}
	waitFor(t, "the third version while d/ is being listed again", func() bool {
		b, err := os.ReadFile(p)
		return err == nil && bytes.Equal(b, v3)
	})
	// The relisting lands; the heal logs the second version's round, and
	// forgets the store's answers, which a readdir would look at for good.
	close(hold)
	const line = "objects changed or deleted since they were listed"
	waitFor(t, "the heal's second line", func() bool { return strings.Count(logs.String(), line) >= 2 })
	waitFor(t, "the answers forgotten once the listing caught up", func() bool {
		m.FS.healMu.Lock()
		defer m.FS.healMu.Unlock()
		return len(m.FS.answers) == 0
	})
	time.Sleep(200 * time.Millisecond) // any line more
	out := logs.String()
	if n := strings.Count(out, line); n != 2 || strings.Count(out, "files=1 ") != 2 || strings.Contains(out, "d/f, d/f") {
		t.Errorf("%d lines about changed objects, want 2, one for each stale version of d/f, each naming it once:\n%s", n, out)
	}
}

// current hands out the store's answer about a key only for a version that
// went stale before the store was asked: an answer from an earlier change
// of the key (deleted, put back, listed, then overwritten) is not the
// store's word on the later one, and made a file that exists read as
// deleted until the new answer came.
func TestCurrentIgnoresAnOlderAnswer(t *testing.T) {
	listed := store.Object{Key: "d/f", Size: 3, ETag: "e"}
	f := newFS(Config{Store: memStore{objs: map[string][]byte{"d/f": []byte("abc")}}, MetadataTTL: time.Hour})
	t.Cleanup(f.stop)
	if _, err := f.ns.list(context.Background(), "d/"); err != nil {
		t.Fatal(err)
	}
	at := f.ns.held("d/").at
	for _, c := range []struct {
		name     string
		answerAt time.Time
		want     error
	}{
		{"an answer after the version went stale", at.Add(2 * time.Second), store.ErrNotExist},
		{"an answer from before", at.Add(-time.Second), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.healMu.Lock()
			f.staleSince[fileIno(listed)] = at.Add(time.Second)
			f.answers[listed.Key] = storeAnswer{gone: true, at: c.answerAt}
			f.healMu.Unlock()
			got, err := f.current("d/", listed)
			if c.want == nil && (err != nil || got != listed) || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("current = %+v, %v; want the listed version (nil) or %v: %v", got, err, c.want, c.want)
			}
		})
	}
}

// answeredIn finds the answered files of a listing whichever side it walks
// (the answers when fewer, else the entries), and only those in that
// directory: not a subdirectory, nor a file of another directory.
func TestAnsweredIn(t *testing.T) {
	objs := map[string][]byte{"d/a": nil, "d/b": nil, "d/c": nil, "d/sub/a": nil, "e/a": nil}
	f := newFS(Config{Store: memStore{objs: objs}, MetadataTTL: time.Hour})
	t.Cleanup(f.stop)
	l, err := f.ns.list(context.Background(), "d/")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		answers []string
		want    []string
	}{
		{"none", nil, nil},
		{"fewer answers than entries", []string{"d/b"}, []string{"b"}},
		{"more answers than entries", []string{"d/a", "d/c", "d/sub/a", "e/a", "d/gone", "f/x"}, []string{"a", "c"}},
		{"only other directories", []string{"d/sub/a", "e/a", "x/a", "y/a", "z/a"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.healMu.Lock()
			clear(f.answers)
			for _, k := range c.answers {
				f.answers[k] = storeAnswer{gone: true}
			}
			f.healMu.Unlock()
			got := slices.Sorted(maps.Keys(f.answeredIn("d/", l)))
			if !slices.Equal(got, c.want) {
				t.Errorf("answeredIn = %q, want %q", got, c.want)
			}
		})
	}
}

// forgetAnswers keeps a store's answer only while current could hand it
// out: for a listed version that went stale after the listing was made
// and before the store was asked. An answer that came after a relisting
// made since the version went stale was kept for the mount's life, and
// every readdir of the directory looked at it.
func TestForgetAnswers(t *testing.T) {
	f := newFS(Config{Store: memStore{objs: map[string][]byte{"d/f": []byte("abc")}}, MetadataTTL: time.Hour})
	t.Cleanup(f.stop)
	if _, err := f.ns.list(context.Background(), "d/"); err != nil {
		t.Fatal(err)
	}
	l := f.ns.held("d/")
	e, _ := lookUp(l, "f")
	listed := e.obj
	other := store.Object{Key: "d/f", Size: 5, ETag: "later"}
	for _, c := range []struct {
		name     string
		since    time.Duration // when the listed version went stale, from the listing
		answerAt time.Duration
		answer   store.Object
		kept     bool
	}{
		{"stale after the listing, asked since", time.Second, 2 * time.Second, other, true},
		{"stale before the listing (a relisting made since)", -2 * time.Second, time.Second, other, false},
		{"asked before it went stale", time.Second, 500 * time.Millisecond, other, false},
		{"the listing says the same", time.Second, 2 * time.Second, listed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.healMu.Lock()
			clear(f.answers)
			f.staleSince[fileIno(listed)] = l.at.Add(c.since)
			f.answers["d/f"] = storeAnswer{obj: c.answer, at: l.at.Add(c.answerAt)}
			f.healMu.Unlock()
			f.forgetAnswers("d/", map[*fileNode]bool{f.newFileNode(listed): true})
			f.healMu.Lock()
			_, kept := f.answers["d/f"]
			f.healMu.Unlock()
			if kept != c.kept {
				t.Errorf("answer kept: %v, want %v", kept, c.kept)
			}
		})
	}
}

// countedHeads counts the HEADs (Stat) a mount sends.
type countedHeads struct {
	*heldLists
	heads atomic.Int64
}

func (c *countedHeads) Stat(ctx context.Context, key string) (store.Object, error) {
	c.heads.Add(1)
	return c.heldLists.Stat(ctx, key)
}

// The store is asked about each stale file once, in the background: a
// readdir, which looks up every name it lists, sends no HEAD of its own
// (it sent one per stale name, one after another, on every readdir until
// the relisting landed, long with thousands of stale files), and gets
// the new versions.
func TestStaleFilesAskedOnce(t *testing.T) {
	bucket := srv.NewBucket(t)
	st := &countedHeads{heldLists: &heldLists{Store: bucket}}
	const n = 20
	name := func(i int) string { return fmt.Sprintf("f%02d", i) }
	for i := range n {
		testenv.Put(t, bucket, "d/"+name(i), []byte("v1"))
	}
	mnt := mountT(t, st, "", time.Hour)
	d := filepath.Join(mnt, "d")
	for i := range n {
		if _, err := os.Stat(filepath.Join(d, name(i))); err != nil {
			t.Fatal(err)
		}
	}
	hold := make(chan struct{})
	st.held.Store(&hold)
	t.Cleanup(func() { close(hold) })
	v2 := []byte("version two")
	for i := range n {
		testenv.Put(t, bucket, "d/"+name(i), v2)
	}
	for i := range n {
		if _, err := os.ReadFile(filepath.Join(d, name(i))); !errors.Is(err, syscall.ESTALE) {
			t.Fatalf("read of %s after the change: %v, want ESTALE", name(i), err)
		}
	}
	// The store's answers land, then the kernel's entries go.
	waitFor(t, "every stale file's new version", func() bool {
		for i := range n {
			if fi, err := os.Lstat(filepath.Join(d, name(i))); err != nil || fi.Size() != int64(len(v2)) {
				return false
			}
		}
		return true
	})
	for range 2 {
		ents, err := os.ReadDir(d)
		if err != nil || len(ents) != n {
			t.Fatalf("readdir: %d entries, %v", len(ents), err)
		}
		for _, e := range ents {
			if fi, err := os.Lstat(filepath.Join(d, e.Name())); err != nil || fi.Size() != int64(len(v2)) {
				t.Fatalf("lstat %s after the store was asked: %v, size %v, want the new version's %d bytes", e.Name(), err, fi, len(v2))
			}
		}
	}
	if h := st.heads.Load(); h != n {
		t.Errorf("%d HEADs for %d stale files and two readdirs, want %d", h, n, n)
	}
}

// TestRelistDropsKernelEntries: a file whose bytes the kernel holds (read
// once, then re-read from its page cache with no request) and whose object
// is deleted stops opening once a relisting drops the name, though a
// readdir renewed the kernel's entry meanwhile (a job's ls); it stayed
// openable, with its old bytes, for a whole ttl after that relisting. The
// name added meanwhile shows too (the readdir would show it either way:
// TestChangedNames covers the added names the relisting drops).
func TestRelistDropsKernelEntries(t *testing.T) {
	const ttl = 4 * time.Second
	st := srv.NewBucket(t)
	testenv.Put(t, st, "d/gone", []byte("old bytes"))
	testenv.Put(t, st, "d/stays", []byte("x"))
	mnt := mountT(t, st, "", ttl)
	d := filepath.Join(mnt, "d")
	listed := time.Now()
	if _, err := os.ReadFile(filepath.Join(d, "gone")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of a name not yet in the store: %v", err)
	}
	if err := st.Remove(context.Background(), "d/gone"); err != nil {
		t.Fatal(err)
	}
	testenv.Put(t, st, "d/new", []byte("new"))
	// The listing is relisted in the last quarter of its ttl (ticks of a
	// second): its changes must show by then, not a ttl later.
	for deadline := listed.Add(ttl*5/4 + time.Second); ; time.Sleep(100 * time.Millisecond) {
		os.ReadDir(d) // renews the kernel's entries of the names listed
		_, errGone := os.ReadFile(filepath.Join(d, "gone"))
		_, errNew := os.Stat(filepath.Join(d, "new"))
		if errGone != nil && errNew == nil {
			if !errors.Is(errGone, os.ErrNotExist) && !errors.Is(errGone, syscall.ESTALE) {
				t.Fatalf("open of the deleted object: %v, want ENOENT or ESTALE", errGone)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the listing (ttl %s): deleted object read: %v, new object stat: %v",
				time.Since(listed).Round(time.Millisecond), ttl, errGone, errNew)
		}
	}
}

// disagreeingStore lists its objects as memStore does, and fails every GET
// as if the object had changed since: a store whose GETs and LISTs
// disagree on versions.
type disagreeingStore struct{ memStore }

func (disagreeingStore) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	return nil, store.ErrChanged
}

// TestHealBounded: when a relisting shows the same version the GET refused,
// reads go on failing ESTALE, and the directory is not listed again for
// each of them (a million-file directory would be listed back to back).
func TestHealBounded(t *testing.T) {
	st := store.NewCounting(disagreeingStore{memStore{objs: map[string][]byte{"d/a": []byte("x")}}})
	var logs testenv.SyncBuffer
	m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p := filepath.Join(m.Dir, "d", "a")
	for range 50 {
		if _, err := os.ReadFile(p); !errors.Is(err, syscall.ESTALE) {
			t.Fatalf("read: %v, want ESTALE", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The root and d/ to look it up, d/ once more to heal; no more.
	if n := st.C.Lists.Load(); n != 3 {
		t.Fatalf("%d LISTs for 50 failing reads, want 3", n)
	}
	// Once the LIST after the failure shows the version again, the user
	// is told that the store disagrees with itself, once, and no longer
	// that new opens get the object as it is now.
	time.Sleep(100 * time.Millisecond) // the last heal's log lines
	out := logs.String()
	if n := strings.Count(out, "disagrees with its LIST"); n != 1 {
		t.Errorf("%d warnings that the store disagrees, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "new opens get them as they are now"); n != 1 {
		t.Errorf("%d lines saying new opens get the new version, want 1 (the first failure):\n%s", n, out)
	}
	if !strings.Contains(out, "keys=d/a") {
		t.Errorf("the line about changed objects does not name them:\n%s", out)
	}
}

// slowListing is disagreeingStore whose LISTs, once armed, take a while
// and count how many run at once.
type slowListing struct {
	disagreeingStore
	armed        atomic.Bool
	running, top atomic.Int64
}

func (s *slowListing) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	if s.armed.Load() {
		n := s.running.Add(1)
		defer s.running.Add(-1)
		for top := s.top.Load(); n > top && !s.top.CompareAndSwap(top, n); top = s.top.Load() {
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s.memStore.List(ctx, prefix, recursive, fn)
}

// TestHealListsBounded: when the files of many directories go stale at
// once (a dataset uploaded again), their directories are listed again a
// few at a time, not all together.
func TestHealListsBounded(t *testing.T) {
	const dirs = 12
	objs := map[string][]byte{}
	for i := range dirs {
		objs[fmt.Sprintf("d%02d/f", i)] = []byte("x")
	}
	slow := &slowListing{disagreeingStore: disagreeingStore{memStore{objs: objs}}}
	st := store.NewCounting(slow)
	m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, ListAhead: -1})
	for i := range dirs { // listed: the first LISTs are not counted
		if _, err := os.Stat(filepath.Join(m.Dir, fmt.Sprintf("d%02d/f", i))); err != nil {
			t.Fatal(err)
		}
	}
	listed := st.C.Lists.Load()
	slow.armed.Store(true)
	var wg sync.WaitGroup
	for i := range dirs {
		wg.Go(func() {
			if _, err := os.ReadFile(filepath.Join(m.Dir, fmt.Sprintf("d%02d/f", i))); !errors.Is(err, syscall.ESTALE) {
				t.Errorf("read: %v, want ESTALE", err)
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(20 * time.Second); st.C.Lists.Load() < listed+dirs; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d directories listed again after their files went stale, want %d", st.C.Lists.Load()-listed, dirs)
		}
	}
	if top := slow.top.Load(); top > healParallel {
		t.Fatalf("%d LISTs at once to heal, want at most %d", top, healParallel)
	}
}

// TestConcurrentOpens opens one file from many goroutines while its
// directory listing expires: a race detector check of the metadata path.
func TestConcurrentOpens(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "a/b", []byte("content"))
	mnt := mountT(t, st, "", 50*time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 30 {
				b, err := os.ReadFile(filepath.Join(mnt, "a/b"))
				if err != nil || string(b) != "content" {
					errs <- fmt.Errorf("%q %v", b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// memStore is an in-memory store.Store for keys the real test server
// cannot hold (its POSIX backend normalizes "a//b" and refuses NUL).
type memStore struct{ objs map[string][]byte }

func (m memStore) Stat(ctx context.Context, key string) (store.Object, error) {
	b, ok := m.objs[key]
	if !ok {
		return store.Object{}, store.ErrNotExist
	}
	return store.Object{Key: key, Size: int64(len(b)), ETag: "e"}, nil
}

func (m memStore) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	keys := make([]string, 0, len(m.objs))
	for k := range m.objs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if i := strings.IndexByte(k[len(prefix):], '/'); !recursive && i >= 0 {
			p := k[:len(prefix)+i+1]
			if !seen[p] {
				seen[p] = true
				if err := fn(store.Object{Key: p, IsPrefix: true}); err != nil {
					return err
				}
			}
			continue
		}
		if err := fn(store.Object{Key: k, Size: int64(len(m.objs[k])), ETag: "e"}); err != nil {
			return err
		}
	}
	return nil
}

func (m memStore) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	b := m.objs[obj.Key]
	end := int64(len(b))
	if n >= 0 {
		end = min(end, off+n)
	}
	return io.NopCloser(bytes.NewReader(b[off:end])), nil
}

// TestUnsafeKeys mounts keys that cannot be file names: they are skipped
// (with a warning), their safe siblings stay, and nothing escapes the mount.
func TestUnsafeKeys(t *testing.T) {
	st := memStore{objs: map[string][]byte{
		"ok/a.jpg":                       []byte("a"),
		"ok//double.jpg":                 []byte("x"),
		"ok/./dot.jpg":                   []byte("x"),
		"ok/../escape.jpg":               []byte("x"),
		"../outside.jpg":                 []byte("x"),
		"ok/nul\x00.jpg":                 []byte("x"),
		"ok/" + strings.Repeat("n", 256): []byte("x"),
		"ok/" + strings.Repeat("m", 255): []byte("long but valid"),
		"both":                           []byte("file shadowed by the dir"),
		"both/inner":                     []byte("inner"),
		"marker/":                        []byte("a marker's own bytes"),
		"marker/in.jpg":                  []byte("in"),
	}}
	var logs testenv.SyncBuffer
	mnt := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))}).Dir
	var got []string
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mnt, p)
		if !d.IsDir() {
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"both/inner", "marker/in.jpg", "ok/a.jpg", "ok/" + strings.Repeat("m", 255)}
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("files %q, want %q", got, want)
	}
	// One warning for each key skipped: the six that cannot be paths, the
	// file a directory shadows, the marker's bytes.
	if n := strings.Count(logs.String(), "level=WARN"); n != 8 {
		t.Errorf("%d warnings, want 8:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "a directory marker object with content") {
		t.Errorf("no warning for the marker's bytes:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(mnt), "outside.jpg")); err == nil {
		t.Fatal("a key escaped the mount")
	}
}

// TestControlDirShadows: objects under a root ".dataccel" are hidden by
// the control directory, and the mount says so, once, naming them; with no
// control directory they are served.
func TestControlDirShadows(t *testing.T) {
	objs := map[string][]byte{"p/.dataccel/mine.txt": []byte("mine"), "p/a": []byte("a")}
	for _, control := range []bool{true, false} {
		var logs testenv.SyncBuffer
		cfg := Config{Store: memStore{objs: objs}, Prefix: "p/", MetadataTTL: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		if control {
			cfg.Control = nopControl{}
		}
		m := mountCfg(t, cfg)
		for range 3 {
			if _, err := os.ReadDir(m.Dir); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(filepath.Join(m.Dir, ".dataccel", "mine.txt"))
		warned := strings.Count(logs.String(), "the objects under it are hidden")
		if control && (err == nil || warned != 1) || !control && (string(b) != "mine" || warned != 0) {
			t.Errorf("control dir %v: read %q, %v; %d warnings\n%s", control, b, err, warned, logs.String())
		}
		if control && !strings.Contains(logs.String(), `p/.dataccel/`) {
			t.Errorf("the warning does not name the hidden prefix:\n%s", logs.String())
		}
	}
}

// bodyEndsEarly serves ranged reads past offset 0 with a body that ends at
// once: a store (or a proxy) that breaks its side of a range.
type bodyEndsEarly struct{ memStore }

func (s bodyEndsEarly) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	if off > 0 {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	return s.memStore.ReadRange(ctx, obj, off, n)
}

// TestReadEndsEarly: an end of file the loader reports before the size
// the kernel was told is an error (EIO), not a short file: a reader must
// never take a cut file for a whole one (found by a review; the retry
// layer in front of a real store turns such an end into
// io.ErrUnexpectedEOF first).
func TestReadEndsEarly(t *testing.T) {
	st := bodyEndsEarly{memStore{objs: map[string][]byte{"f": bytes.Repeat([]byte{7}, 3<<20)}}}
	loader := prefetch.NewLoader(st, nil, prefetch.Options{BlockSize: 1 << 20})
	t.Cleanup(func() { loader.Close() })
	m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Opener: OpenerFunc(func(o store.Object) Reader { return loader.Open(o) })})
	b, err := os.ReadFile(filepath.Join(m.Dir, "f"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a file whose store ends early: %d of %d bytes, %v; want EIO", len(b), 3<<20, err)
	}
}

// TestIdleListingForgetsItsFiles: a listing no lookup asked for in two
// ttls is given back, and the kernel's entries of its files are dropped
// with it, so that the kernel forgets their inodes and the mount its nodes
// of them (a walk of a large bucket held a node per file for the mount's
// life). A file open meanwhile still reads.
func TestIdleListingForgetsItsFiles(t *testing.T) {
	objs := map[string][]byte{"keep/open.bin": []byte("still here")}
	for i := range 500 {
		objs[fmt.Sprintf("d/f%04d.jpg", i)] = []byte("x")
	}
	m := mountCfg(t, Config{Store: memStore{objs: objs}, MetadataTTL: time.Second})
	f, err := os.Open(filepath.Join(m.Dir, "keep", "open.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ents, err := os.ReadDir(filepath.Join(m.Dir, "d"))
	if err != nil || len(ents) != 500 {
		t.Fatalf("readdir: %d entries, %v", len(ents), err)
	}
	d := m.FS.inodeAt("d/")
	if n := len(d.Children()); n != 500 {
		t.Fatalf("%d nodes after the readdir, want 500", n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(d.Children()) > 0 || m.FS.ns.held("d/") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("%d nodes left in d/, listing held %v, 20 s on (ttl 1s)", len(d.Children()), m.FS.ns.held("d/") != nil)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b := make([]byte, 32)
	if n, err := f.ReadAt(b, 0); string(b[:n]) != "still here" {
		t.Fatalf("the open file read %q, %v", b[:n], err)
	}
	if ents, err = os.ReadDir(filepath.Join(m.Dir, "d")); err != nil || len(ents) != 500 {
		t.Fatalf("readdir again: %d entries, %v", len(ents), err)
	}
}
