package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/fuse"
	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store/s3"
)

// dataset uploads n files of random bytes under prefix and returns them by
// path relative to the prefix.
func dataset(t *testing.T, st *s3.Store, prefix string, n, size int) map[string][]byte {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(n), uint64(size)))
	files := map[string][]byte{}
	g := new(errgroup.Group)
	g.SetLimit(16)
	for i := range n {
		b := make([]byte, size/2+r.IntN(size))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		rel := fmt.Sprintf("c%02d/img%05d.jpg", i%7, i)
		files[rel] = b
		g.Go(func() error {
			_, err := testenv.PutBytes(context.Background(), st, prefix+rel, b)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return files
}

// mountProcess runs `dataccel mount ARGS...` (the mountpoint last) as a
// child process with the test server's credentials, and returns once it
// logs that it serves. The process is killed and its mount detached when
// the test ends.
func mountProcess(t *testing.T, args ...string) (*exec.Cmd, *testenv.SyncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mount"}, args...)...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		syscall.Unmount(args[len(args)-1], syscall.MNT_DETACH)
	})
	// After "mounted": go-fuse's start-up touches the mount from inside the
	// process, and a kill in that instant would hang the connection.
	waitFor(t, 15*time.Second, func() bool { return strings.Contains(logs.String(), "msg=mounted") })
	return cmd, logs
}

// running is an in-process `dataccel mount`.
type running struct {
	dir  string
	stop context.CancelFunc
	done chan error
}

// startMount runs `dataccel mount ARGS... MOUNTPOINT` in-process until the
// test ends (or stopMount), with the test server's credentials.
func startMount(t *testing.T, dir string, args ...string) *running {
	t.Helper()
	setCreds(t, srv.AccessKey, srv.SecretKey)
	root := newRootCmd()
	root.SetArgs(append(append([]string{"mount", "--log-level", "warn"}, args...), dir))
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{dir: dir, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- root.ExecuteContext(ctx) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		// Live means served by this mount: a stale one at dir lists as a
		// mount point too, until the new mount detaches it.
		if _, err := os.Stat(filepath.Join(dir, fuse.ControlDir)); err == nil {
			break
		}
		select {
		case err := <-r.done:
			t.Fatalf("mount exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("mount not live after 15 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() { r.unmount(t) })
	if err := testenv.SettleFUSEPoll(dir); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *running) unmount(t *testing.T) {
	t.Helper()
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("mount exit: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("mount did not exit")
		syscall.Unmount(r.dir, syscall.MNT_DETACH) // leave no mount behind for the next tests
	}
}

// stats reads the mount's counters from .dataccel/stats.
func (r *running) stats(t *testing.T) map[string]int64 {
	t.Helper()
	return readMountStats(t, r.dir)
}

// readMountStats reads the counters of the mount at dir from .dataccel/stats.
func readMountStats(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".dataccel", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("stats %q: %v", b, err)
	}
	return m
}

// readAllFiles reads every file through the mount with 16 readers and
// checks its bytes.
func readAllFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	g := new(errgroup.Group)
	g.SetLimit(16)
	for rel, want := range files {
		g.Go(func() error {
			b, err := os.ReadFile(filepath.Join(dir, rel))
			if err != nil {
				return err
			}
			if !bytes.Equal(b, want) {
				return fmt.Errorf("%s: wrong bytes", rel)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestRestartServesFromCache: fill the disk cache through a mount, unmount,
// remount with the same cache dir: reading everything again costs no GET,
// and the manifest spares every LIST and HEAD. With a RAM tier the disk
// tier takes only what RAM gives up, and the unmount saves the rest.
func TestRestartServesFromCache(t *testing.T) {
	for _, ram := range []string{"0", "64MiB"} {
		t.Run("ram-"+ram, func(t *testing.T) {
			st := srv.NewBucket(t)
			files := dataset(t, st, "ds/", 150, 40<<10)
			cacheDir := t.TempDir()
			args := []string{"--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--cache-size", "1GiB", "--ram-cache-size", ram, "--manifest", "reuse", "s3://" + st.Bucket() + "/ds"}
			m := startMount(t, t.TempDir(), args...)
			readAllFiles(t, m.dir, files)
			first := m.stats(t)
			if first["store_requests_get_total"] < int64(len(files)) {
				t.Fatalf("cold read made %d GETs for %d files", first["store_requests_get_total"], len(files))
			}
			// The RAM tier is best effort: under load it may drop a Set, and
			// the disk tier then takes that block. Writing them all is the bug.
			total, inPages := 0, 0 // a RAM tier in a memory file holds whole pages
			for _, b := range files {
				total += len(b)
				inPages += (len(b) + 4095) &^ 4095
			}
			if w := first["cache_disk_write_bytes_total"]; ram != "0" && w > int64(total)/20 {
				t.Errorf("%d bytes written to disk while the dataset (%d bytes) fits in RAM; want at most 5%%", w, total)
			}
			if b := first["cache_ram_bytes"]; ram != "0" && (b < int64(total)/2 || b > int64(inPages)) || ram == "0" && b != 0 {
				t.Errorf("cache_ram_bytes %d after reading %d bytes with a %s RAM cache", b, total, ram)
			}
			waitManifest(t, cacheDir)
			m.unmount(t)

			m2 := startMount(t, t.TempDir(), args...)
			readAllFiles(t, m2.dir, files)
			s := m2.stats(t)
			if s["store_requests_get_total"] != 0 || s["store_requests_list_total"] != 0 || s["store_requests_stat_total"] != 0 {
				t.Fatalf("remount: %d GET, %d LIST, %d HEAD; want 0 each", s["store_requests_get_total"], s["store_requests_list_total"], s["store_requests_stat_total"])
			}
			if s["cache_disk_hits_total"] < int64(len(files)) {
				t.Fatalf("disk hits %d, want >= %d", s["cache_disk_hits_total"], len(files))
			}
		})
	}
}

// changeDataset changes a dataset of dataset(t, st, "ds/", ...) in the
// store, and files with it: one object overwritten, one added, one deleted
// (its name returned).
func changeDataset(t *testing.T, st *s3.Store, files map[string][]byte) (gone string) {
	t.Helper()
	const changed, added = "c00/img00000.jpg", "c02/new.jpg"
	gone = "c01/img00001.jpg"
	files[changed] = bytes.Repeat([]byte("v2"), len(files[changed])/2)
	files[added] = []byte("added")
	for _, rel := range []string{changed, added} {
		if _, err := testenv.PutBytes(context.Background(), st, "ds/"+rel, files[rel]); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Remove(context.Background(), "ds/"+gone); err != nil {
		t.Fatal(err)
	}
	delete(files, gone)
	return gone
}

// TestStaleManifest: a manifest is trusted for --metadata-ttl from when its
// listings were made, not from the remount. Objects overwritten, added and
// deleted between two mounts on one cache dir show in the second mount as
// soon as its TTL has passed since the first listed them: its reads get
// the new bytes (the old version, still in the disk cache, must not serve).
func TestStaleManifest(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "ds/", 20, 10<<10)
	cacheDir := t.TempDir()
	args := func(ttl string) []string {
		return []string{"--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--metadata-ttl", ttl, "--manifest", "reuse", "s3://" + st.Bucket() + "/ds"}
	}
	m := startMount(t, t.TempDir(), args("1h")...)
	readAllFiles(t, m.dir, files)
	listed := time.Now() // no earlier than the LISTs the reads made
	waitManifest(t, cacheDir)
	m.unmount(t)

	gone := changeDataset(t, st, files)
	const ttl = 3 * time.Second
	time.Sleep(time.Until(listed.Add(ttl + 100*time.Millisecond)))

	m2 := startMount(t, t.TempDir(), args(ttl.String())...)
	readAllFiles(t, m2.dir, files)
	if _, err := os.Stat(filepath.Join(m2.dir, gone)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a deleted object: %v, want it gone", err)
	}
	if s := m2.stats(t); s["store_requests_list_total"] == 0 {
		t.Fatalf("no LIST with a manifest older than --metadata-ttl")
	}
}

// TestRestartSeesChanges: by default a remount on the same cache dir lists
// the store, so that a job started after its dataset changed reads it as
// it is now: an object overwritten since reads its new bytes though the old
// ones are cached, a deleted one is gone and an added one is there, while
// the unchanged objects still come from the disk cache. The manifest made
// the remount read the old bytes, list the deleted name and miss the added
// one for an hour (--metadata-ttl from the first listing).
func TestRestartSeesChanges(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "ds/", 20, 10<<10)
	cacheDir := t.TempDir()
	args := []string{"--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "s3://" + st.Bucket() + "/ds"}
	m := startMount(t, t.TempDir(), args...)
	readAllFiles(t, m.dir, files)
	m.unmount(t)

	gone := changeDataset(t, st, files)

	m2 := startMount(t, t.TempDir(), args...)
	readAllFiles(t, m2.dir, files)
	if _, err := os.Stat(filepath.Join(m2.dir, gone)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a deleted object: %v, want it gone", err)
	}
	ents, err := os.ReadDir(filepath.Join(m2.dir, path.Dir(gone)))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == path.Base(gone) {
			t.Errorf("the deleted object is still listed")
		}
	}
	// One GET for the new bytes and one for the added object, none for
	// the rest.
	if s := m2.stats(t); s["store_requests_get_total"] > 2 || s["cache_disk_hits_total"] < int64(len(files)-2) {
		t.Errorf("remount: %d GETs, %d disk hits for %d files of which 2 new; want the unchanged ones from the cache",
			s["store_requests_get_total"], s["cache_disk_hits_total"], len(files))
	}
}

// TestEmptyMountWarns: a prefix with nothing under it, or an object's key
// given as the prefix, mounts (the data may land later) but says so: the
// job would otherwise read an empty dataset without a word.
func TestEmptyMountWarns(t *testing.T) {
	st := srv.NewBucket(t)
	if _, err := testenv.PutBytes(context.Background(), st, "ds/a/x.jpg", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, prefix, want string }{
		{"a mistyped prefix", "dss", "nothing under the mounted prefix"},
		{"an object's key", "ds/a/x.jpg", "the mounted prefix is an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, logs := mountProcess(t, "--endpoint", srv.Endpoint, "s3://"+st.Bucket()+"/"+tc.prefix, t.TempDir())
			waitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), tc.want) })
		})
	}
}

