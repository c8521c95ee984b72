package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/dataccel/dataccel/cache"
)

func TestMemoryLimitFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name            string
		ram, held, live int64
		want            int64
	}{
		{"empty mount", 1024 * mib, 0, 20 * mib, 1024*mib + memHeadroom},
		{"cache filling", 1024 * mib, 400 * mib, 450 * mib, 1024*mib + memHeadroom},
		{"full cache, little else", 1024 * mib, 1024 * mib, 1100 * mib, 1024*mib + memHeadroom},
		{"full cache, large metadata", 1024 * mib, 1024 * mib, 1624 * mib, 1024*mib + 900*mib},
		{"cache filling, large metadata", 1024 * mib, 300 * mib, 900 * mib, 1024*mib + 900*mib},
		{"gauge past the bound", 1024 * mib, 1100 * mib, 1124 * mib, 1024*mib + memHeadroom},
		{"no RAM cache", 0, 0, 600 * mib, 900 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := memoryLimitFor(tc.ram, tc.held, tc.live)
			if got != tc.want {
				t.Errorf("memoryLimitFor(%d MiB, %d MiB, %d MiB) = %d MiB, want %d MiB",
					tc.ram/mib, tc.held/mib, tc.live/mib, got/mib, tc.want/mib)
			}
			// Never at or under the live heap: the collector would run back
			// to back.
			if got-tc.live < memHeadroom/3 {
				t.Errorf("limit %d MiB leaves %d MiB above the live heap, want >= %d MiB", got/mib, (got-tc.live)/mib, memHeadroom/3/mib)
			}
		})
	}
}

// TestLimitMemory: a mount sets the runtime's memory limit from its RAM
// cache, unless GOMEMLIMIT says otherwise; either way the RAM cache's
// memory file (off the heap) comes out of it.
func TestLimitMemory(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	const ram, file = 64 << 20, 48 << 20
	for _, tc := range []struct {
		env     string
		offHeap int64
	}{{"", 0}, {"", file}, {"3GiB", 0}, {"3GiB", file}} {
		t.Run(fmt.Sprintf("GOMEMLIMIT=%s,file=%d", tc.env, tc.offHeap), func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tc.env)
			const envLimit = 3 << 30
			start := prev
			if tc.env != "" {
				start = envLimit // as the runtime set it from the variable at start
			}
			debug.SetMemoryLimit(start)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			blocks := func() (int64, int64) { return 0, tc.offHeap }
			go func() { limitMemory(ctx, ram, blocks, slog.New(slog.DiscardHandler)); close(done) }()
			want := ram - tc.offHeap + memHeadroom
			if tc.env != "" {
				want = envLimit - tc.offHeap
			}
			deadline := time.Now().Add(2 * time.Second)
			for debug.SetMemoryLimit(-1) != want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			got := debug.SetMemoryLimit(-1)
			cancel()
			<-done
			if after := debug.SetMemoryLimit(-1); after != start {
				t.Errorf("limit %d after the mount ended, want the earlier %d back", after, start)
			}
			if got != want {
				t.Errorf("limit %d, want %d", got, want)
			}
		})
	}
}

// TestPlanSharesRAM: blocks read ahead take their room from the RAM cache,
// so the prefetch memory is at most half of it, but eight blocks at least
// (and never more than --prefetch-memory); with no RAM cache it is
// --prefetch-memory as given.
func TestPlanSharesRAM(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		ram, prefetch, block string
		want                 int64
	}{
		{"1GiB", "1GiB", "8MiB", 512 * mib},
		{"8GiB", "1GiB", "8MiB", 1024 * mib},
		{"256MiB", "1GiB", "8MiB", 128 * mib},
		{"64MiB", "1GiB", "8MiB", 64 * mib}, // eight blocks
		{"64MiB", "1GiB", "1MiB", 32 * mib},
		{"20MiB", "1GiB", "1MiB", 16 * mib},
		{"64MiB", "48MiB", "8MiB", 48 * mib},
		{"0", "1GiB", "8MiB", 1024 * mib},
		{"1GiB", "256MiB", "8MiB", 256 * mib},
	} {
		t.Run(tc.ram+"/"+tc.prefetch+"/"+tc.block, func(t *testing.T) {
			var f mountFlags
			cmd := &cobra.Command{}
			f.register(cmd)
			if err := cmd.Flags().Parse([]string{"--ram-cache-size", tc.ram, "--prefetch-memory", tc.prefetch, "--block-size", tc.block}); err != nil {
				t.Fatal(err)
			}
			p, err := f.plan("s3://bucket/prefix")
			if err != nil {
				t.Fatal(err)
			}
			if p.prefetchMem != tc.want {
				t.Fatalf("prefetch memory %d MiB, want %d MiB", p.prefetchMem/mib, tc.want/mib)
			}
		})
	}
}

