package cache

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// blockFiles lists the files in the fan-out subdirectories of dir (blocks
// and temp files) with their sizes.
func blockFiles(t testing.TB, dir string) map[string]int64 {
	t.Helper()
	files := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() && filepath.Dir(p) != dir {
			fi, err := e.Info()
			if err != nil {
				return err
			}
			files[p] = fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func fillDisk(d *Disk, n int) []Key {
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = testKey(keyName(i), int64(i))
		d.Put(keys[i], blockFor(keys[i], sizeFor(keys[i])))
	}
	d.Flush()
	return keys
}

func TestDiskRestart(t *testing.T) {
	dir := t.TempDir()
	opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, QueueLen: 512, MinFreeFraction: -1}
	d := openDisk(t, opts)
	keys := fillDisk(d, 200)
	if w := d.stats.DiskWrites.Load(); w != 200 {
		t.Fatalf("wrote %d blocks, want 200", w)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	stats := new(Stats)
	opts.Stats = stats
	d2 := openDisk(t, opts)
	if n := stats.DiskEntries.Load(); n != 200 {
		t.Fatalf("reopened index has %d entries, want 200", n)
	}
	for _, k := range keys {
		b, ok := d2.Get(k)
		if !ok {
			t.Fatalf("%v not served after restart", k)
		}
		checkExact(t, k, b, sizeFor(k))
	}
	if s := stats.Snapshot(); s.DiskHits != 200 || s.DiskWrites != 0 || s.DiskCorruptions != 0 {
		t.Fatalf("after restart: %+v", s)
	}
}

func TestDiskRefusesForeignAndBusyDirs(t *testing.T) {
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDisk(DiskOptions{Dir: foreign, MaxBytes: 1 << 20}); err == nil {
		t.Fatal("NewDisk used a non-empty directory without the marker")
	}
	if err := PurgeDir(foreign); err == nil {
		t.Fatal("PurgeDir accepted a directory without the marker")
	}
	if _, err := os.Stat(filepath.Join(foreign, "notes.txt")); err != nil {
		t.Fatalf("foreign file touched: %v", err)
	}
	dir := t.TempDir()
	openDisk(t, DiskOptions{Dir: dir, MaxBytes: 1 << 20})
	if d, err := NewDisk(DiskOptions{Dir: dir, MaxBytes: 1 << 20}); err == nil {
		d.Close()
		t.Fatal("a second Disk opened a directory in use")
	}
	if err := PurgeDir(dir); err == nil {
		t.Fatal("PurgeDir purged a directory in use")
	}
	for _, bad := range []DiskOptions{{Dir: "", MaxBytes: 1}, {Dir: dir, MaxBytes: 0}, {Dir: dir, MaxBytes: 1, MinFreeFraction: 1}} {
		if _, err := NewDisk(bad); err == nil {
			t.Errorf("NewDisk(%+v) accepted bad options", bad)
		}
	}
}

func TestDiskCorruption(t *testing.T) {
	cases := []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"magic", func(b []byte) []byte { b[0] ^= 0xff; return b }},
		{"rawLength", func(b []byte) []byte { b[9] ^= 0x01; return b }},
		{"key", func(b []byte) []byte { b[fixedHeader+2] ^= 0x20; return b }},
		{"payloadMiddle", func(b []byte) []byte { b[len(b)/2+40] ^= 0x01; return b }},
		{"payloadLast", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }},
		{"zeroed", func(b []byte) []byte { return make([]byte, len(b)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, MinFreeFraction: -1}
			d := openDisk(t, opts)
			// Blocks 2 and 3: one compressible, one random.
			keys := []Key{testKey("a", 2), testKey("b", 3)}
			for _, k := range keys {
				d.Put(k, blockFor(k, 20000))
			}
			d.Close()
			files := blockFiles(t, dir)
			if len(files) != 2 {
				t.Fatalf("%d block files, want 2", len(files))
			}
			for p := range files {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, tc.damage(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			stats := new(Stats)
			opts.Stats = stats
			d2 := openDisk(t, opts)
			for _, k := range keys {
				if b, ok := d2.Get(k); ok {
					t.Fatalf("corrupt block %v served (%d bytes)", k, len(b))
				}
			}
			if c := stats.DiskCorruptions.Load(); c != 2 {
				t.Fatalf("corruption counter %d, want 2", c)
			}
			if left := blockFiles(t, dir); len(left) != 0 {
				t.Fatalf("corrupt files not removed: %v", left)
			}
			// A re-put after the corruption is served again.
			d2.Put(keys[0], blockFor(keys[0], 20000))
			d2.Flush()
			if b, ok := d2.Get(keys[0]); !ok || !bytes.Equal(b, blockFor(keys[0], 20000)) {
				t.Fatal("re-put block not served")
			}
		})
	}
}