// readThroughCache mounts a new bucket's dataset of n small files under
// ds/ with a disk cache, and reads every file once.
func readThroughCache(t *testing.T, n int) (st *s3.Store, files map[string][]byte, cacheDir string, args []string, m *running) {
	t.Helper()
	st = srv.NewBucket(t)
	files = dataset(t, st, "ds/", n, 4<<10)
	cacheDir = t.TempDir()
	args = []string{"--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--manifest", "reuse", "s3://" + st.Bucket() + "/ds"}
	m = startMount(t, t.TempDir(), args...)
	readAllFiles(t, m.dir, files)
	return st, files, cacheDir, args, m
}

// TestCacheDirEmptiedWhileMounted: a cache directory emptied from outside
// while a mount uses it (a cleaner of /tmp) takes the next mount: the one
// before wrote its manifest and policy state into it at exit, without the
// marker, and the next one refused the directory as not a cache.
func TestCacheDirEmptiedWhileMounted(t *testing.T) {
	_, files, cacheDir, args, m := readThroughCache(t, 12)
	ents, err := os.ReadDir(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(cacheDir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	m.unmount(t)
	m2 := startMount(t, t.TempDir(), args...)
	readAllFiles(t, m2.dir, files)
}

// TestManifestRedated: a relisting that finds nothing new makes the
// listings younger, and the manifest says so: a remount after the first
// listing's TTL but within the relisting's does no LIST. (The manifest kept
// the first listing's date, since no generation changed, and every remount
// after one TTL listed everything again.)
func TestManifestRedated(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "ds/", 20, 4<<10)
	cacheDir := t.TempDir()
	const ttl = 6 * time.Second
	args := []string{"--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--metadata-ttl", ttl.String(), "--manifest", "reuse", "s3://" + st.Bucket() + "/ds"}
	listed := time.Now()
	m := startMount(t, t.TempDir(), args...)
	readAllFiles(t, m.dir, files)
	first := m.stats(t)["store_requests_list_total"]
	// The background relisting, in the last quarter of the TTL: one LIST
	// more for each directory read (the root and the classes). Not twice
	// the first count: that may hold a LIST no relisting repeats.
	dirs := map[string]bool{"": true}
	for name := range files {
		dirs[path.Dir(name)] = true
	}
	waitFor(t, 2*ttl, func() bool { return m.stats(t)["store_requests_list_total"] >= first+int64(len(dirs)) })
	m.unmount(t)
	time.Sleep(time.Until(listed.Add(ttl + 500*time.Millisecond)))

	m2 := startMount(t, t.TempDir(), args...)
	readAllFiles(t, m2.dir, files)
	if n := m2.stats(t)["store_requests_list_total"]; n != 0 {
		t.Fatalf("%d LISTs on a remount within the TTL of the last relisting", n)
	}
}

// TestPurgeForgetsListings: `cache purge` deletes the saved listings with
// the blocks: a remount after it lists the store again and sees an object
// added since (the manifest outlived the purge, and the remount showed the
// old names for a --metadata-ttl).
func TestPurgeForgetsListings(t *testing.T) {
	st, files, cacheDir, args, m := readThroughCache(t, 10)
	waitManifest(t, cacheDir)
	m.unmount(t)
	if out, err := exec.Command(bin, "cache", "purge", "--cache-dir", cacheDir).CombinedOutput(); err != nil {
		t.Fatalf("cache purge: %v\n%s", err, out)
	}
	if left, _ := filepath.Glob(filepath.Join(cacheDir, "*manifest-*")); len(left) > 0 {
		t.Fatalf("left after purge: %v", left)
	}
	files["c00/added.jpg"] = []byte("added")
	if _, err := testenv.PutBytes(context.Background(), st, "ds/c00/added.jpg", files["c00/added.jpg"]); err != nil {
		t.Fatal(err)
	}
	m2 := startMount(t, t.TempDir(), args...)
	readAllFiles(t, m2.dir, files)
}

// TestRemountWithOtherBlockSize: the disk cache outlives the mount, and the
// next may run with another --block-size. Under 128 KiB blocks, block 1 of
// a 192 KiB file is its last 64 KiB; under 64 KiB blocks, block 1 is its
// middle 64 KiB, the same length: the remount must read the file's own
// bytes, and the block both sizes start at 128 KiB comes from the disk.
func TestRemountWithOtherBlockSize(t *testing.T) {
	st := srv.NewBucket(t)
	files := map[string][]byte{"f.bin": make([]byte, 192<<10)}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range files["f.bin"] {
		files["f.bin"][i] = byte(r.Uint32())
	}
	if _, err := testenv.PutBytes(context.Background(), st, "ds/f.bin", files["f.bin"]); err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	for i, bs := range []string{"128KiB", "64KiB"} {
		m := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--ram-cache-size", "0",
			"--block-size", bs, "s3://"+st.Bucket()+"/ds")
		readAllFiles(t, m.dir, files)
		if s := m.stats(t); i == 1 && s["cache_disk_hits_total"] == 0 {
			t.Errorf("block size %s: no disk hit for the block at 128 KiB", bs)
		}
		m.unmount(t)
	}
}