// TestTinyCacheWarns: a cache bound under eight blocks is allowed with a
// warning that names the flag; sizes that hold blocks, and a RAM cache
// turned off, warn of nothing.
func TestTinyCacheWarns(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // flags named by the warnings
	}{
		{[]string{"--cache-size", "1KiB"}, []string{"--cache-size 1KiB"}},
		{[]string{"--cache-size", "63MiB"}, []string{"--cache-size 63MiB"}},
		{[]string{"--cache-size", "64MiB"}, nil},
		{[]string{"--cache-size", "1MiB", "--block-size", "64KiB"}, nil},
		{[]string{"--ram-cache-size", "3MiB", "--cache-size", "1GiB"}, []string{"--ram-cache-size 3MiB"}},
		{[]string{"--ram-cache-size", "0", "--cache-size", "1KiB"}, []string{"--cache-size 1KiB"}},
		{[]string{"--ram-cache-size", "1KiB", "--cache-size", "2KiB"}, []string{"--ram-cache-size 1KiB", "--cache-size 2KiB"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var f mountFlags
			cmd := &cobra.Command{}
			f.register(cmd)
			if err := cmd.Flags().Parse(append([]string{"--cache-dir", t.TempDir(), "--ram-cache-size", "1GiB"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			p, err := f.plan("s3://bucket/prefix")
			if err != nil {
				t.Fatal(err)
			}
			if len(p.warnings) != len(tc.want) {
				t.Fatalf("warnings %q, want %d naming %q", p.warnings, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(p.warnings[i], w+" is less than 8 blocks") {
					t.Errorf("warning %q does not name %q", p.warnings[i], w)
				}
			}
		})
	}
}

// TestPassthroughPlan: local copies get their budget from --local-copies,
// a share of the cache filesystem; without --cache-dir there is nowhere to
// keep them, which the mount says instead of failing.
func TestPassthroughPlan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantMin  int64
		wantWarn bool
	}{
		{"off by default", nil, 0, false},
		{"on with a cache dir", []string{"--cache-dir", "CACHE", "--passthrough-min-size", "16MiB", "--local-copies", "1GiB"}, 16 << 20, false},
		{"on without a cache dir", []string{"--passthrough-min-size", "16MiB"}, 16 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f mountFlags
			cmd := &cobra.Command{}
			f.register(cmd)
			args := append([]string{"--ram-cache-size", "1GiB"}, tc.args...)
			for i, a := range args {
				if a == "CACHE" {
					args[i] = t.TempDir()
				}
			}
			if err := cmd.Flags().Parse(args); err != nil {
				t.Fatal(err)
			}
			p, err := f.plan("s3://bucket/prefix")
			if err != nil {
				t.Fatal(err)
			}
			if p.passthroughMin != tc.wantMin {
				t.Errorf("passthroughMin %d, want %d", p.passthroughMin, tc.wantMin)
			}
			if f.cacheDir != "" && p.localCopyBytes != 1<<30 {
				t.Errorf("localCopyBytes %d, want 1GiB", p.localCopyBytes)
			}
			warned := len(p.warnings) == 1 && strings.Contains(p.warnings[0], "--passthrough-min-size needs --cache-dir")
			if warned != tc.wantWarn || !tc.wantWarn && len(p.warnings) > 0 {
				t.Errorf("warnings %q, want the --cache-dir one: %v", p.warnings, tc.wantWarn)
			}
		})
	}
}

// TestFlagsWithoutEffect: flags of the disk cache given without
// --cache-dir, and a read order with cross-file prefetch off, are warned
// about: valid, but most likely not what was meant.
func TestFlagsWithoutEffect(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // the warnings start so
	}{
		{"none", []string{"--cache-dir", "CACHE", "--cache-size", "1GiB", "--manifest", "off"}, nil},
		{"disk cache flags without a disk cache", []string{"--cache-size", "500GiB", "--cache-compress=false", "--manifest", "refresh"},
			[]string{"--cache-size has no effect", "--cache-compress has no effect", "--manifest has no effect"}},
		{"a read order without cross-file prefetch", []string{"--prefetch", "off", "--prefetch-list", "LIST"},
			[]string{"--prefetch-list with --prefetch off"}},
		{"a RAM cache larger than the memory", []string{"--ram-cache-size", "1PiB"}, []string{"--ram-cache-size 1PiB leaves less than"}},
		{"a disk cache larger than its file system", []string{"--cache-dir", "CACHE", "--cache-size", "1PiB"},
			[]string{"--cache-size 1PiB is more than the size of the file system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f mountFlags
			cmd := &cobra.Command{}
			f.register(cmd)
			f.changed = cmd.Flags().Changed
			args := append([]string{"--ram-cache-size", "1GiB"}, tc.args...)
			for i, a := range args {
				switch a {
				case "CACHE":
					args[i] = t.TempDir()
				case "LIST":
					args[i] = filepath.Join(t.TempDir(), "list")
					os.WriteFile(args[i], []byte("a/b.jpg\n"), 0o644)
				}
			}
			if err := cmd.Flags().Parse(args); err != nil {
				t.Fatal(err)
			}
			p, err := f.plan("s3://bucket/prefix")
			if err != nil {
				t.Fatal(err)
			}
			ok := len(p.warnings) == len(tc.want)
			for i := 0; ok && i < len(tc.want); i++ {
				ok = strings.HasPrefix(p.warnings[i], tc.want[i])
			}
			if !ok {
				t.Errorf("warnings %q, want %q", p.warnings, tc.want)
			}
		})
	}
}