func TestDiskBound(t *testing.T) {
	const maxBytes = 256 << 10
	dir := t.TempDir()
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: maxBytes, Compress: false, QueueLen: 1024, MinFreeFraction: -1, Stats: stats})
	const n, size = 100, 16 << 10
	var keys []Key
	for i := 0; i < n; i++ {
		k := testKey(keyName(i), 1) // odd block: random bytes
		keys = append(keys, k)
		// Interleave lookups so the policy's clock runs and stale blocks
		// can be evicted.
		d.Get(k)
		d.Put(k, blockFor(k, size))
		if i%10 == 0 {
			d.Flush()
		}
	}
	d.Flush()
	var total int64
	for _, s := range blockFiles(t, dir) {
		total += s
	}
	if total > maxBytes+size+1024 {
		t.Fatalf("%d bytes on disk, bound %d + one block", total, maxBytes)
	}
	if got := stats.DiskBytes.Load(); got != total {
		t.Fatalf("DiskBytes gauge %d, files hold %d", got, total)
	}
	served := 0
	for _, k := range keys {
		if b, ok := d.Get(k); ok {
			served++
			checkExact(t, k, b, size)
		}
	}
	if served == 0 || served == n {
		t.Fatalf("served %d of %d blocks, want some but not all", served, n)
	}
	if stats.DiskRejected.Load() == 0 {
		t.Fatal("no admission was rejected although the data is 6x the bound")
	}
}

func TestDiskCompression(t *testing.T) {
	dir := t.TempDir()
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, Stats: stats, MinFreeFraction: -1})
	text, random := testKey("text", 0), testKey("random", 1)
	const n = 256 << 10
	d.Put(text, blockFor(text, n))
	d.Put(random, blockFor(random, n))
	d.Flush()
	sizes := map[uint64]int64{}
	for p, s := range blockFiles(t, dir) {
		id, _, _ := parseBlockName(filepath.Base(p))
		sizes[id] = s
	}
	if s := sizes[keyHash(text)]; s == 0 || s > n/2 {
		t.Errorf("compressible block stored in %d bytes, want < %d", s, n/2)
	}
	if s := sizes[keyHash(random)]; s < n {
		t.Errorf("random block stored in %d bytes, want raw (>= %d)", s, n)
	}
	for _, k := range []Key{text, random} {
		b, ok := d.Get(k)
		if !ok {
			t.Fatalf("%v missed", k)
		}
		checkExact(t, k, b, n)
	}
	if stats.DiskSavedBytes.Load() < n/2 {
		t.Errorf("saved bytes %d, want >= %d", stats.DiskSavedBytes.Load(), n/2)
	}
	st, err := StatDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 2 || st.Compressed != 1 || st.RawBytes != 2*n || st.SavedBytes < n/2 {
		t.Fatalf("StatDir = %+v", st)
	}
	d.Close()
	if err := PurgeDir(dir); err != nil {
		t.Fatal(err)
	}
	if left := blockFiles(t, dir); len(left) != 0 {
		t.Fatalf("PurgeDir left %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil {
		t.Fatalf("PurgeDir removed the marker: %v", err)
	}
	if st, err := StatDir(dir); err != nil || st.Entries != 0 {
		t.Fatalf("StatDir after purge = %+v, %v", st, err)
	}
}