// TestAnnouncedEpochIsPushed: with an announced order, prefetch puts the
// files it fetches ahead straight into the kernel's page cache, the
// leading blocks of multi-block files too (at their offsets); every file
// reads back exactly, also once the kernel has dropped those pages, and no
// block is fetched twice (but for the RAM tier's best-effort drops).
func TestAnnouncedEpochIsPushed(t *testing.T) {
	const block = 64 << 10
	st := srv.NewBucket(t)
	files := dataset(t, st, "ds/", 60, 100<<10) // 50-150 KB: one to three blocks
	m := &running{dir: t.TempDir()}
	mountProcess(t, "--endpoint", srv.Endpoint, "--block-size", "64KiB", "--ram-cache-size", "64MiB",
		"--hedge=false", "--manifest", "off", "s3://"+st.Bucket()+"/ds", m.dir)
	// A job lists its dataset before reading it: the kernel must know a
	// file before its page cache can be filled.
	names := make([]string, 0, len(files))
	blocks := 0
	for rel, b := range files {
		if _, err := os.Stat(filepath.Join(m.dir, rel)); err != nil {
			t.Fatal(err)
		}
		names = append(names, rel)
		blocks += (len(b) + block - 1) / block
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	f, err := os.OpenFile(filepath.Join(m.dir, fuse.ControlDir, "prefetch"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Join(names, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Every file is pushed, one or two blocks each (each 8th but for its
	// last page, whose read shows the planner where the reader is).
	waitFor(t, 10*time.Second, func() bool { return m.stats(t)["prefetch_pushed_total"] >= 60 })
	readAll := func(what string) {
		for _, rel := range names {
			b, err := os.ReadFile(filepath.Join(m.dir, rel))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, files[rel]) {
				t.Fatalf("%s: %s: wrong bytes", what, rel)
			}
		}
	}
	readAll("read from the page cache")
	// Pages the kernel drops (memory pressure) are read through the mount
	// again, from the cache tiers.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		t.Fatalf("drop the page cache (the tests run as root): %v", err)
	}
	readAll("read again after the kernel dropped its pages")
	// The RAM tier may drop a block under contention (it is best effort),
	// which a later read then fetches again: allow a few. Pushed files read
	// through the mount would cost dozens.
	s := m.stats(t)
	if s["store_requests_get_total"] > int64(blocks+blocks/20) {
		t.Errorf("%d GETs for %d blocks: pushed blocks were fetched again", s["store_requests_get_total"], blocks)
	}
	t.Logf("pushed %d blocks (%d bytes), %d GETs for %d blocks", s["prefetch_pushed_total"], s["prefetch_pushed_bytes_total"], s["store_requests_get_total"], blocks)
}

func waitManifest(t *testing.T, cacheDir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(cacheDir, "manifest-*")); len(m) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no manifest written")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCorruptCacheThroughMount flips bytes in cached block files: reads
// through the mount stay exact and the corruption counter rises.
func TestCorruptCacheThroughMount(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "", 60, 30<<10)
	cacheDir := t.TempDir()
	args := []string{"--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--ram-cache-size", "0", "s3://" + st.Bucket()}
	m := startMount(t, t.TempDir(), args...)
	readAllFiles(t, m.dir, files)
	m.unmount(t)
	flipped := 0
	recs, err := cache.Records(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Len < 1000 {
			continue
		}
		if flipped%2 == 0 { // every other block, in its payload
			flipByte(t, r.Path, r.Off+r.Len-100)
		}
		flipped++
	}
	if flipped < 50 {
		t.Fatalf("only %d blocks in the cache", flipped)
	}
	m2 := startMount(t, t.TempDir(), args...)
	readAllFiles(t, m2.dir, files)
	s := m2.stats(t)
	if s["cache_corruptions_total"] < int64(flipped/2) {
		t.Fatalf("corruptions counted %d, flipped %d", s["cache_corruptions_total"], flipped/2)
	}
	if s["store_requests_get_total"] < int64(flipped/2) {
		t.Fatalf("%d GETs: corrupt blocks were not fetched again", s["store_requests_get_total"])
	}
}

// TestWarmResume interrupts a warm, runs it again: the second run fetches
// only the rest, and a mount on the warmed cache reads with no GET. The
// store is behind a 20 ms round trip, so the warm (four GETs at a time)
// takes over a second after the interrupt's 30 blocks: it lands mid-run.
func TestWarmResume(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "w/", 300, 20<<10)
	cacheDir := t.TempDir()
	setCreds(t, srv.AccessKey, srv.SecretKey)
	delay, err := testenv.StartDelayProxy(srv.Addr, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { delay.Close() })
	warmArgs := []string{"warm", "--endpoint", "http://" + delay.Addr, "--cache-dir", cacheDir, "--concurrency", "4", "-q", "s3://" + st.Bucket() + "/w"}

	// first run: stopped by SIGINT once part of the cache is written; with
	// its progress shown, which must not count the objects it never fetched
	cmd := exec.Command(bin, slices.DeleteFunc(slices.Clone(warmArgs), func(a string) bool { return a == "-q" })...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
	var out testenv.SyncBuffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { n, _ := countBlocks(cacheDir); return n >= 30 })
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("warm finished before the interrupt:\n%s", out.String())
	} else if !strings.Contains(out.String(), "run it again") || strings.Contains(out.String(), "warm done") {
		t.Fatalf("interrupted warm did not say how to resume, or called itself done:\n%s", out.String())
	}
	n1, _ := countBlocks(cacheDir)
	progress := regexp.MustCompile(`(?m)^warm: (\d+)/(\d+) `).FindAllStringSubmatch(out.String(), -1)
	if len(progress) == 0 {
		t.Fatalf("interrupted warm showed no progress:\n%s", out.String())
	}
	if done, _ := strconv.Atoi(progress[len(progress)-1][1]); done > n1 {
		t.Fatalf("interrupted warm counted %d objects done, %d are cached:\n%s", done, n1, out.String())
	}

	// second run: completes, fetching only what is missing
	again := exec.Command(bin, warmArgs...)
	again.Env = cmd.Env
	out2, err := again.CombinedOutput()
	if err != nil {
		t.Fatalf("second warm: %v\n%s", err, out2)
	}
	// It finds every block the first run wrote and fetches the rest: at
	// least one GET each (a GET the store failed is counted again when it is
	// retried, so the count alone has no exact upper bound).
	cached, gets := logInt(t, string(out2), "already_cached_blocks"), logInt(t, string(out2), "gets")
	if cached != int64(n1) || gets < int64(len(files)-n1) {
		t.Fatalf("second warm found %d blocks cached and made %d GETs; %d of %d files were cached before:\n%s", cached, gets, n1, len(files), out2)
	}
	if entries := logInt(t, string(out2), "cache_entries"); entries != int64(len(files)) {
		t.Fatalf("second warm left %d cache entries, want %d", entries, len(files))
	}
	m := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--ram-cache-size", "0", "--prefetch", "off", "s3://"+st.Bucket()+"/w")
	readAllFiles(t, m.dir, files)
	if s := m.stats(t); s["store_requests_get_total"] != 0 {
		t.Fatalf("mount on a warmed cache made %d GETs", s["store_requests_get_total"])
	}
}