// TestCacheMinFreeZero: --cache-min-free 0 keeps no free space (the disk
// cache's free-space check stays on: cache TestDiskFullAndReadOnly).
func TestCacheMinFreeZero(t *testing.T) {
	for _, tc := range []struct {
		value string
		floor func(blocks int64) bool
	}{
		{"0", func(b int64) bool { return b == 0 }},
		{"1MiB", func(b int64) bool { return b > 0 }},
	} {
		t.Run(tc.value, func(t *testing.T) {
			var f mountFlags
			cmd := &cobra.Command{}
			f.register(cmd)
			dir := t.TempDir()
			if err := cmd.Flags().Parse([]string{"--cache-dir", dir, "--cache-min-free", tc.value}); err != nil {
				t.Fatal(err)
			}
			p, err := f.plan("s3://bucket/prefix")
			if err != nil {
				t.Fatal(err)
			}
			if _, floor, err := cache.FreeSpace(dir, p.minFree); err != nil || !tc.floor(floor) {
				t.Fatalf("floor %d bytes, %v", floor, err)
			}
		})
	}
}

// TestCgroupMemoryLimit: the RAM cache's default is sized from the lowest
// memory limit of the process's cgroups, cgroup v2 or v1, its own or one
// above it; "max" and v1's huge "none" are no limit.
func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string // under the cgroup root
		self  string            // /proc/self/cgroup
		want  int64
	}{
		{"none", nil, "0::/\n", 0},
		{"v2 at the root (a container)", map[string]string{"memory.max": "419430400\n"}, "0::/\n", 400 << 20},
		{"v2 no limit", map[string]string{"memory.max": "max\n"}, "0::/\n", 0},
		{"v2 a scope and its parent", map[string]string{"memory.max": "max\n", "a/memory.max": "1073741824\n", "a/b.scope/memory.max": "max\n"}, "0::/a/b.scope\n", 1 << 30},
		{"v1", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n", "memory/bb/memory.limit_in_bytes": "419430400\n"},
			"12:pids:/bb\n7:memory:/bb\n3:cpu,cpuacct:/bb\n", 400 << 20},
		{"v1 joined controllers", map[string]string{"memory/k/memory.limit_in_bytes": "209715200\n"}, "4:memory,hugetlb:/k\n", 200 << 20},
		{"v1 no limit", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, "7:memory:/\n", 9223372036854771712},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(root, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := cgroupMemoryLimit(root, tc.self); got != tc.want {
				t.Fatalf("%d, want %d", got, tc.want)
			}
		})
	}
}

// TestNofileWarning: a mount warns when the open-file limit is under
// what its GETs in flight and caches may need, and not otherwise.
func TestNofileWarning(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		warn  bool
	}{{32, true}, {767, true}, {768, false}, {1 << 20, false}} {
		if w := nofileWarning(tc.limit, 128); (w != "") != tc.warn {
			t.Errorf("limit %d: %q, want a warning: %v", tc.limit, w, tc.warn)
		}
	}
}

// TestRAMCacheWarningFollowsTheBound: a RAM cache that leaves the mount the
// 300 MiB the README says it holds besides is not warned about (a sidecar
// sized so was told it would run out of memory); one that leaves less is.
func TestRAMCacheWarningFollowsTheBound(t *testing.T) {
	mem := totalMemory()
	for _, tc := range []struct {
		left int64
		warn bool
	}{{400 << 20, false}, {200 << 20, true}} {
		var f mountFlags
		cmd := &cobra.Command{}
		f.register(cmd)
		f.changed = cmd.Flags().Changed
		if err := cmd.Flags().Parse([]string{"--ram-cache-size", strconv.FormatInt(mem-tc.left, 10)}); err != nil {
			t.Fatal(err)
		}
		p, err := f.plan("s3://bucket/prefix")
		if err != nil {
			t.Fatal(err)
		}
		warned := slices.ContainsFunc(p.warnings, func(w string) bool { return strings.Contains(w, "leaves less than 300.0MiB") })
		if warned != tc.warn {
			t.Errorf("%d MiB left beside the RAM cache: warnings %q, want the memory one: %v", tc.left>>20, p.warnings, tc.warn)
		}
	}
}