func TestDiskDisabledOff(t *testing.T) {
	// Compression off stores compressible data raw.
	dir := t.TempDir()
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1})
	k := testKey("text", 0)
	d.Put(k, blockFor(k, 64<<10))
	d.Flush()
	for _, s := range blockFiles(t, dir) {
		if s < 64<<10 {
			t.Fatalf("block stored in %d bytes with compression off", s)
		}
	}
}

func TestDiskQueueFullDrops(t *testing.T) {
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 1 << 30, QueueLen: 1, Writers: 1, Stats: stats, Sync: true, MinFreeFraction: -1})
	const n = 200
	for i := 0; i < n; i++ {
		k := testKey(keyName(i), 1)
		d.Put(k, blockFor(k, 64<<10))
	}
	d.Flush()
	s := stats.Snapshot()
	if s.DiskDropped == 0 {
		t.Fatal("no write dropped with a queue of one")
	}
	if s.DiskDropped+s.DiskWrites != n {
		t.Fatalf("dropped %d + written %d != %d puts", s.DiskDropped, s.DiskWrites, n)
	}
}

func TestDiskUnwritableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plainfile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var wc warnCounter
	stats := new(Stats)
	d, err := NewDisk(DiskOptions{Dir: filepath.Join(file, "cache"), MaxBytes: 1 << 20, Logger: slog.New(&wc), Stats: stats})
	if err != nil {
		t.Fatalf("NewDisk under a file failed instead of degrading: %v", err)
	}
	defer d.Close()
	k := testKey("x", 0)
	for i := 0; i < 3; i++ {
		d.Put(k, blockFor(k, 1000))
		if _, ok := d.Get(k); ok {
			t.Fatal("disabled disk hit")
		}
	}
	d.Flush()
	if !d.Disabled() || stats.DiskErrors.Load() == 0 || wc.warns.Load() != 1 {
		t.Fatalf("disabled=%v errors=%d warnings=%d, want true >0 1", d.Disabled(), stats.DiskErrors.Load(), wc.warns.Load())
	}
}

// mountTmpfs mounts a small tmpfs at a new directory, or skips if not root.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

func TestDiskFullAndReadOnly(t *testing.T) {
	cases := []struct {
		name  string
		after func(t *testing.T, dir string) // after open, before the writes
	}{
		{"ENOSPC", func(*testing.T, string) {}},
		{"EROFS", func(t *testing.T, dir string) {
			if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
				t.Skipf("cannot remount read-only: %v %s", err, out)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := mountTmpfs(t, "1m")
			var wc warnCounter
			stats := new(Stats)
			// The free-space floor is off so the file system really fills up.
			d, err := NewDisk(DiskOptions{Dir: filepath.Join(dir, "c"), MaxBytes: 1 << 30, MinFreeFraction: -1,
				QueueLen: 256, Logger: slog.New(&wc), Stats: stats})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			tc.after(t, dir)
			var keys []Key
			for i := 0; i < 40; i++ {
				k := testKey(keyName(i), 1)
				keys = append(keys, k)
				d.Put(k, blockFor(k, 64<<10))
			}
			d.Flush()
			for _, k := range keys {
				if b, ok := d.Get(k); ok {
					checkExact(t, k, b, 64<<10)
				}
			}
			if !d.Disabled() || stats.DiskErrors.Load() == 0 || wc.warns.Load() != 1 {
				t.Fatalf("disabled=%v errors=%d warnings=%d, want true >0 1", d.Disabled(), stats.DiskErrors.Load(), wc.warns.Load())
			}
			if tc.name == "EROFS" {
				return
			}
			// No temp file of the failed write is left behind.
			for p := range blockFiles(t, dir) {
				if isTempName(filepath.Base(p)) {
					t.Fatalf("temp file left: %s", p)
				}
			}
		})
	}
}