// TestWarmEmptyPrefix: a warm that finds nothing to warm (a mistyped
// prefix) fails and says so, rather than leaving the job a cold cache
// after a success.
func TestWarmEmptyPrefix(t *testing.T) {
	st := srv.NewBucket(t)
	dataset(t, st, "train/", 3, 1<<10)
	setCreds(t, srv.AccessKey, srv.SecretKey)
	err := execCmd(t, "warm", "--endpoint", srv.Endpoint, "--cache-dir", t.TempDir(), "-q", "s3://"+st.Bucket()+"/trian")
	if err == nil || !strings.Contains(err.Error(), "no object under s3://"+st.Bucket()+"/trian/") {
		t.Fatalf("warm of an empty prefix: %v, want an error saying there is no object under it", err)
	}
}

// flipByte inverts the byte at off of the file at path.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// countBlocks counts the blocks in a cache dir, also while a process writes it.
func countBlocks(dir string) (int, error) {
	st, err := cache.StatDir(dir)
	return int(st.Entries), err
}

// logInt finds key=N in slog text output.
func logInt(t *testing.T, logs, key string) int64 {
	t.Helper()
	i := strings.LastIndex(logs, " "+key+"=")
	if i < 0 {
		t.Fatalf("no %s= in:\n%s", key, logs)
	}
	var v int64
	fmt.Sscan(logs[i+len(key)+2:], &v)
	return v
}

// TestMetricsAndReadiness: /metrics counts what the mount did, /readyz
// turns unready when the store is unreachable, and no secret shows.
func TestMetricsAndReadiness(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "", 40, 10<<10)
	fp := faultProxy(t)
	port, _ := testenv.FreePort()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	m := startMount(t, t.TempDir(), "--endpoint", fp.Endpoint, "--http", addr, "--hedge=false", "--prefetch", "off", "--manifest", "off", "s3://"+st.Bucket())
	readAllFiles(t, m.dir, files)
	body := httpGet(t, "http://"+addr+"/metrics", 200)
	gets := metricValue(t, body, "dataccel_store_requests_get_total")
	if gets != float64(len(files)) {
		t.Fatalf("metrics count %v GETs for %d small files read once", gets, len(files))
	}
	if n := metricValue(t, body, "dataccel_store_get_latency_seconds_count"); n != gets {
		t.Fatalf("GET latency histogram holds %v GETs, the counter %v", n, gets)
	}
	if metricValue(t, body, "dataccel_cache_ram_misses_total") == 0 {
		t.Fatal("no cache misses counted")
	}
	if strings.Contains(body, srv.SecretKey) || strings.Contains(body, srv.AccessKey) {
		t.Fatal("metrics carry a credential")
	}
	httpGet(t, "http://"+addr+"/healthz", 200)
	httpGet(t, "http://"+addr+"/readyz", 200)
	fp.SetDown(true)
	httpGet(t, "http://"+addr+"/readyz", 503)
	fp.SetDown(false)
	httpGet(t, "http://"+addr+"/readyz", 200)
}

