package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/internal/testenv"
)

// TestFaultsThroughMount: for each fault the proxy injects, a parallel read
// of a few hundred files through a real mount completes with every byte
// exact, and the mount's retry counter equals the faults injected.
func TestFaultsThroughMount(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "", 200, 30<<10)
	sums := map[string][32]byte{}
	for k, v := range files {
		sums[k] = sha256.Sum256(v)
	}
	tests := []struct {
		fault testenv.Fault
		stall time.Duration
	}{
		{fault: testenv.SlowDown},
		{fault: testenv.InternalError},
		{fault: testenv.ResetMidBody},
		{fault: testenv.StallFirstByte, stall: 3 * time.Second},
		{fault: testenv.StallMidBody, stall: 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			fp := faultProxy(t)
			fp.Add(testenv.Rule{Fault: tc.fault, Method: "GET", Every: 5, Stall: tc.stall})
			m := startMount(t, t.TempDir(), "--endpoint", fp.Endpoint, "--stall-timeout", "1s",
				"--hedge=false", "--prefetch", "off", "s3://"+st.Bucket())
			g := new(errgroup.Group)
			g.SetLimit(16)
			for rel := range files {
				g.Go(func() error {
					b, err := os.ReadFile(filepath.Join(m.dir, rel))
					if err != nil {
						return err
					}
					if sha256.Sum256(b) != sums[rel] {
						return fmt.Errorf("%s: SHA-256 differs", rel)
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			s := m.stats(t)
			inj := fp.Injected(tc.fault)
			if inj < 30 {
				t.Fatalf("only %d faults injected", inj)
			}
			if s["store_retries_total"] != inj {
				t.Fatalf("retries %d, faults injected %d", s["store_retries_total"], inj)
			}
			if tc.stall > 0 && s["store_timeouts_total"] != inj {
				t.Fatalf("stall cuts %d, stalls injected %d", s["store_timeouts_total"], inj)
			}
		})
	}
}

// TestEndpointDownThroughMount: with the server gone, stalling every
// request, or dripping every body a byte at a time, for longer than
// --io-timeout, a read fails with EIO within the
// bound (never EINTR, which a reader retries for ever); when the server is
// back, new reads succeed without a remount.
func TestEndpointDownThroughMount(t *testing.T) {
	tests := []struct {
		name         string
		down, healed func(fp *testenv.FaultProxy)
	}{
		{"refused", func(fp *testenv.FaultProxy) { fp.SetDown(true) }, func(fp *testenv.FaultProxy) { fp.SetDown(false) }},
		{"stalled", func(fp *testenv.FaultProxy) { fp.Add(testenv.Rule{Fault: testenv.StallFirstByte, Stall: time.Minute}) },
			func(fp *testenv.FaultProxy) { fp.Clear() }},
		{"dripping", func(fp *testenv.FaultProxy) {
			fp.Add(testenv.Rule{Fault: testenv.DripMidBody, Stall: 50 * time.Millisecond})
		},
			func(fp *testenv.FaultProxy) { fp.Clear() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := srv.NewBucket(t)
			files := dataset(t, st, "", 3, 10<<10)
			fp := faultProxy(t)
			const ioTimeout = 2 * time.Second
			m := startMount(t, t.TempDir(), "--endpoint", fp.Endpoint, "--io-timeout", ioTimeout.String(), "--stall-timeout", "300ms",
				"--prefetch", "off", "s3://"+st.Bucket())
			var names []string
			for rel := range files {
				if _, err := os.Stat(filepath.Join(m.dir, rel)); err != nil { // metadata known before the outage
					t.Fatal(err)
				}
				names = append(names, rel)
			}
			tc.down(fp)
			start := time.Now()
			err := readOnce(filepath.Join(m.dir, names[0]))
			took := time.Since(start)
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("read with the server %s: %v, want EIO", tc.name, err)
			}
			// The kernel asks twice (its read-ahead, then the page the
			// reader waits on); the second READ fails at once with the
			// first one's error. It waited --io-timeout too: twice the
			// bound for one read(2).
			t.Logf("EIO after %s", took)
			if took >= 2*ioTimeout {
				t.Fatalf("EIO after %s, want within about %s", took, ioTimeout)
			}
			tc.healed(fp)
			for _, rel := range names {
				b, err := os.ReadFile(filepath.Join(m.dir, rel))
				if err != nil || !bytes.Equal(b, files[rel]) {
					t.Fatalf("after recovery %s: %v", rel, err)
				}
			}
		})
	}
}

// TestOutageRiddenOut: with the store down past --metadata-ttl, a job
// whose files are cached opens and reads them on (--outage-grace); with
// --outage-grace 0 the opens fail as before. Once the store is back, the
// mount lists again and sees an object added meanwhile.
func TestOutageRiddenOut(t *testing.T) {
	for _, tc := range []struct {
		grace   string
		readsOn bool
	}{{"0s", false}, {"1m", true}} {
		t.Run("grace="+tc.grace, func(t *testing.T) {
			st := srv.NewBucket(t)
			files := dataset(t, st, "", 4, 10<<10)
			fp := faultProxy(t)
			const ttl = time.Second
			m := startMount(t, t.TempDir(), "--endpoint", fp.Endpoint, "--metadata-ttl", ttl.String(), "--outage-grace", tc.grace,
				"--io-timeout", "1s", "--stall-timeout", "300ms", "s3://"+st.Bucket())
			read := func(rel string) ([]byte, error) { return os.ReadFile(filepath.Join(m.dir, rel)) }
			for rel, want := range files {
				if b, err := read(rel); err != nil || !bytes.Equal(b, want) {
					t.Fatalf("%s before the outage: %v", rel, err)
				}
			}
			fp.SetDown(true)
			time.Sleep(2*ttl + 500*time.Millisecond) // the listings and the kernel's entries expire
			for rel, want := range files {
				b, err := read(rel)
				switch {
				case tc.readsOn && (err != nil || !bytes.Equal(b, want)):
					t.Fatalf("%s in the outage, past --metadata-ttl: %d bytes, %v; want the cached file", rel, len(b), err)
				case !tc.readsOn && err == nil:
					t.Fatalf("%s in the outage with --outage-grace 0: read, want the lookup to fail", rel)
				}
			}
			fp.SetDown(false)
			added := []byte("added during the outage")
			testenv.Put(t, st, "c00/added.jpg", added)
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				b, err := read("c00/added.jpg")
				if err == nil && bytes.Equal(b, added) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the object added during the outage, 15 s after it: %v", err)
				}
			}
		})
	}
}