// The free-space floor stops writes before the file system is full, with no
// error.
func TestDiskFreeSpaceFloor(t *testing.T) {
	dir := mountTmpfs(t, "2m")
	stats := new(Stats)
	var wc warnCounter
	d, err := NewDisk(DiskOptions{Dir: filepath.Join(dir, "c"), MaxBytes: 1 << 30, MinFreeFraction: 0.5,
		QueueLen: 256, Logger: slog.New(&wc), Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for i := 0; i < 40; i++ {
		k := testKey(keyName(i), 1)
		d.Put(k, blockFor(k, 64<<10))
	}
	d.Flush()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := float64(st.Bavail) / float64(st.Blocks)
	if free < 0.5-float64(70<<10)/float64(2<<20) {
		t.Fatalf("free fraction %.2f below the 0.5 floor by more than a block", free)
	}
	if stats.DiskErrors.Load() != 0 || wc.warns.Load() != 0 || stats.DiskRejected.Load() == 0 {
		t.Fatalf("errors=%d warnings=%d rejected=%d, want 0 0 >0", stats.DiskErrors.Load(), wc.warns.Load(), stats.DiskRejected.Load())
	}
}

const (
	crashEnv      = "DATACCEL_CACHE_CRASH_DIR"
	crashRoundEnv = "DATACCEL_CACHE_CRASH_ROUND"
)

// crashKeys is the key space the crash child writes.
const crashKeys = 300

// crashKey is key i of crash round r; each round uses a new ETag so that
// every child has new blocks to write.
func crashKey(r, i int) Key {
	return Key{Object: keyName(i), ETag: "e" + strconv.Itoa(r), Block: int64(i)}
}

func crashSize(k Key) int {
	if k.Block%7 == 0 {
		return 256 << 10 // large blocks make a kill during a write likely
	}
	return sizeFor(k)
}

// TestHelperProcess is the crash child: it writes blocks until killed.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("helper for TestDiskCrash")
	}
	d, err := NewDisk(DiskOptions{Dir: dir, MaxBytes: 2 << 20, Compress: true, QueueLen: 8, MinFreeFraction: -1, Sync: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		os.Exit(2)
	}
	round, _ := strconv.Atoi(os.Getenv(crashRoundEnv))
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 3))
	for {
		k := crashKey(round, rng.IntN(crashKeys))
		if b, ok := d.Get(k); ok && !bytes.Equal(b, blockFor(k, crashSize(k))) {
			os.Exit(3) // wrong bytes served inside the child
		}
		d.Put(k, blockFor(k, crashSize(k)))
	}
}

func TestDiskCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(42, 42))
	served, tempsSeen := 0, 0
	for round := 0; round < 6; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir, crashRoundEnv+"="+strconv.Itoa(round))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(150+rng.IntN(250)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v before the kill", round, err)
		}
		for p := range blockFiles(t, dir) {
			if isTempName(filepath.Base(p)) {
				tempsSeen++
			}
		}
		stats := new(Stats)
		d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 2 << 20, MinFreeFraction: -1, Stats: stats})
		for p := range blockFiles(t, dir) {
			if strings.HasPrefix(filepath.Base(p), tempPrefix) {
				t.Fatalf("round %d: temp file survived the reopen: %s", round, p)
			}
		}
		for r := 0; r <= round; r++ {
			for i := 0; i < crashKeys; i++ {
				k := crashKey(r, i)
				if b, ok := d.Get(k); ok {
					served++
					checkExact(t, k, b, crashSize(k))
				}
			}
		}
		if c := stats.DiskCorruptions.Load(); c != 0 {
			t.Fatalf("round %d: %d corrupt blocks after SIGKILL", round, c)
		}
		d.Close()
	}
	if served == 0 {
		t.Fatal("no block survived any crash: the test checks nothing")
	}
	t.Logf("%d blocks served byte-exact across 6 SIGKILLs; %d unfinished temp files found and removed", served, tempsSeen)
}