// TestListGrantedOnPrefixOnly: a policy may grant s3:ListBucket on the
// dataset's prefix only; the start's check and /readyz list under the
// prefix, so the mount starts, serves and stays ready.
func TestListGrantedOnPrefixOnly(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "ds/", 10, 4<<10)
	fp := faultProxy(t)
	allowed := "ds/"
	fp.ListPrefix.Store(&allowed)
	port, _ := testenv.FreePort()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	m := startMount(t, t.TempDir(), "--endpoint", fp.Endpoint, "--http", addr, "s3://"+st.Bucket()+"/ds")
	readAllFiles(t, m.dir, files)
	httpGet(t, "http://"+addr+"/readyz", 200)
	// The policy is what the proxy enforces: a mount of the bucket's root
	// is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "mount", "--endpoint", fp.Endpoint, "s3://"+st.Bucket(), t.TempDir())
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey, "AWS_SESSION_TOKEN=")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "denied") {
		t.Errorf("a mount of the bucket's root through a prefix-only policy: %v, want access denied:\n%s", err, out)
	}
}

// TestReadinessWantsThisMount: in a pod the mountpoint is a mount point
// (the kubelet's bind mount of the shared volume) before dataccel mounts on
// it; /readyz must not pass on it, before the mount or after it is gone.
func TestReadinessWantsThisMount(t *testing.T) {
	st := srv.NewBucket(t)
	dir := t.TempDir()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount, as the kubelet makes: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	var mounted atomic.Bool
	ready := readiness(dir, st, "", &mounted)
	ctx := context.Background()
	if err := ready(ctx); err == nil || !strings.Contains(err.Error(), "not mounted yet") {
		t.Errorf("before mounting: %v, want not mounted yet", err)
	}
	mounted.Store(true) // and then the FUSE mount went away: only the bind mount is left
	if err := ready(ctx); err == nil || !strings.Contains(err.Error(), "is not live") {
		t.Errorf("a bind mount alone: %v, want not live", err)
	}
	m := startMount(t, dir, "--endpoint", srv.Endpoint, "s3://"+st.Bucket())
	if err := readiness(m.dir, st, "", &mounted)(ctx); err != nil {
		t.Errorf("mounted: %v", err)
	}
}

func httpGet(t *testing.T, url string, want int) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d, want %d: %s", url, resp.StatusCode, want, b)
	}
	return string(b)
}

func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+" ") {
			var v float64
			fmt.Sscan(strings.TrimPrefix(line, name+" "), &v)
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestStaleMountCleaned: a mount whose process was SIGKILLed leaves
// "transport endpoint is not connected"; the next mount cleans it.
func TestStaleMountCleaned(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "f", []byte("x"))
	mnt := t.TempDir()
	cmd, _ := mountProcess(t, "--endpoint", srv.Endpoint, "s3://"+st.Bucket(), mnt)
	cmd.Process.Kill()
	cmd.Wait()
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("statfs after SIGKILL: %v; the test needs a stale mount (ENOTCONN)", err)
	}
	_, logs := mountProcess(t, "--endpoint", srv.Endpoint, "s3://"+st.Bucket(), mnt)
	if b, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(b) != "x" {
		t.Fatalf("read after cleaning the stale mount: %q %v", b, err)
	}
	if !strings.Contains(logs.String(), "detached what was mounted at the mountpoint") {
		t.Errorf("the mount detached a stale one without a word:\n%s", logs)
	}
}

// stopProcess stops cmd's process (SIGSTOP) and waits until every thread
// of it is stopped (the signal lands asynchronously); SIGCONT at cleanup.
func stopProcess(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT) })
	waitFor(t, 5*time.Second, func() bool {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", cmd.Process.Pid))
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			i := strings.LastIndexByte(string(b), ')')
			if err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				return false
			}
		}
		return len(tasks) > 0
	})
}

// TestBusyCacheDirLeavesMountAlone: a second mount on the mountpoint and the
// cache dir of a mount that answers nothing for now (stopped) fails on the
// cache dir, at once, naming the mount that holds it, and leaves that
// mount be: it aborted and detached the first mount as hung, then failed
// on the cache dir all the same, leaving nothing mounted; and once the
// kernel no longer trusted the stopped mount's attributes, it hung on a
// stat of the mountpoint.
func TestBusyCacheDirLeavesMountAlone(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "f", []byte("z"))
	mnt, cacheDir := t.TempDir(), t.TempDir()
	const ttl = time.Second // the kernel's attribute timeout
	args := []string{"--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--metadata-ttl", ttl.String(), "s3://" + st.Bucket(), mnt}
	first, _ := mountProcess(t, args...)
	waitFor(t, 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(cacheDir, mountRecord))
		return err == nil
	})
	stopProcess(t, first)
	time.Sleep(ttl + 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, bin, append([]string{"mount"}, args...)...)
	second.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
	out, err := second.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the second mount was still running after 20 s:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "in use by another process") || !strings.Contains(string(out), "the mount at "+mnt) {
		t.Errorf("second mount on a busy cache dir: %v, want it refused, naming the mount at %s:\n%s", err, mnt, out)
	}
	// The same through a symlink to the mountpoint: resolving it stat'ed
	// the stopped mount.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(mnt, link); err != nil {
		t.Fatal(err)
	}
	viaLink := slices.Clone(args)
	viaLink[len(viaLink)-1] = link
	third := exec.CommandContext(ctx, bin, append([]string{"mount"}, viaLink...)...)
	third.Env = second.Env
	out, err = third.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("a mount through a symlink to the stopped mount was still running after 20 s:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "in use by another process") {
		t.Errorf("a mount through a symlink on a busy cache dir: %v, want it refused:\n%s", err, out)
	}
	first.Process.Signal(syscall.SIGCONT)
	if b, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(b) != "z" {
		t.Fatalf("the first mount after the refused one: %q %v, want it still serving", b, err)
	}
}

// TestHungMountCleaned: a mount whose server stops answering (here
// SIGSTOPped) hangs every request; the next mount's check must not hang
// with it: it aborts the connection and detaches the mount.
func TestHungMountCleaned(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "f", []byte("y"))
	mnt := t.TempDir()
	cmd, _ := mountProcess(t, "--endpoint", srv.Endpoint, "s3://"+st.Bucket(), mnt)
	stopProcess(t, cmd)

	done := make(chan error, 1)
	go func() {
		_, err := fuse.CheckMountpoint(mnt)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("check of a hung mount: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the mountpoint check hung with the mount")
	}
	if m, _ := fuse.IsMountpoint(mnt); m {
		t.Fatal("the hung mount is still mounted")
	}
	m := startMount(t, mnt, "--endpoint", srv.Endpoint, "s3://"+st.Bucket())
	if b, err := os.ReadFile(filepath.Join(m.dir, "f")); err != nil || string(b) != "y" {
		t.Fatalf("read after cleaning the hung mount: %q %v", b, err)
	}
}