// readOnce reads the start of a file with plain system calls, which return
// EINTR to the caller where os.File would retry it for ever.
func readOnce(path string) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	_, err = syscall.Read(fd, make([]byte, 4096))
	return err
}

// TestChangesUnderReaders: an object overwritten or deleted while a handle
// has it open never yields bytes of two versions: old bytes or
// ESTALE/EIO; after the TTL new opens see the new state.
func TestChangesUnderReaders(t *testing.T) {
	st := srv.NewBucket(t)
	v1 := bytes.Repeat([]byte("1"), 6<<20)
	v2 := bytes.Repeat([]byte("2"), 5<<20)
	testenv.Put(t, st, "over", v1)
	testenv.Put(t, st, "gone", v1)
	const ttl = time.Second
	m := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "--metadata-ttl", ttl.String(), "--block-size", "1MiB",
		"--prefetch", "off", "--ram-cache-size", "0", "s3://"+st.Bucket())
	open := func(name string) *os.File {
		f, err := os.Open(filepath.Join(m.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4096)
		if _, err := f.ReadAt(head, 0); err != nil {
			t.Fatal(err)
		}
		return f
	}
	fo, fg := open("over"), open("gone")
	defer fo.Close()
	defer fg.Close()
	testenv.Put(t, st, "over", v2)
	if err := st.Remove(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{fo, fg} {
		readOldOrStale(t, f, 5<<20, v1)
	}
	time.Sleep(ttl + 300*time.Millisecond)
	if b, err := os.ReadFile(filepath.Join(m.dir, "over")); err != nil || !bytes.Equal(b, v2) {
		t.Fatalf("new open after the TTL: %d bytes, %v; want the new version", len(b), err)
	}
	if _, err := os.Open(filepath.Join(m.dir, "gone")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("open of a deleted object after the TTL: %v, want ENOENT", err)
	}
}

// readOldOrStale reads 1 MiB at off of f, a handle opened on the version
// old of an object that changed since: it wants old's bytes, or ESTALE or
// EIO, never another version's bytes.
func readOldOrStale(t *testing.T, f *os.File, off int64, old []byte) {
	t.Helper()
	buf := make([]byte, 1<<20)
	n, err := f.ReadAt(buf, off)
	switch {
	case err == nil || n > 0:
		if !bytes.Equal(buf[:n], old[off:off+int64(n)]) {
			t.Fatalf("%s: open handle returned bytes of another version", f.Name())
		}
	case !errors.Is(err, syscall.ESTALE) && !errors.Is(err, syscall.EIO):
		t.Fatalf("%s: read after change: %v, want ESTALE or EIO", f.Name(), err)
	}
}

// TestServerWithoutETags: with a server that lists and answers no ETag,
// an object overwritten at the same size is still a new version: new opens
// after the TTL read it whole (the caches do not hand out the old one's
// blocks), and a handle open on the old one never mixes in the new bytes.
func TestServerWithoutETags(t *testing.T) {
	st := srv.NewBucket(t)
	v1 := bytes.Repeat([]byte("1"), 3<<20)
	v2 := bytes.Repeat([]byte("2"), 3<<20)
	testenv.Put(t, st, "whole", v1)
	testenv.Put(t, st, "part", v1)
	fp := faultProxy(t)
	fp.NoETags.Store(true)
	const ttl = time.Second
	m := startMount(t, t.TempDir(), "--endpoint", fp.Endpoint, "--metadata-ttl", ttl.String(), "--block-size", "1MiB",
		"--prefetch", "off", "--cache-dir", t.TempDir(), "s3://"+st.Bucket())
	if b, err := os.ReadFile(filepath.Join(m.dir, "whole")); err != nil || !bytes.Equal(b, v1) {
		t.Fatalf("first read: %d bytes, %v", len(b), err)
	}
	f, err := os.Open(filepath.Join(m.dir, "part"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a new second: all the server tells of a version
	testenv.Put(t, st, "whole", v2)
	testenv.Put(t, st, "part", v2)
	readOldOrStale(t, f, 2<<20, v1)
	time.Sleep(ttl + 300*time.Millisecond)
	for _, name := range []string{"whole", "part"} {
		if b, err := os.ReadFile(filepath.Join(m.dir, name)); err != nil || !bytes.Equal(b, v2) {
			t.Fatalf("%s after the TTL: %d bytes, %v, new version %v; want the new version", name, len(b), err, bytes.Equal(b, v2))
		}
	}
}

// TestKillAndRestart: SIGKILL the binary during warm and during reads; the
// next run with the same cache dir cleans the stale mount, keeps good
// entries, serves exact bytes, and warm resumes.
func TestKillAndRestart(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "k/", 250, 40<<10)
	cacheDir := t.TempDir()
	env := append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
	src := "s3://" + st.Bucket() + "/k"

	warm := exec.Command(bin, "warm", "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--concurrency", "4", "-q", src)
	warm.Env = env
	if err := warm.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { n, _ := countBlocks(cacheDir); return n >= 40 })
	warm.Process.Kill()
	warm.Wait()

	mnt := t.TempDir()
	mount, _ := mountProcess(t, "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, src, mnt)
	var read atomic.Int64
	stopReads := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := 0
			for rel := range files {
				if i++; i%4 != w {
					continue
				}
				select {
				case <-stopReads:
					return
				default:
				}
				if _, err := os.ReadFile(filepath.Join(mnt, rel)); err == nil {
					read.Add(1)
				}
			}
		}()
	}
	waitFor(t, 20*time.Second, func() bool { return read.Load() >= 30 })
	mount.Process.Kill() // during reads
	mount.Wait()
	close(stopReads)
	wg.Wait()

	again := exec.Command(bin, "warm", "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "-q", src)
	again.Env = env
	out, err := again.CombinedOutput()
	if err != nil {
		t.Fatalf("warm after kills: %v\n%s", err, out)
	}
	if gets := logInt(t, string(out), "gets"); gets >= int64(len(files)) {
		t.Fatalf("resumed warm fetched %d of %d files: nothing was kept", gets, len(files))
	}
	m := startMount(t, mnt, "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--ram-cache-size", "0", src)
	readAllFiles(t, m.dir, files)
	if s := m.stats(t); s["store_requests_get_total"] != 0 || s["cache_corruptions_total"] != 0 {
		t.Fatalf("after restart: %d GETs, %d corrupt blocks; want 0 and 0", s["store_requests_get_total"], s["cache_corruptions_total"])
	}
}

// TestManyOpenFilesMemory: 1,000 files open at once, 64 concurrent
// readers: the heap stays within the configured budgets.
func TestManyOpenFilesMemory(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "", 1000, 200<<10)
	const ramCache = 64 << 20
	m := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "--prefetch-memory", "64MiB", "--ram-cache-size", "64MiB",
		"--block-size", "128KiB", "s3://"+st.Bucket())
	peak := sampleMemory(t)
	var fds []*os.File
	for rel := range files {
		f, err := os.Open(filepath.Join(m.dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, f)
	}
	defer func() {
		for _, f := range fds {
			f.Close()
		}
	}()
	g := new(errgroup.Group)
	g.SetLimit(64)
	for _, f := range fds {
		g.Go(func() error {
			buf := make([]byte, 64<<10)
			for off := int64(0); ; off += int64(len(buf)) {
				n, err := f.ReadAt(buf, off)
				if n < len(buf) || err != nil {
					return nil
				}
			}
		})
	}
	g.Wait()
	grew := peak()
	limit := int64(ramCache + 64<<20) // the prefetch memory takes its room from the RAM cache
	t.Logf("live heap + RAM file grew by %d MiB at most with 1,000 open files and 64 readers; RAM cache %d MiB",
		grew>>20, ramCache>>20)
	if grew > limit {
		t.Fatalf("live heap + RAM file grew %d MiB, above the RAM cache + 64 MiB = %d MiB", grew>>20, limit>>20)
	}
}

