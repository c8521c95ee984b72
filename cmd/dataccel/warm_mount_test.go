package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/fuse"
)

// TestMountWarmerPasses runs the passes of a warm through a mount against a
// stand-in for the mount's counters: it reads the files again, past the page
// cache, only while the disk cache dropped writes, and at most three times.
func TestMountWarmerPasses(t *testing.T) {
	tests := []struct {
		name          string
		dropsPer      []int64 // writes the disk cache drops during pass i
		noStats       bool
		failing       string // a file whose reads fail
		failingDirect bool   // reads past the page cache fail
		wantPasses    int
		wantWarn      string
		wantErr       string
	}{
		{name: "no drops", dropsPer: []int64{0}, wantPasses: 1},
		{name: "drops once", dropsPer: []int64{5, 0}, wantPasses: 2},
		{name: "drops twice", dropsPer: []int64{5, 2, 0}, wantPasses: 3},
		{name: "drops persist", dropsPer: []int64{5, 2, 1}, wantPasses: 3, wantWarn: "still dropped writes"},
		{name: "not a dataccel mount", noStats: true, dropsPer: []int64{5}, wantPasses: 1},
		{name: "a file fails", dropsPer: []int64{0}, failing: "f3", wantPasses: 1, wantErr: "1 files failed to warm"},
		{name: "a file fails, drops", dropsPer: []int64{5, 0}, failing: "f3", wantPasses: 2, wantWarn: "past the page cache failed", wantErr: "1 files failed to warm"},
		{name: "direct reads fail", dropsPer: []int64{5, 0}, failingDirect: true, wantPasses: 2, wantWarn: "past the page cache failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stats := filepath.Join(dir, "stats")
			var dropped int64
			writeStats := func() {
				if err := os.WriteFile(stats, fmt.Appendf(nil, `{"cache_disk_dropped_total": %d, "cache_ram_bytes": 7}`, dropped), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			writeStats()
			var files []warmFile
			for i := range 20 {
				files = append(files, warmFile{fmt.Sprintf("f%d", i), int64(i) << 20})
			}
			var mu sync.Mutex
			reads := map[bool]map[string]int{false: {}, true: {}} // by direct
			pass, total := 0, 0
			var logs bytes.Buffer
			w := mountWarmer{
				logger: slog.New(slog.NewTextHandler(&logs, nil)), concurrency: 8, quiet: true,
				stats: stats,
				read: func(p string, direct bool, buf []byte) (int64, error) {
					mu.Lock()
					defer mu.Unlock()
					if total%len(files) == 0 {
						// the first read of a pass: its drops happen now
						if pass < len(tc.dropsPer) {
							dropped += tc.dropsPer[pass]
							writeStats()
						}
						pass++
					}
					total++
					reads[direct][p]++
					if len(buf) != directReadBuf {
						t.Errorf("read buffer of %d bytes", len(buf))
					}
					if p == tc.failing || direct && tc.failingDirect {
						return 0, errors.New("injected")
					}
					return 1, nil
				},
			}
			if tc.noStats {
				w.stats = ""
			}
			err := w.run(context.Background(), files)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("run: %v, want error %q", err, tc.wantErr)
			}
			// Pass 1 reads through the page cache, the others past it.
			if len(reads[false]) != len(files) {
				t.Fatalf("first pass read %d of %d files", len(reads[false]), len(files))
			}
			wantDirect := 0
			if tc.wantPasses > 1 {
				wantDirect = len(files)
			}
			if len(reads[true]) != wantDirect {
				t.Fatalf("%d files read past the page cache, want %d", len(reads[true]), wantDirect)
			}
			for p, n := range reads[true] {
				if n != tc.wantPasses-1 {
					t.Fatalf("%s read %d times past the page cache, want %d (passes %d)", p, n, tc.wantPasses-1, tc.wantPasses)
				}
			}
			if got := strings.Contains(logs.String(), "level=WARN"); got != (tc.wantWarn != "") || !strings.Contains(logs.String(), tc.wantWarn) {
				t.Fatalf("warning %q wanted, logs:\n%s", tc.wantWarn, logs.String())
			}
		})
	}
}