// TestSweepOffThroughMount: with --sweep=false, two files read far apart
// in a directory fetch those two files and nothing else (a job that reads
// a few files of each directory); by default they fetch the rest of it.
func TestSweepOffThroughMount(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    []string
		wantGets func(gets int64) bool
	}{
		{"default", nil, func(gets int64) bool { return gets >= 20 }},
		{"off", []string{"--sweep=false"}, func(gets int64) bool { return gets == 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := srv.NewBucket(t)
			files := dataset(t, st, "ds/", 140, 4<<10) // 20 files in each of c00..c06
			args := append([]string{"--endpoint", srv.Endpoint, "--ram-cache-size", "64MiB", "--hedge=false"}, tc.flags...)
			m := startMount(t, t.TempDir(), append(args, "s3://"+st.Bucket()+"/ds")...)
			for _, rel := range []string{"c00/img00000.jpg", "c00/img00133.jpg"} { // first and last of c00: no walk
				b, err := os.ReadFile(filepath.Join(m.dir, rel))
				if err != nil || !bytes.Equal(b, files[rel]) {
					t.Fatalf("%s: %v or wrong bytes", rel, err)
				}
			}
			time.Sleep(500 * time.Millisecond)
			var gets int64
			waitFor(t, 10*time.Second, func() bool { gets = m.stats(t)["store_requests_get_total"]; return tc.wantGets(gets) })
			time.Sleep(300 * time.Millisecond)
			if gets = m.stats(t)["store_requests_get_total"]; !tc.wantGets(gets) {
				t.Fatalf("%d GETs after two files of a directory of 20 were read", gets)
			}
		})
	}
}