// Many entries reopen from names alone.
func TestDiskReopenManyEntries(t *testing.T) {
	dir := t.TempDir()
	const n = 3000
	makeFakeCache(t, dir, n)
	stats := new(Stats)
	start := time.Now()
	openDisk(t, DiskOptions{Dir: dir, MaxBytes: 1 << 40, Stats: stats, MinFreeFraction: -1})
	t.Logf("opened %d entries in %v", n, time.Since(start))
	if got := stats.DiskEntries.Load(); got != n {
		t.Fatalf("%d entries loaded, want %d", got, n)
	}
}

// makeFakeCache creates a cache dir with n empty files named like blocks
// (open reads names only), plus a temp file that open must remove.
func makeFakeCache(t testing.TB, dir string, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, MarkerName), []byte(markerContent), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 256; i++ {
		if err := os.Mkdir(filepath.Join(dir, subdirName(uint64(i)<<56)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		id := keyHash(testKey(strconv.Itoa(i), 0))
		f, err := os.Create(filepath.Join(dir, subdirName(id), blockName(id, 100<<10)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	tmp := filepath.Join(dir, "00", tempPrefix+"x")
	if err := os.WriteFile(tmp, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// RAM hits reach the disk policy through Tiered, so blocks hot in RAM are
// not evicted from disk as unused.
func TestTieredTouchesDisk(t *testing.T) {
	r, err := NewRAM(64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, MinFreeFraction: -1})
	tt := NewTiered(r, d)
	k := testKey("hot", 0)
	tt.Put(k, blockFor(k, 5000))
	tt.Flush()
	d.mu.Lock()
	before := d.policy.clock
	d.mu.Unlock()
	if _, ok := tt.Get(k); !ok {
		t.Fatal("miss")
	}
	d.mu.Lock()
	after := d.policy.clock
	d.mu.Unlock()
	if after != before+1 {
		t.Fatalf("disk policy clock %d -> %d on a RAM hit, want +1", before, after)
	}
	// A disk hit is promoted to RAM.
	k2 := testKey("diskonly", 0)
	d.Put(k2, blockFor(k2, 5000))
	d.Flush()
	if _, ok := tt.Get(k2); !ok {
		t.Fatal("disk block missed through Tiered")
	}
	r.Flush()
	if b, ok := r.Get(k2); !ok {
		t.Fatal("disk hit not promoted to RAM")
	} else {
		checkExact(t, k2, b, 5000)
	}
}

// The disk tier wires the policy in: shuffled epochs over a dataset 3x the
// bound keep hitting on about a third from the second epoch on, also across
// a restart (restored blocks are protected like resident ones), whether the
// policy state was saved (clean Close) or lost (crash).
func TestDiskShuffledEpochs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dropState bool
	}{{"cleanRestart", false}, {"stateLost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const n, size, cacheBlocks = 150, 8 << 10, 50
			k0 := testKey(keyName(0), 1)
			hl, _, _ := new(compressor).encodeBlock(k0, nil, false)
			opts := DiskOptions{Dir: t.TempDir(), MaxBytes: cacheBlocks * int64(size+len(hl)), MinFreeFraction: -1}
			d := openDisk(t, opts)
			rng := rand.New(rand.NewPCG(5, 5))
			order := rng.Perm(n)
			for epoch := 1; epoch <= 5; epoch++ {
				if epoch == 3 {
					d.Close()
					st := filepath.Join(opts.Dir, StateName)
					if _, err := os.Stat(st); err != nil {
						t.Fatalf("no policy state after Close: %v", err)
					}
					if tc.dropState {
						os.Remove(st)
					}
					d = openDisk(t, opts)
				}
				rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
				hits := 0
				for _, i := range order {
					k := testKey(keyName(i), 1)
					if b, ok := d.Get(k); ok {
						hits++
						checkExact(t, k, b, size)
						continue
					}
					d.Put(k, blockFor(k, size))
					d.Flush()
				}
				ratio := float64(hits) / n
				t.Logf("epoch %d: hit ratio %.3f", epoch, ratio)
				if epoch > 1 && ratio < 0.9*cacheBlocks/n {
					t.Errorf("epoch %d: hit ratio %.3f < 0.9 x %.3f", epoch, ratio, float64(cacheBlocks)/n)
				}
			}
		})
	}
}