// TestMountWarmerConcurrency: a large file takes up to maxFileSlots of the
// concurrency slots, so fewer large files than small ones are read at once.
func TestMountWarmerConcurrency(t *testing.T) {
	for _, tc := range []struct {
		size    int64
		slots   int
		wantMax int
	}{
		{size: 100 << 10, slots: 16, wantMax: 16},
		{size: 4 << 20, slots: 16, wantMax: 4},
		{size: 1 << 30, slots: 16, wantMax: 2},
		{size: 1 << 30, slots: 4, wantMax: 1}, // a file never waits for more slots than there are
	} {
		t.Run(fmt.Sprintf("%d-%d", tc.size, tc.slots), func(t *testing.T) {
			var mu sync.Mutex
			cur, peak := 0, 0
			var files []warmFile
			for i := range 40 {
				files = append(files, warmFile{fmt.Sprint(i), tc.size})
			}
			w := mountWarmer{logger: slog.New(slog.DiscardHandler), concurrency: tc.slots, quiet: true,
				read: func(string, bool, []byte) (int64, error) {
					mu.Lock()
					cur++
					peak = max(peak, cur)
					mu.Unlock()
					time.Sleep(2 * time.Millisecond) // long enough for the others to start
					mu.Lock()
					cur--
					mu.Unlock()
					return 0, nil
				}}
			if err := w.run(context.Background(), files); err != nil {
				t.Fatal(err)
			}
			if peak > tc.wantMax || peak < 1 {
				t.Fatalf("%d files of %d bytes read at once with %d slots, want at most %d", peak, tc.size, tc.slots, tc.wantMax)
			}
		})
	}
}

// statsFreshness is how old a snapshot MOUNT/.dataccel/stats may serve.
const statsFreshness = 200 * time.Millisecond

// TestWarmThroughMount warms a real mount whose RAM cache is off, with small
// files and files of several blocks: every block lands in the disk cache,
// and a mount on that cache reads everything with no GET.
func TestWarmThroughMount(t *testing.T) {
	st := srv.NewBucket(t)
	files := dataset(t, st, "w/", 80, 20<<10)
	for rel, b := range dataset(t, st, "w/big/", 4, 4<<20) {
		files["big/"+rel] = b
	}
	const bs = 256 << 10
	blocks := 0
	for _, b := range files {
		blocks += (len(b) + bs - 1) / bs
	}
	cacheDir := t.TempDir()
	args := []string{"--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "--ram-cache-size", "0", "--block-size", "256KiB", "s3://" + st.Bucket()}
	m := startMount(t, t.TempDir(), args...)
	if got := findMountStats(filepath.Join(m.dir, "w", "big")); got != filepath.Join(m.dir, fuse.ControlDir, "stats") {
		t.Fatalf("findMountStats = %q", got)
	}
	// --block-size is the mount's to set: warm says it has no effect here.
	out, err := exec.Command(bin, "warm", "-q", "--block-size", "4MiB", filepath.Join(m.dir, "w")).CombinedOutput()
	if err != nil {
		t.Fatalf("warm: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "flags with no effect through a mountpoint") || !strings.Contains(string(out), "--block-size") {
		t.Errorf("warm through a mount with --block-size did not say the flag has no effect there:\n%s", out)
	}
	if strings.Contains(string(out), "not a dataccel mount") || !strings.Contains(string(out), "warm done") ||
		strings.Contains(string(out), "disk cache is full") {
		t.Fatalf("warm output:\n%s", out)
	}
	// A read past the page cache reaches the mount (served from its disk
	// cache, as its RAM cache is off) though the page cache holds the file.
	big := filepath.Join(m.dir, "w", "big", "c00", "img00000.jpg")
	if _, err := os.ReadFile(big); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * statsFreshness)
	hits := m.stats(t)["cache_disk_hits_total"]
	n, err := readWhole(big, true, cache.AlignedBuf(directReadBuf))
	if err != nil || n != int64(len(files["big/c00/img00000.jpg"])) {
		t.Fatalf("direct read: %d bytes, %v", n, err)
	}
	time.Sleep(2 * statsFreshness)
	if got := m.stats(t)["cache_disk_hits_total"]; got <= hits {
		t.Fatalf("a direct read did not reach the mount: disk hits %d, then %d", hits, got)
	}
	m.unmount(t)
	if n, err := countBlocks(cacheDir); err != nil || n != blocks {
		t.Fatalf("%d blocks in the disk cache after warm (%v), want %d:\n%s", n, err, blocks, out)
	}
	m2 := startMount(t, t.TempDir(), append([]string{"--prefetch", "off"}, args...)...)
	readAllFiles(t, filepath.Join(m2.dir, "w"), files)
	if s := m2.stats(t); s["store_requests_get_total"] != 0 {
		t.Fatalf("mount on a cache warmed through a mount made %d GETs", s["store_requests_get_total"])
	}
	if got := findMountStats(t.TempDir()); got != "" {
		t.Fatalf("findMountStats of a plain directory = %q", got)
	}
}

// TestWarmThroughMountTiers: warm through a mount says where the files
// stay when that is not a disk cache: with none and a RAM cache smaller
// than the files, it warns that the job will fetch them again; with a disk
// cache, that what RAM holds reaches it later.
func TestWarmThroughMountTiers(t *testing.T) {
	st := srv.NewBucket(t)
	dataset(t, st, "wt/", 40, 64<<10) // 2.5 MiB
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"no disk, small RAM", []string{"--ram-cache-size", "1MiB"}, "level=WARN msg=\"the mount has no disk cache"},
		{"no disk, RAM enough", []string{"--ram-cache-size", "64MiB"}, "the files are in its RAM cache, for as long as the mount runs"},
		{"disk", []string{"--ram-cache-size", "64MiB", "--cache-dir", t.TempDir()}, "part of the files is in the mount's RAM cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMount(t, t.TempDir(), append(tc.flags, "--endpoint", srv.Endpoint, "s3://"+st.Bucket()+"/wt")...)
			out, err := exec.Command(bin, "warm", "-q", m.dir).CombinedOutput()
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("warm: %v, want %q in:\n%s", err, tc.want, out)
			}
		})
	}
}