// TestSweepThroughMountDeepTree: against the real server, a job that reads
// a tree two levels deep (class/subject/file) from a list of paths, never
// walking it: once its reads have spread over four classes (two files of
// one subject each), the sweep fetches every other file of every class,
// each with about one GET, and every file reads back exact.
func TestSweepThroughMountDeepTree(t *testing.T) {
	const classes, subjects, perDir = 6, 3, 6
	st := srv.NewBucket(t)
	r := rand.New(rand.NewPCG(5, 6))
	files := map[string][]byte{}
	for c := range classes {
		for s := range subjects {
			for i := range perDir {
				b := make([]byte, 10<<10+r.IntN(20<<10))
				for j := range b {
					b[j] = byte(r.Uint32())
				}
				files[fmt.Sprintf("c%d/s%d/f%d.jpg", c, s, i)] = b
			}
		}
	}
	g := new(errgroup.Group)
	g.SetLimit(16)
	for rel, b := range files {
		g.Go(func() error {
			_, err := testenv.PutBytes(context.Background(), st, "ds/"+rel, b)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "--ram-cache-size", "64MiB",
		"--hedge=false", "--manifest", "off", "s3://"+st.Bucket()+"/ds")
	read := func(rel string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(m.dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, files[rel]) {
			t.Fatalf("%s: wrong bytes", rel)
		}
	}
	// Two classes first: their lookups list the rest of the tree ahead.
	// Then a stat of one file of every subject waits for those listings
	// (and lists the first class's other subjects, passed before a walk
	// was seen); a stat opens nothing, so the sweep has not started.
	for c := range 2 {
		read(fmt.Sprintf("c%d/s0/f0.jpg", c))
		read(fmt.Sprintf("c%d/s0/f1.jpg", c))
	}
	for c := range classes {
		for s := range subjects {
			if _, err := os.Stat(filepath.Join(m.dir, fmt.Sprintf("c%d/s%d/f0.jpg", c, s))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for c := 2; c < 4; c++ {
		read(fmt.Sprintf("c%d/s0/f0.jpg", c))
		read(fmt.Sprintf("c%d/s0/f1.jpg", c))
	}
	// The reads have spread over four classes: the sweep takes every
	// other file of every class.
	const readFirst = 8
	total := classes * subjects * perDir
	waitFor(t, 10*time.Second, func() bool { return m.stats(t)["prefetch_issued_total"] >= int64(total-readFirst) })
	for rel := range files {
		read(rel)
	}
	// The counters are a snapshot of up to statsFresh ago: wait for the
	// reads' GETs to show. The RAM tier may drop a block under contention
	// (it is best effort), which a read then fetches again: allow a few.
	var gets int64
	waitFor(t, 10*time.Second, func() bool { gets = m.stats(t)["store_requests_get_total"]; return gets >= int64(total) })
	if gets > int64(total+total/20) {
		t.Errorf("%d GETs for %d files, want about one each", gets, total)
	}
}

// TestLocalCopiesThroughMount: with --passthrough-min-size under the
// dataset's file sizes, every file is read by the kernel from a whole local
// copy in --cache-dir/copies, made once from one fetch of the object and
// used by every later open. The copies outlive the mount: the next mount on
// the cache dir adopts them (checked against their hashes) with no GET and
// no copy made, and so does a mount after dataccel warm with the same flags.
func TestLocalCopiesThroughMount(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "pt/", 8, 2<<20) // 1-3 MiB each
	total := 0
	for _, b := range files {
		total += len(b)
	}
	n := int64(len(files))
	src := "s3://" + st.Bucket() + "/pt"
	flags := []string{"--endpoint", srv.Endpoint, "--block-size", "256KiB", "--passthrough-min-size", "1MiB"}
	mountCache, warmCache := t.TempDir(), t.TempDir()
	warm := exec.Command(bin, append([]string{"warm", "-q", "--cache-dir", warmCache, src}, flags...)...)
	warm.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
	if out, err := warm.CombinedOutput(); err != nil {
		t.Fatalf("warm: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		run           string
		cacheDir      string
		made, adopted int64
		fetched       bool
	}{
		{run: "cold", cacheDir: mountCache, made: n, fetched: true},
		{run: "remount", cacheDir: mountCache, adopted: n},
		{run: "after warm", cacheDir: warmCache, adopted: n},
	} {
		m := startMount(t, t.TempDir(), append([]string{"--cache-dir", tc.cacheDir, src}, flags...)...)
		readAllFiles(t, m.dir, files)
		readAllFiles(t, m.dir, files)
		time.Sleep(2 * statsFreshness) // the counters are a snapshot
		s := m.stats(t)
		// An open while the file's last one is still open (the kernel
		// sends RELEASE after the close, later on a loaded machine) shares
		// that one's copy without asking again: the second pass counts a
		// reuse for most files, not all.
		if s["local_copies_made_total"] != tc.made || s["local_copies_adopted_total"] != tc.adopted ||
			s["local_copies_reused_total"] < max(tc.adopted, 1) || s["local_copies_rejected_total"] != 0 {
			t.Fatalf("%s: %d copies made, %d adopted, %d rejected, %d reused for %d files read twice; want %d made, %d adopted, reused",
				tc.run, s["local_copies_made_total"], s["local_copies_adopted_total"], s["local_copies_rejected_total"],
				s["local_copies_reused_total"], n, tc.made, tc.adopted)
		}
		// The copies hold the bytes: the RAM tier lets them go (and so
		// keeps them off the disk tier) once a copy is made.
		if ram := s["cache_ram_bytes"]; ram > int64(total)/4 {
			t.Errorf("%s: the RAM tier holds %d bytes after the copies of %d bytes were made", tc.run, ram, total)
		}
		// A copy is made from the one fetch of its object: a second would
		// double the bytes. A block now and then fetched twice when a read
		// races a prefetch run of the same file is allowed.
		if got := s["store_get_bytes_total"]; tc.fetched && got > int64(total)*11/10 || !tc.fetched && got != 0 {
			t.Errorf("%s: %d bytes fetched for %d bytes of files; counters %v", tc.run, got, total, s)
		}
		m.unmount(t)
		copies, err := os.ReadDir(filepath.Join(tc.cacheDir, "copies"))
		if err != nil || len(copies) != len(files)+1 {
			t.Fatalf("%s: %d files in the copies directory after unmount (%v), want %d and the index", tc.run, len(copies), err, len(files))
		}
	}
	// warm fetched the large files into their copies only, not into the disk cache too.
	if st, err := cache.StatDir(warmCache); err != nil || st.Entries != 0 {
		t.Errorf("warm with local copies left %d blocks in the disk cache (%v), want none", st.Entries, err)
	}
	// A mount that makes no copies removes them: it would neither use nor bound them.
	m := startMount(t, t.TempDir(), append([]string{"--cache-dir", mountCache, src}, flags[:4]...)...) // all but --passthrough-min-size
	readAllFiles(t, m.dir, files)
	m.unmount(t)
	if _, err := os.Stat(filepath.Join(mountCache, "copies")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("copies after a mount without --passthrough-min-size: %v", err)
	}
	out, err := exec.Command(bin, "cache", "stat", "--cache-dir", warmCache).CombinedOutput()
	if want := fmt.Sprintf("local copies (--passthrough-min-size)  %d,", n); err != nil || !strings.Contains(string(out), want) {
		t.Errorf("cache stat: %v, want %q in\n%s", err, want, out)
	}
	if out, err := exec.Command(bin, "cache", "purge", "--cache-dir", warmCache).CombinedOutput(); err != nil {
		t.Fatalf("cache purge: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(warmCache, "copies")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("copies after cache purge: %v", err)
	}
}

// readOnlyDir returns an empty directory on a read-only file system (a
// tmpfs mounted for the test).
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	if err := os.Mkdir(filepath.Join(dir, "cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v %s", err, out)
	}
	return filepath.Join(dir, "cache")
}

// TestWarmIntoFullCache: a warm the disk cache cannot take whole fetches
// about what it can take, says how much it left out and which bound
// stopped it; one that cached nothing
// fails, whether the cache's own bound or the file system's free space
// (another program's files) is what ran out, and so does one whose disk
// cache stopped taking writes (a read-only file system: it exited 0 with
// nothing cached).
func TestWarmIntoFullCache(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "full/", 40, 32<<10) // 16-48 KiB each
	var total int64
	for _, b := range files {
		total += int64(len(b))
	}
	for _, tc := range []struct {
		name    string
		flags   []string
		fails   bool
		wantMsg string
	}{
		{"the bound holds about half", []string{"--cache-size", fmt.Sprint(total / 2)}, false, "part of the dataset was not cached"},
		{"the bound holds no block", []string{"--cache-size", "8KiB"}, true, "warm cached none of the 40 objects"},
		// A floor over the free space: the disk already full of other files.
		{"the free space is under the floor", []string{"--cache-min-free", "99%"}, true, "above the --cache-min-free floor"},
		{"a read-only file system", []string{"--concurrency", "2"}, true, "stopped taking writes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cacheDir := t.TempDir()
			if tc.name == "a read-only file system" {
				cacheDir = readOnlyDir(t)
			}
			out, err := warmCmd(st, "full", cacheDir, tc.flags...)
			if (err != nil) != tc.fails || !strings.Contains(out, tc.wantMsg) {
				t.Fatalf("warm %v: %v (want failure: %v), want %q in:\n%s", tc.flags, err, tc.fails, tc.wantMsg, out)
			}
			if tc.name == "a read-only file system" {
				return // nothing could be written there, not even the cache's marker
			}
			n, err := countBlocks(cacheDir)
			if err != nil {
				t.Fatal(err)
			}
			if tc.fails && n != 0 || !tc.fails && (n == 0 || n == len(files)) {
				t.Fatalf("%d of %d files cached", n, len(files))
			}
			if !tc.fails {
				if missing := logInt(t, out, "objects_not_cached"); missing != int64(len(files)-n) {
					t.Errorf("warm says %d objects not cached, the cache holds %d of %d", missing, n, len(files))
				}
				// The rest would only have evicted what it cached.
				if fetched := logInt(t, out, "fetched_bytes"); fetched > total*3/4 {
					t.Errorf("warm fetched %d bytes of %d into a cache bound to half of them:\n%s", fetched, total, out)
				}
			}
		})
	}
}

// TestWarmCompressibleIntoSmallCache: a dataset larger than the cache by
// its size but not once compressed is warmed whole: warm plans by size
// first, then takes what the compressed blocks left room for.
func TestWarmCompressibleIntoSmallCache(t *testing.T) {
	st := srv.NewBucket(t)
	var total int64
	const n = 20
	for i := range n {
		b := []byte(strings.Repeat(fmt.Sprintf("line %d of a caption file that compresses well\n", i), 600))
		testenv.Put(t, st, fmt.Sprintf("text/f%02d.txt", i), b)
		total += int64(len(b))
	}
	cacheDir := t.TempDir()
	out, err := warmCmd(st, "text", cacheDir, "--cache-size", fmt.Sprint(total/2))
	if err != nil {
		t.Fatalf("warm: %v\n%s", err, out)
	}
	if got, err := countBlocks(cacheDir); err != nil || got != n {
		t.Fatalf("%d of %d compressible files cached in a cache of half their size (%v):\n%s", got, n, err, out)
	}
}

// TestWarmSmallCacheTakesTheListFirst: when the cache holds half the
// dataset, warm --list warms the files the list names first (the ones the
// job reads first), not the first keys.
func TestWarmSmallCacheTakesTheListFirst(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "order/", 20, 32<<10)
	names := slices.Sorted(maps.Keys(files))
	slices.Reverse(names) // the last keys first
	var total int64
	for _, b := range files {
		total += int64(len(b))
	}
	cacheDir := t.TempDir()
	warm := func(list []string, size int64) string {
		t.Helper()
		file := filepath.Join(t.TempDir(), "list")
		if err := os.WriteFile(file, []byte(strings.Join(list, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := warmCmd(st, "order", cacheDir, "--cache-size", fmt.Sprint(size), "--list", file)
		if err != nil {
			t.Fatalf("warm: %v\n%s", err, out)
		}
		return out
	}
	warm(names, total/2)
	if out := warm(names[:3], total); logInt(t, out, "gets") != 0 {
		t.Errorf("the list's first files were not warmed:\n%s", out)
	}
	if out := warm(names[len(names)-3:], total); logInt(t, out, "gets") == 0 {
		t.Errorf("the list's last files were warmed into a cache of half the dataset:\n%s", out)
	}
}

// TestWarmPassesOverWhatDoesNotFit: a file larger than the room left is
// passed over for the files after it that fit, not the end of the warm (a
// large first file left a small cache empty, and the warm failed).
func TestWarmPassesOverWhatDoesNotFit(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "mix/a-big.bin", bytes.Repeat([]byte{7}, 400<<10))
	for i := range 20 {
		b := make([]byte, 8<<10)
		r := rand.New(rand.NewPCG(uint64(i), 1))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		testenv.Put(t, st, fmt.Sprintf("mix/b%02d.jpg", i), b)
	}
	cacheDir := t.TempDir()
	out, err := warmCmd(st, "mix", cacheDir, "--cache-size", "384KiB", "--cache-compress=false")
	if err != nil {
		t.Fatalf("warm: %v\n%s", err, out)
	}
	if n, err := countBlocks(cacheDir); err != nil || n != 20 {
		t.Fatalf("%d blocks cached (%v), want the 20 small files:\n%s", n, err, out)
	}
	if got := logInt(t, out, "gets"); got != 20 {
		t.Errorf("%d GETs, want 20: the large file only, which does not fit, is left", got)
	}
}

// warmCmd runs warm of s3://BUCKET/prefix into cacheDir with args, and
// returns its output and error.
func warmCmd(st *s3.Store, prefix, cacheDir string, args ...string) (string, error) {
	cmd := exec.Command(bin, append([]string{"warm", "-q", "--endpoint", srv.Endpoint, "--cache-dir", cacheDir,
		"s3://" + st.Bucket() + "/" + prefix}, args...)...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestWarmPlansWhatTheCacheTakes: a warm into a cache too small for the
// dataset fetches what the cache then takes, no file more (one more was
// fetched and refused, a file anywhere in the order), whether the cache is
// empty, holds another dataset (which its policy keeps), or holds data
// that compresses (a second round takes the room it left).
func TestWarmPlansWhatTheCacheTakes(t *testing.T) {
	st := srv.NewBucket(t)
	dataset(t, st, "one/", 400, 50<<10) // 20 MB: a 16 MiB cache has 16 segments, each with its header
	dataset(t, st, "two/", 20, 300<<10)
	words := strings.Fields("the a of image label train val batch epoch crop flip resize mean std tensor loader shard sample")
	r := rand.New(rand.NewPCG(3, 4))
	var textBytes int64
	for i := range 80 {
		var b strings.Builder
		for b.Len() < 64<<10 {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		testenv.Put(t, st, fmt.Sprintf("text/c%d/f%02d.txt", i%4, i), []byte(b.String()))
		textBytes += int64(b.Len())
	}
	check := func(t *testing.T, out string) {
		t.Helper()
		if n := logInt(t, out, "not_admitted_cache_full"); n != 0 {
			t.Errorf("%d blocks fetched and refused:\n%s", n, out)
		}
	}
	t.Run("empty cache", func(t *testing.T) {
		dir := t.TempDir()
		out, err := warmCmd(st, "one", dir, "--cache-size", "16MiB")
		if err != nil {
			t.Fatalf("warm: %v\n%s", err, out)
		}
		check(t, out)
		if n, _ := countBlocks(dir); int64(n) != logInt(t, out, "gets") || n < 200 {
			t.Errorf("%d blocks cached for %d GETs:\n%s", n, logInt(t, out, "gets"), out)
		}
	})
	t.Run("another dataset cached", func(t *testing.T) {
		dir := t.TempDir()
		if out, err := warmCmd(st, "two", dir, "--cache-size", "4MiB"); err != nil {
			t.Fatalf("warm two: %v\n%s", err, out)
		}
		out, err := warmCmd(st, "one", dir, "--cache-size", "4MiB")
		if err != nil {
			t.Fatalf("warm one: %v\n%s", err, out)
		}
		check(t, out)
	})
	t.Run("compressible", func(t *testing.T) {
		dir := t.TempDir()
		const size = 1 << 20
		out, err := warmCmd(st, "text", dir, "--cache-size", fmt.Sprint(size))
		if err != nil {
			t.Fatalf("warm: %v\n%s", err, out)
		}
		if held := logInt(t, out, "cache_bytes"); held < size*8/10 || logInt(t, out, "objects_not_cached") == 0 {
			t.Errorf("one warm of %d bytes that compress filled %d of a %d-byte cache; want 80%% at least, and some left out:\n%s", textBytes, held, size, out)
		}
	})
}

// TestWarmEmptyFilesAloneFail: a warm that cached only empty files (the
// only ones that fit) cached none of the dataset: it fails, as one that
// cached nothing does.
func TestWarmEmptyFilesAloneFail(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "e/a-empty", nil)
	testenv.Put(t, st, "e/b.bin", bytes.Repeat([]byte{1}, 2<<20))
	out, err := warmCmd(st, "e", t.TempDir(), "--cache-size", "256KiB")
	if err == nil || !strings.Contains(out, "warm cached none") {
		t.Fatalf("warm that cached an empty file alone: %v, want a failure:\n%s", err, out)
	}
}