// TestStreamingMemory: files many times the RAM cache, read whole by
// several readers at once through a mount with a disk cache, keep the live
// heap within the RAM cache, the disk cache's write queue (64 MiB) and a
// margin: the blocks read ahead take their room from the RAM cache (the
// default --prefetch-memory, 1 GiB, would not), and the blocks the RAM
// cache gives up wait for the disk in a queue bounded in bytes. Before
// both, this held hundreds of MiB more.
func TestStreamingMemory(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "", 6, 64<<20)
	const ramCache = 48 << 20
	m := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "--ram-cache-size", "48MiB", "--cache-dir", t.TempDir(),
		"--block-size", "1MiB", "s3://"+st.Bucket())
	peak := sampleMemory(t)
	g := new(errgroup.Group)
	for rel, want := range files {
		g.Go(func() error { // in pieces: a whole file would be more than the bound
			f, err := os.Open(filepath.Join(m.dir, rel))
			if err != nil {
				return err
			}
			defer f.Close()
			buf := make([]byte, 256<<10)
			for off := 0; ; {
				n, err := io.ReadFull(f, buf)
				if !bytes.Equal(buf[:n], want[off:min(off+n, len(want))]) {
					return fmt.Errorf("%s: wrong bytes at %d", rel, off)
				}
				if off += n; err != nil {
					if off != len(want) {
						return fmt.Errorf("%s: %d of %d bytes: %v", rel, off, len(want), err)
					}
					return nil
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	grew := peak()
	limit := int64(ramCache + cache.DefaultQueueBytes + 48<<20)
	t.Logf("live heap + RAM file grew by %d MiB at most streaming %d files through a %d MiB RAM cache", grew>>20, len(files), ramCache>>20)
	if grew > limit {
		t.Fatalf("live heap + RAM file grew %d MiB, above the RAM cache + write queue + 48 MiB = %d MiB", grew>>20, limit>>20)
	}
}

// sampleMemory samples this process's live heap (collecting first: live
// bytes, not the collector's slack) and the memory of its RAM caches'
// memory files every 50 ms from now on; the returned function stops it and
// says how far the sum grew above where it started (the test's own copy of
// the data is in both).
func sampleMemory(t *testing.T) func() int64 {
	t.Helper()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := before.HeapAlloc + uint64(ramFileBytes())
	var peak atomic.Uint64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				runtime.GC()
				runtime.ReadMemStats(&ms)
				if n := ms.HeapAlloc + uint64(ramFileBytes()); n > peak.Load() {
					peak.Store(n)
				}
			}
		}
	}()
	var once sync.Once
	end := func() int64 {
		once.Do(func() { close(stop); <-stopped })
		return int64(peak.Load()) - int64(start)
	}
	t.Cleanup(func() { end() })
	return end
}

// ramFileBytes returns the memory the RAM caches' memory files of this
// process hold (cache.RAM keeps its blocks there, outside the heap).
func ramFileBytes() int64 {
	ents, _ := os.ReadDir("/proc/self/fd")
	var n int64
	for _, e := range ents {
		p := filepath.Join("/proc/self/fd", e.Name())
		if l, err := os.Readlink(p); err != nil || !strings.HasPrefix(l, "/memfd:dataccel-ram") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// TestSecretNeverShown: the secret key never appears in logs (debug level,
// errors included), metrics, or the process's argv.
func TestSecretNeverShown(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "", 20, 4<<10)
	port, _ := testenv.FreePort()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	mnt := t.TempDir()
	cmd, logs := mountProcess(t, "--log-level", "debug", "--endpoint", srv.Endpoint, "--http", addr, "s3://"+st.Bucket(), mnt)
	readAllFiles(t, mnt, files)
	os.ReadFile(filepath.Join(mnt, "no-such-file"))
	argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
	metrics := httpGet(t, "http://"+addr+"/metrics", 200)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	// a failing start logs an error too: bad credentials
	bad := exec.Command(bin, "mount", "--log-level", "debug", "--endpoint", srv.Endpoint, "s3://"+st.Bucket(), t.TempDir())
	bad.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY=wrong-"+srv.SecretKey)
	badOut, _ := bad.CombinedOutput()
	for name, text := range map[string]string{"logs": logs.String(), "argv": string(argv), "metrics": metrics, "error output": string(badOut)} {
		if strings.Contains(text, srv.SecretKey) {
			t.Errorf("the secret key shows in %s", name)
		}
	}
	if !strings.Contains(string(badOut), "denied") {
		t.Fatalf("bad credentials: %s", badOut)
	}
}

// faultProxy starts a fault proxy in front of the test server, closed
// when the test ends.
func faultProxy(t *testing.T) *testenv.FaultProxy {
	t.Helper()
	fp, err := testenv.StartFaultProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	return fp
}

// TestCloseWithin: a close that hangs (the disk cache's, on a hung disk)
// holds the exit for its bound, not for good; one that ends in time
// returns its own error.
func TestCloseWithin(t *testing.T) {
	hung := make(chan struct{})
	defer close(hung)
	start := time.Now()
	if err := closeWithin(func() error { <-hung; return nil }, 100*time.Millisecond); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("a hung close: %v after %s, want an error after 100ms", err, time.Since(start))
	}
	want := errors.New("injected")
	if err := closeWithin(func() error { return want }, time.Minute); err != want {
		t.Fatalf("a close that failed at once: %v, want %v", err, want)
	}
}