// TestWarmThroughFullMount: warm through a mount whose disk cache has no
// room (a file system other files filled to its --cache-min-free floor)
// says so: the files are read, and not kept.
func TestWarmThroughFullMount(t *testing.T) {
	st := srv.NewBucket(t)
	dataset(t, st, "wf/", 20, 20<<10)
	m := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "--cache-dir", t.TempDir(), "--ram-cache-size", "0",
		"--cache-min-free", "99%", "s3://"+st.Bucket())
	out, err := exec.Command(bin, "warm", "-q", filepath.Join(m.dir, "wf")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "the mount's disk cache is full") {
		t.Fatalf("warm: %v, want a warning that the disk cache is full:\n%s", err, out)
	}
	if n := logInt(t, string(out), "writes_refused"); n < 1 {
		t.Errorf("warm says %d disk cache writes refused, want some:\n%s", n, out)
	}
}

// TestWarmMountList: through a directory, as through s3://, a list naming
// paths that are not there warns, and a list or directory that names no
// file fails (it exited 0 having warmed nothing).
func TestWarmMountList(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.jpg", "sub/b.jpg"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		dir      string
		list     string // "" for none
		wantErr  string
		wantWarn string
	}{
		{"every file", dir, "", "", "not a dataccel mount"},
		{"a list with a missing path", dir, "a.jpg\nnope/x.jpg\n", "", "--list names paths that are not files"},
		{"a list of missing paths", dir, "nope/x.jpg\n", "no file under " + dir + " named by --list", ""},
		{"an empty directory", t.TempDir(), "", "no file under", ""},
		{"no such directory", filepath.Join(dir, "nope"), "", "no such directory", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := warmFlags{concurrency: 2, quiet: true}
			if tc.list != "" {
				f.list = filepath.Join(t.TempDir(), "list")
				if err := os.WriteFile(f.list, []byte(tc.list), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			err := warmMount(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)), f, tc.dir)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("warm: %v, want error %q", err, tc.wantErr)
			}
			if !strings.Contains(logs.String(), tc.wantWarn) {
				t.Fatalf("want %q in the logs:\n%s", tc.wantWarn, logs.String())
			}
		})
	}
}

// TestWarmMountUnwritableCache: a mount whose --cache-dir cannot be written
// says so at start, and a warm through it says the files did not reach
// the disk cache (before, it printed "warm done" and nothing else).
func TestWarmMountUnwritableCache(t *testing.T) {
	st := srv.NewBucket(t)
	dataset(t, st, "u/", 10, 8<<10)
	cacheDir := readOnlyDir(t)
	cmd, logs := mountProcess(t, "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "s3://"+st.Bucket(), t.TempDir())
	mnt := cmd.Args[len(cmd.Args)-1]
	if !strings.Contains(logs.String(), "caches nothing new: it cannot be written") {
		t.Fatalf("no word at start of an unwritable --cache-dir:\n%s", logs.String())
	}
	out, err := exec.Command(bin, "warm", "-q", filepath.Join(mnt, "u")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "disk cache takes no writes") {
		t.Fatalf("warm through a mount with an unwritable disk cache: %v\n%s", err, out)
	}
}
