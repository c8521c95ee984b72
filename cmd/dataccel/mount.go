package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/fuse"
	"github.com/dataccel/dataccel/localcopy"
	"github.com/dataccel/dataccel/prefetch"
	"github.com/dataccel/dataccel/serve"
	"github.com/dataccel/dataccel/store"
	"github.com/dataccel/dataccel/store/s3"
	"github.com/dataccel/dataccel/webhook"
)

type mountFlags struct {
	s3          s3Flags
	allowOther  bool
	anyAnnounce bool
	uid, gid    int
	metadataTTL time.Duration
	outageGrace time.Duration
	debugFUSE   bool

	cacheDir      string
	cacheSize     string
	cacheMinFree  string
	ramCacheSize  string
	cacheCompress bool

	maxInflight      int
	listAhead        int
	prefetch         string
	prefetchMemory   string
	prefetchInflight string
	prefetchList     string
	blockSize        string
	hedge            bool
	push             bool
	sweep            bool
	passthroughMin   string
	localCopies      string
	manifest         string
	wait             waitFlags

	httpAddr  string
	readyFile string
	pprofAddr string

	changed func(flag string) bool // whether the command line set the flag (nil: none)
}

func (f *mountFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	f.s3.register(fl)
	fl.BoolVar(&f.allowOther, "allow-other", false, "let users other than the mounting one read the mount (FUSE allow_other)")
	fl.BoolVar(&f.anyAnnounce, "announce-any-user", false, "let every user who sees the mount write an order to .dataccel/prefetch (with --allow-other: any user of the machine); by default only --uid, members of --gid and root can")
	fl.IntVar(&f.uid, "uid", os.Getuid(), "owner uid of files and directories (default: the caller's)")
	fl.IntVar(&f.gid, "gid", os.Getgid(), "owner gid of files and directories (default: the caller's)")
	fl.DurationVar(&f.metadataTTL, "metadata-ttl", time.Hour, "how long listings and attributes are trusted (datasets rarely change under training); listings are re-listed in the background before it passes")
	fl.DurationVar(&f.outageGrace, "outage-grace", 15*time.Minute, "how long past --metadata-ttl listings serve while the store cannot be reached or fails LISTs (5xx, timeouts), so that a job reading cached files reads on through an outage; 0: lookups fail once --metadata-ttl passes")
	fl.IntVar(&f.listAhead, "list-ahead", 32, "LISTs at a time that list the subdirectories ahead of a walker (find, os.walk, ImageFolder) once it has listed two of one directory; 0 turns it off")
	fl.BoolVar(&f.debugFUSE, "debug-fuse", false, "log every FUSE request (very verbose)")

	fl.StringVar(&f.cacheDir, "cache-dir", "", "disk cache directory on local NVMe; survives restarts (unset: RAM cache only)")
	fl.StringVar(&f.cacheSize, "cache-size", "80%", "disk cache bound: a size (500GiB) or a share of the cache filesystem (80%)")
	fl.StringVar(&f.cacheMinFree, "cache-min-free", "5%", "free space the disk cache always leaves on its filesystem (size or %)")
	fl.StringVar(&f.ramCacheSize, "ram-cache-size", "", "RAM cache bound: a size or a share of memory (default: 10% of memory, at most 4GiB; 0 turns it off)")
	fl.BoolVar(&f.cacheCompress, "cache-compress", true, "compress disk-cache blocks that shrink by a useful margin (s2)")

	fl.IntVar(&f.maxInflight, "max-inflight", 128, "GETs in flight at most (enough to hide a ~20 ms round trip)")
	fl.StringVar(&f.prefetch, "prefetch", "on", "prefetch across files (directory order, announced order): on or off; read-ahead within a file stays on")
	fl.StringVar(&f.prefetchMemory, "prefetch-memory", "1GiB", "memory for blocks in flight and read ahead")
	fl.StringVar(&f.prefetchInflight, "prefetch-inflight", "32MiB", "bytes of GETs in flight past which prefetch across files waits, so that the file needed next is not slowed by the many after it; raise it for links with more bandwidth x latency")
	fl.StringVar(&f.prefetchList, "prefetch-list", "", "file with the read order, one path per line relative to the mount (same as writing MOUNT/.dataccel/prefetch)")
	fl.StringVar(&f.blockSize, "block-size", "8MiB", "fetch and cache unit for large objects; smaller objects are fetched whole")
	fl.BoolVar(&f.sweep, "sweep", true, "once reads spread over a directory, fetch the rest of it ahead of them (a directory of more than 64 files: 64, then 16 more for each file read in it), and of every directory they spread over, as far as the cache can keep it: an epoch reads every file; false for a job that reads only a few files of each directory (a validation subset), which the sweep makes fetch more than it reads; a cold epoch over every file takes much longer without it")
	fl.BoolVar(&f.push, "prefetch-push", true, "put the files prefetch fetches ahead of the reader straight into the kernel's page cache, so that reading them costs no request to this process")
	fl.StringVar(&f.passthroughMin, "passthrough-min-size", "0", "serve files at least this large (e.g. 16MiB) from whole local copies in --cache-dir, which the kernel reads without asking the mount (FUSE passthrough, Linux 6.9+, root): warm epochs of large files as fast as a local disk; each open of such a file waits for its whole copy (every byte fetched), so for jobs that read large files whole; it costs each open a round trip, and turns off for good once small files dominate the opens; 0: off")
	fl.StringVar(&f.localCopies, "local-copies", "10%", "disk space for the local copies of --passthrough-min-size: a size or a share of the cache filesystem")
	fl.BoolVar(&f.hedge, "hedge", true, "send a second GET for a small object a read waits on whose first byte is late (at most 5% extra GETs, fewer while duplicates seldom answer first); prefetch is not hedged")
	fl.StringVar(&f.manifest, "manifest", "off", "namespace manifest in --cache-dir, the directory listings this mount made, for the next mount on the cache dir: reuse (load it and trust it until --metadata-ttl passes from its listing: objects changed since read as they were, so only for a dataset that does not change, such as a versioned prefix), refresh (load it, list its directories again in the background, and trust each until then), off (list the store: a restart sees the dataset as it is; cached blocks of unchanged objects still serve)")
	f.wait.register(fl, "how long a read retries a failing store before it fails with EIO")

	fl.StringVar(&f.httpAddr, "http", "", "serve /metrics, /healthz and /readyz on this address (e.g. :9100)")
	fl.StringVar(&f.readyFile, "ready-file", "", "write this file once the mount serves (removed at exit, and at start if left from before)")
	fl.StringVar(&f.pprofAddr, "pprof", "", "serve Go profiles (/debug/pprof/) on this address, for performance work")
}

func newMountCmd(logger *slog.Logger) *cobra.Command {
	var f mountFlags
	cmd := &cobra.Command{
		Use:   "mount s3://bucket[/prefix] MOUNTPOINT",
		Short: "Mount a bucket prefix read-only; runs in the foreground until SIGINT, SIGTERM or SIGHUP",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError{fmt.Errorf("mount takes 2 arguments, s3://bucket[/prefix] and MOUNTPOINT; got %d", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.changed = cmd.Flags().Changed
			return runMount(cmd.Context(), logger, f, args[0], args[1])
		},
	}
	f.register(cmd)
	return cmd
}

// mountPlan is the validated form of the flags.
type mountPlan struct {
	bucket, prefix    string
	cacheBytes        int64
	minFree           float64
	ramBytes          int64
	sweepBytes        int64
	sweepPushBytes    int64
	handedKeep        int64
	prefetchMem       int64
	prefetchInflight  int64
	blockSize         int64
	passthroughMin    int64
	localCopyBytes    int64
	crossFile         bool
	manifestMode      string
	prefetchListPaths []byte
	warnings          []string // flags that are valid but most likely not what was meant
}

func (f *mountFlags) plan(rawURL string) (mountPlan, error) {
	var p mountPlan
	var err error
	if p.bucket, p.prefix, err = parseS3URL(rawURL); err != nil {
		return p, err
	}
	bad := func(flag string, err error) error { return usageError{fmt.Errorf("--%s: %w", flag, err)} }
	if f.metadataTTL <= 0 {
		return p, usageError{fmt.Errorf("--metadata-ttl must be positive, got %s", f.metadataTTL)}
	}
	if f.outageGrace < 0 {
		return p, usageError{fmt.Errorf("--outage-grace must be 0 or more, got %s", f.outageGrace)}
	}
	if err := f.wait.validate(); err != nil {
		return p, err
	}
	if f.uid < 0 || f.gid < 0 {
		return p, usageError{errors.New("--uid and --gid must not be negative")}
	}
	if f.listAhead < 0 || f.listAhead > 256 {
		return p, usageError{fmt.Errorf("--list-ahead %d: want 0..256", f.listAhead)}
	}
	if f.maxInflight < 1 || f.maxInflight > webhook.MaxInflightLimit {
		return p, usageError{fmt.Errorf("--max-inflight %d: want 1..%d", f.maxInflight, webhook.MaxInflightLimit)}
	}
	var nofile syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile) == nil {
		if w := nofileWarning(nofile.Cur, f.maxInflight); w != "" {
			p.warnings = append(p.warnings, w)
		}
	}
	switch f.prefetch {
	case "on", "off":
		p.crossFile = f.prefetch == "on"
	default:
		return p, usageError{fmt.Errorf("--prefetch %q: want on or off", f.prefetch)}
	}
	switch f.manifest {
	case "reuse", "refresh", "off":
		p.manifestMode = f.manifest
	default:
		return p, usageError{fmt.Errorf("--manifest %q: want reuse, refresh or off", f.manifest)}
	}
	if p.prefetchMem, err = cache.ParseSize(f.prefetchMemory); err != nil || p.prefetchMem < 16<<20 {
		return p, bad("prefetch-memory", fmt.Errorf("%q: want a size of at least 16MiB", f.prefetchMemory))
	}
	if p.prefetchInflight, err = cache.ParseSize(f.prefetchInflight); err != nil || p.prefetchInflight < 1<<20 {
		return p, bad("prefetch-inflight", fmt.Errorf("%q: want a size of at least 1MiB", f.prefetchInflight))
	}
	if p.blockSize, err = cache.ParseSize(f.blockSize); err != nil || p.blockSize < 64<<10 || p.blockSize > 256<<20 {
		return p, bad("block-size", fmt.Errorf("%q: want a size from 64KiB to 256MiB", f.blockSize))
	}
	if p.passthroughMin, err = cache.ParseSize(f.passthroughMin); err != nil || p.passthroughMin < 0 {
		return p, bad("passthrough-min-size", fmt.Errorf("%q: want a size, or 0 for off", f.passthroughMin))
	}
	mem := totalMemory()
	ram := f.ramCacheSize
	if ram == "" {
		p.ramBytes = min(mem/10, 4<<30)
	} else if p.ramBytes, err = cache.ParseSizeOrPercent(ram, mem); err != nil {
		return p, bad("ram-cache-size", err)
	}
	if p.ramBytes > 0 && p.ramBytes < tinyCacheBlocks*p.blockSize {
		p.warnings = append(p.warnings, tinyCache("ram-cache-size", ram, f.blockSize, "RAM"))
	}
	// The memory limit follows --ram-cache-size: a bound over the memory
	// there is lets the cache grow until the kernel kills the mount.
	if ram != "" && p.ramBytes+memBeside > mem { // the default is a tenth of it
		p.warnings = append(p.warnings, fmt.Sprintf("--ram-cache-size %s leaves less than %s of this machine's (or container's) memory, %s: "+
			"the mount holds up to its RAM cache and %s besides (and about 1 KiB per file listed), so it would run out of memory before its cache fills; give less, or a share (50%%)",
			ram, humanBytes(memBeside), humanBytes(mem), humanBytes(memBeside)))
	}
	// Blocks read ahead or in flight take their room from the RAM cache
	// (the loader reserves it there), so that the mount's blocks stay
	// within --ram-cache-size: up to half of it, but room for eight blocks
	// at least (fewer would leave readers of large files waiting in turn).
	if p.ramBytes > 0 {
		p.prefetchMem = min(p.prefetchMem, max(16<<20, 8*p.blockSize, p.ramBytes/2))
	}
	// Pushed pages are charged to this process's memory cgroup (a
	// sidecar's limit), beside the mount's blocks (the RAM cache and the
	// prefetch buffers, which share it; the prefetch buffers alone without
	// one): the sweep pushes no more than what is left of it, less some
	// headroom, so that they are not reclaimed before they are read.
	left := mem - max(p.ramBytes, p.prefetchMem) - memRoom
	p.sweepPushBytes = max(0, min(p.ramBytes, left))
	// The page cache also serves the job's other files: count on half of
	// what is left to keep the blocks this mount hands it. Only pushes ask
	// (without them the loader need not remember anything on its reads).
	if f.push && p.crossFile {
		p.handedKeep = max(0, left) / 2
	}
	if f.cacheDir != "" {
		if err := os.MkdirAll(f.cacheDir, 0o700); err != nil {
			return p, fmt.Errorf("--cache-dir: %w", err)
		}
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(f.cacheDir, &sfs); err != nil {
			return p, fmt.Errorf("--cache-dir %s: %w", f.cacheDir, err)
		}
		disk := int64(sfs.Blocks) * int64(sfs.Bsize)
		if p.cacheBytes, err = cache.ParseSizeOrPercent(f.cacheSize, disk); err != nil || p.cacheBytes <= 0 {
			return p, bad("cache-size", fmt.Errorf("%q: want a positive size or share", f.cacheSize))
		}
		if p.cacheBytes < tinyCacheBlocks*p.blockSize {
			p.warnings = append(p.warnings, tinyCache("cache-size", f.cacheSize, f.blockSize, "disk"))
		}
		if p.cacheBytes > disk {
			p.warnings = append(p.warnings, fmt.Sprintf("--cache-size %s is more than the size of the file system under --cache-dir, %s: "+
				"its free space (down to --cache-min-free) bounds the cache instead", f.cacheSize, humanBytes(disk)))
			p.cacheBytes = disk // as the cache sizes its segments and the log says
		}
		minFree, err := cache.ParseSizeOrPercent(f.cacheMinFree, disk)
		if err != nil || minFree < 0 {
			return p, bad("cache-min-free", fmt.Errorf("%q: want a size or share", f.cacheMinFree))
		}
		if p.localCopyBytes, err = cache.ParseSizeOrPercent(f.localCopies, disk); err != nil || p.localCopyBytes < 0 {
			return p, bad("local-copies", fmt.Errorf("%q: want a size or share", f.localCopies))
		}
		p.minFree = float64(minFree) / float64(max(disk, 1))
		if p.minFree == 0 {
			p.minFree = -1 // the cache's "no floor" (0 is its default)
		}
	}
	if f.cacheDir == "" && f.changed != nil {
		for _, fl := range []string{"cache-size", "cache-min-free", "cache-compress", "local-copies", "manifest"} {
			if f.changed(fl) {
				p.warnings = append(p.warnings, "--"+fl+" has no effect without --cache-dir (no disk cache)")
			}
		}
	}
	if f.prefetchList != "" && !p.crossFile {
		p.warnings = append(p.warnings, "--prefetch-list with --prefetch off: the list's directories are listed, its order is not used")
	}
	if f.sweep && p.crossFile {
		// An epoch reads every file once: fetch the rest of the
		// directories being read, as far as the cache can keep them.
		p.sweepBytes = max(p.cacheBytes, p.ramBytes) / 10 * 9
	}
	if p.passthroughMin > 0 && f.cacheDir == "" {
		p.warnings = append(p.warnings, "--passthrough-min-size needs --cache-dir for its local copies: every file is read through the mount")
	}
	if f.prefetchList != "" {
		if p.prefetchListPaths, err = os.ReadFile(f.prefetchList); err != nil {
			return p, usageError{fmt.Errorf("--prefetch-list: %w", err)}
		}
	}
	return p, nil
}

// totalMemory is the machine's RAM (or the cgroup's limit, when lower).
func totalMemory() int64 {
	var si syscall.Sysinfo_t
	mem := int64(8 << 30)
	if syscall.Sysinfo(&si) == nil {
		mem = int64(si.Totalram) * int64(si.Unit)
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	if lim := cgroupMemoryLimit("/sys/fs/cgroup", string(self)); lim > 0 && lim < mem {
		mem = lim
	}
	return mem
}

// cgroupMemoryLimit is the lowest memory limit of the cgroups a process
// is in, given the cgroup file system's root and /proc/self/cgroup, or 0
// for none: v2's memory.max and v1's memory.limit_in_bytes, of the
// process's own cgroup and each above it (a limit set on a parent binds
// too), and of the root (a container sees its own cgroup there).
func cgroupMemoryLimit(root, self string) int64 {
	var dirs []string
	for _, line := range strings.Split(self, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var base, file string
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			base, file = root, "memory.max"
		case slices.Contains(strings.Split(parts[1], ","), "memory"): // v1
			base, file = filepath.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for p := filepath.Clean("/" + parts[2]); ; p = filepath.Dir(p) {
			dirs = append(dirs, filepath.Join(base, p, file))
			if p == "/" {
				break
			}
		}
	}
	dirs = append(dirs, filepath.Join(root, "memory.max"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
	var lowest int64
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var lim int64 // "max" (v2's none) does not parse; v1's none is a huge number
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &lim); err == nil && lim > 0 && (lowest == 0 || lim < lowest) {
			lowest = lim
		}
	}
	return lowest
}

// nofileWarning warns when the open-file limit (Go raises it to the hard
// limit at start) leaves too few for a mount: a connection per GET in
// flight, hedges, the disk cache's segments (two each), the FUSE device,
// the HTTP port. Running out turns GETs and disk cache writes into errors.
func nofileWarning(limit uint64, maxInflight int) string {
	need := uint64(4*maxInflight + 256)
	if limit >= need {
		return ""
	}
	return fmt.Sprintf("the open-file limit is %d, under the %d a mount with --max-inflight %d may need: raise it (ulimit -n, or the container's nofile limit)",
		limit, need, maxInflight)
}

// memRoom is the memory the sweep's pushes leave free beside the RAM cache:
// the mount's own besides it (metadata, the runtime, the disk cache's write
// queue) and some headroom.
const memRoom = 512 << 20

// memBeside is the most a mount holds beside its RAM cache, whatever the
// files (README: the memory limit keeps it there), metadata aside.
const memBeside = 300 << 20

// tinyCacheBlocks: a cache bound under this many blocks keeps almost
// nothing, which is more likely a unit typed wrong (1KiB for 1TiB) than
// meant; it is allowed (tests and experiments use it) with a warning.
const tinyCacheBlocks = 8

func tinyCache(flag, value, block, tier string) string {
	return fmt.Sprintf("--%s %s is less than %d blocks of --block-size %s: the %s cache will keep almost nothing",
		flag, value, tinyCacheBlocks, block, tier)
}

func runMount(ctx context.Context, logger *slog.Logger, f mountFlags, rawURL, dir string) error {
	p, err := f.plan(rawURL)
	if err != nil {
		return err
	}
	for _, w := range p.warnings {
		logger.Warn(w)
	}
	// Check the mountpoint before contacting the store: it is cheaper and
	// the more likely mistake.
	resolved, err := fuse.ResolveMountpoint(dir)
	if err != nil {
		return fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	dir = resolved
	// Before the mountpoint: a mount on it that answers nothing may be the
	// one using the cache dir, merely stopped, and would be detached for
	// a mount that then cannot take the cache anyway.
	if f.cacheDir != "" {
		if busy, err := cache.InUse(f.cacheDir); err == nil && busy {
			return fmt.Errorf("--cache-dir %s: %w%s; nothing was mounted or unmounted", f.cacheDir, cache.ErrInUse, cacheUser(f.cacheDir))
		}
	}
	detached, err := fuse.CheckMountpoint(dir)
	if err != nil {
		return err
	}
	if detached != "" {
		logger.Warn("detached what was mounted at the mountpoint: "+detached, "mountpoint", dir)
	}
	if d, err := os.Open(dir); err == nil {
		if names, _ := d.Readdirnames(1); len(names) > 0 { // one name tells; a large volume needs no full read
			logger.Warn("the mountpoint is not empty: the mount hides what is in it until it ends", "mountpoint", dir)
		}
		d.Close()
	}
	if f.readyFile != "" {
		if fi, err := os.Stat(filepath.Dir(f.readyFile)); err != nil || !fi.IsDir() {
			return usageError{fmt.Errorf("--ready-file %s: no directory to write it in", f.readyFile)}
		}
		// Found now, not once mounted: a sidecar that can never say it is
		// ready would only warn, and its pod would wait for good.
		if err := unix.Access(filepath.Dir(f.readyFile), unix.W_OK); err != nil {
			return usageError{fmt.Errorf("--ready-file %s: cannot write in its directory: %w", f.readyFile, err)}
		}
		// One left by a mount that was killed would say ready too early.
		// Only such a one is removed: the path is the user's, and root
		// would remove a device or another program's file just as well.
		switch left, err := readyFileLeft(f.readyFile); {
		case err != nil:
			return usageError{fmt.Errorf("--ready-file %s: %w", f.readyFile, err)}
		case left:
			if err := os.Remove(f.readyFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("--ready-file %s: remove the one left from before: %w", f.readyFile, err)
			}
		}
	}
	f.s3.log = logger
	raw, err := f.s3.openStore(ctx, p.bucket, p.prefix, f.wait.connect)
	if err != nil {
		return err
	}
	stats := newMountStats()
	stats.ramLimit.Store(p.ramBytes)
	if f.cacheDir != "" {
		stats.diskLimit.Store(p.cacheBytes)
	}
	// Counting sits below the retries, so it counts what reached the server.
	counted := store.NewCounting(raw)
	counted.C = &stats.store
	counted.GetLatency = func(d time.Duration) { stats.getLat.Observe(d.Seconds()) }
	var st store.Store = store.NewRetrying(counted, f.wait.retry(&stats.retry, logger))
	foreground := st
	if f.hedge {
		foreground = prefetch.NewHedged(st, prefetch.HedgeOptions{Stats: &stats.prefetch})
	}

	tier, ram, closeCache, err := openCache(f, p, logger, &stats.cache)
	if err != nil {
		return err
	}
	defer closeCache()
	var onMemory func(int64)
	if ram != nil {
		onMemory = ram.Reserve
	}
	loader := prefetch.NewLoader(st, tier, prefetch.Options{
		Foreground:    foreground,
		BlockSize:     p.blockSize,
		MaxInflight:   f.maxInflight,
		MemoryBudget:  p.prefetchMem,
		OnMemory:      onMemory,
		PrefetchBytes: p.prefetchInflight,
		CrossFile:     p.crossFile,
		SweepBytes:    p.sweepBytes,
		// and push as much of it into the page cache as memory allows.
		SweepPushBytes: p.sweepPushBytes,
		// and trust the page cache with what the mount handed it lately.
		HandedKeep: p.handedKeep,
		Logger:     logger,
		Stats:      &stats.prefetch,
	})
	defer loader.Close()

	source := "s3://" + p.bucket + "/" + p.prefix
	manifestPath := ""
	if f.cacheDir != "" && p.manifestMode != "off" {
		manifestPath = filepath.Join(f.cacheDir, manifestPrefix+shortHash(endpointID(f.s3.endpoint)+"\x00"+source)+".gob.gz")
	}
	var (
		preload       []store.ManifestDir
		preloadListed time.Time
	)
	if manifestPath != "" {
		m, err := store.LoadManifest(manifestPath, f.s3.endpoint, p.bucket, p.prefix)
		switch {
		case err == nil:
			preload, preloadListed = m.Dirs, m.Created
			age := time.Since(m.Created).Round(time.Second)
			switch {
			case age >= f.metadataTTL:
				logger.Info("namespace manifest older than --metadata-ttl: its directories are listed again as they are read",
					"directories", len(m.Dirs), "age", age.String())
			case p.manifestMode == "refresh":
				logger.Info("namespace manifest loaded: its listings serve until each directory is listed again, in the background; objects changed since read as they were until then",
					"directories", len(m.Dirs), "files", m.Files(), "age", age.String())
			default:
				logger.Info("namespace manifest loaded: its listings are trusted until --metadata-ttl passes from when they were made; objects changed since read as they were until then (--manifest off lists the store)",
					"directories", len(m.Dirs), "files", m.Files(), "age", age.String(), "trusted_until", m.Created.Add(f.metadataTTL).Format(time.RFC3339))
			}
		case !errors.Is(err, os.ErrNotExist):
			logger.Warn("namespace manifest unusable; listing instead", "err", err)
		}
	}

	var copies fuse.LocalCopies
	closeCopies := func() {}
	if f.cacheDir != "" && p.passthroughMin > 0 && p.localCopyBytes > 0 {
		c, err := localcopy.New(filepath.Join(f.cacheDir, localCopyDir), copySource{loader}, localcopy.Options{
			Budget: p.localCopyBytes, Source: copiesSource(f, p), Chunk: int(p.blockSize), MinFree: p.minFree, Made: loader.Forget,
			Logger: logger, Stats: &stats.copies})
		if err != nil {
			return err
		}
		var once sync.Once
		closeCopies = func() {
			once.Do(func() {
				if err := c.Close(); err != nil {
					logger.Warn("local copies not kept for the next mount", "err", err)
				}
			})
		}
		defer closeCopies()
		copies = c
	} else if f.cacheDir != "" {
		// Copies a mount with --passthrough-min-size left: this one would
		// never use or bound them.
		dir := filepath.Join(f.cacheDir, localCopyDir)
		if _, err := os.Stat(dir); err == nil {
			logger.Info("removing the local copies left in the cache dir: this mount makes none", "dir", dir)
			if err := os.RemoveAll(dir); err != nil {
				logger.Warn("local copies not removed", "err", err)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted before mounting: %w", err) // a signal during the start: mount nothing
	}
	// Before the mount: an address in use or malformed fails the command
	// with nothing mounted, and /readyz says "not yet" until it serves.
	var mounted atomic.Bool
	if f.httpAddr != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("mountpoint %s: %w", dir, err)
		}
		srv := serve.New(f.httpAddr, stats.registry(), readiness(abs, raw, p.prefix, &mounted), logger)
		if err := srv.Start(); err != nil {
			return fmt.Errorf("--http %s: %w", f.httpAddr, err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}()
		logger.Info("serving metrics and health", "addr", srv.Addr())
	}

	m, err := fuse.New(dir, fuse.Config{
		Store:              st,
		Opener:             fuse.OpenerFunc(func(o store.Object) fuse.Reader { return loader.Open(o) }),
		Prefix:             p.prefix,
		FsName:             source,
		MetadataTTL:        f.metadataTTL,
		OutageGrace:        f.outageGrace,
		UID:                uint32(f.uid),
		GID:                uint32(f.gid),
		AllowOther:         f.allowOther,
		AnnounceAnyUser:    f.anyAnnounce,
		Logger:             logger,
		Debug:              f.debugFUSE,
		Control:            control{loader: loader, stats: stats},
		Preload:            preload,
		PreloadListed:      preloadListed,
		ListAhead:          f.listAhead,
		Copies:             copies,
		PassthroughMinSize: p.passthroughMin,
	})
	if err != nil {
		return err
	}
	loader.SetSiblings(m.FS)
	if f.push {
		loader.SetPageCache(m.FS)
	}
	mounted.Store(true)
	logger.Info("mounted", "source", source, "mountpoint", m.Dir,
		"ram_cache", sizeOrOff(p.ramBytes), "disk_cache", sizeOrOff(p.cacheBytes), "prefetch", f.prefetch, "sweep", sizeOrOff(p.sweepBytes))

	// Background work owned by this mount: cancelled before unmounting.
	bg, cancelBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWork sync.WaitGroup
	stopBG := func() { cancelBG(); bgWork.Wait() } // nothing may write the cache dir after this
	defer stopBG()
	// The RAM cache and the loader's blocks share --ram-cache-size.
	blocks := func() (onHeap, offHeap int64) {
		if ram != nil && ram.PutCopies() {
			return stats.prefetch.MemInUse.Load(), ram.FileBytes()
		}
		return stats.cache.RAMBytes.Load() + stats.prefetch.MemInUse.Load(), 0
	}
	bgWork.Go(func() { limitMemory(bg, p.ramBytes, blocks, logger) })
	if p.manifestMode == "refresh" && len(preload) > 0 {
		dirs := make([]string, len(preload))
		for i, d := range preload {
			dirs[i] = d.Dir
		}
		bgWork.Go(func() {
			err := m.FS.Refresh(bg, dirs, 2, func(ctx context.Context) error { return yieldTo(ctx, &stats.prefetch.Inflight, time.Second) })
			if err != nil && bg.Err() == nil {
				logger.Warn("refreshing the namespace manifest failed; stale directories are listed again after --metadata-ttl", "err", err)
			}
		})
	}
	bgWork.Go(func() { warnIfEmpty(bg, logger, m.FS, raw, p.bucket, p.prefix) })
	if manifestPath != "" {
		src := manifestSource{endpoint: f.s3.endpoint, bucket: p.bucket, prefix: p.prefix}
		bgWork.Go(func() {
			saveManifests(bg, logger, m.FS, preloadListed, manifestPath, src, 2*time.Second, f.metadataTTL)
		})
	}
	if p.prefetchListPaths != nil {
		if err := m.FS.Announce(ctx, p.prefetchListPaths); err != nil {
			logger.Warn("--prefetch-list not applied", "err", err)
		}
	}

	if f.cacheDir != "" {
		rec := filepath.Join(f.cacheDir, mountRecord)
		if err := os.WriteFile(rec, []byte(m.Dir+"\n"), 0o644); err != nil {
			logger.Warn("mount record not written in the cache dir: `cache stat` will not show this mount's counters", "path", rec, "err", err)
		}
		defer os.Remove(rec)
	}
	servePprof(f.pprofAddr, logger)
	if f.readyFile != "" {
		if err := os.WriteFile(f.readyFile, []byte(m.Dir+"\n"), 0o644); err != nil {
			logger.Warn("ready file not written", "path", f.readyFile, "err", err)
		}
		defer os.Remove(f.readyFile)
	}

	gone := make(chan struct{})
	go func() { m.Wait(); close(gone) }()
	select {
	case <-ctx.Done():
		logger.Info("signal received, unmounting", "mountpoint", m.Dir)
		stopBG()
		closeCopies()  // copies being made read through the loader: stop them, keep the made ones
		loader.Close() // stop prefetch first: nothing new starts during the unmount
		if err := m.Unmount(); err != nil {
			return err
		}
		logger.Info("unmounted", "mountpoint", m.Dir)
	case <-gone:
		logger.Info("unmounted from outside", "mountpoint", m.Dir)
	}
	return nil
}

// readyFileLeft says whether a ready file, as a mount writes it (a regular
// file holding a mountpoint's absolute path and a newline), is at path; an
// error if something else is.
func readyFileLeft(path string) (bool, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("is a %s, not a ready file a mount left: give a path of its own", fileKind(fi.Mode()))
	case fi.Size() > 4096:
		return false, errors.New("a file that is not a ready file a mount left: give a path of its own")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	line, ok := strings.CutSuffix(string(b), "\n")
	if !ok || !filepath.IsAbs(line) || strings.Contains(line, "\n") {
		return false, errors.New("a file that is not a ready file a mount left: give a path of its own")
	}
	return true, nil
}

// fileKind names a file's type for a message.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&(fs.ModeDevice|fs.ModeCharDevice) != 0:
		return "device"
	default:
		return "special file"
	}
}

// warnIfEmpty warns when nothing is under the mounted prefix: a typo in it
// (or an object's key given as the prefix) would hand the job an empty
// dataset without a word. Not an error: the data may land later.
func warnIfEmpty(ctx context.Context, logger *slog.Logger, fsys *fuse.FS, st store.Store, bucket, prefix string) {
	empty, err := fsys.Empty(ctx)
	if err != nil || !empty {
		return // a failing LIST shows at the job's first lookup
	}
	where := "s3://" + bucket + "/" + prefix
	if key := strings.TrimSuffix(prefix, "/"); key != "" {
		if _, err := st.Stat(ctx, key); err == nil {
			logger.Warn("the mounted prefix is an object, not a directory: the mount is empty; mount the prefix it is in",
				"object", "s3://"+bucket+"/"+key)
			return
		}
	}
	logger.Warn("nothing under the mounted prefix: the mount is empty (check the prefix)", "prefix", where)
}

// manifestPrefix starts the names of the namespace manifests in
// --cache-dir: one per endpoint and source.
const manifestPrefix = "manifest-"

// localCopyDir is where in --cache-dir the local copies live.
const localCopyDir = "copies"

// copiesSource names the store for the local copies: a mount adopts the
// copies left in its --cache-dir only if they came from the same one. A
// hash: the index keeps no endpoint in the clear.
func copiesSource(f mountFlags, p mountPlan) string {
	return shortHash(endpointID(f.s3.endpoint) + "\x00" + p.bucket)
}

// endpointID is --endpoint as one string per server, whatever way it was
// written: scheme and host in lower case, no default port, no trailing
// slash. (A warm with "http://minio:9000/" made copies that a mount with
// "http://minio:9000" removed as another store's.)
func endpointID(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return endpoint
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/")
}

// copySource reads the local copies' bytes through the loader.
type copySource struct{ l *prefetch.Loader }

func (s copySource) Open(obj store.Object) localcopy.Reader { return s.l.Open(obj) }

// openCache builds the RAM and disk tiers the flags ask for; it returns the
// RAM tier apart too (nil when off), for the loader to reserve room in.
func openCache(f mountFlags, p mountPlan, logger *slog.Logger, stats *cache.Stats) (cache.Tier, *cache.RAM, func(), error) {
	var ram, disk cache.Tier
	var ramTier *cache.RAM
	var closers []func()
	if p.ramBytes > 0 {
		r, err := cache.NewRAM(p.ramBytes, stats)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("RAM cache: %w", err)
		}
		ram, ramTier = r, r
		closers = append(closers, r.Close)
	}
	if f.cacheDir != "" {
		opts := cache.DefaultDiskOptions(f.cacheDir, p.cacheBytes)
		opts.Compress = f.cacheCompress
		opts.MinFreeFraction = p.minFree
		// Room for a burst of small blocks (the sweep fetches at full
		// parallelism). The bytes: over a RAM tier the queue holds what RAM
		// gave up, memory beyond --ram-cache-size, so it keeps the default
		// (the sweep waits for the disk rather than have its blocks
		// dropped); without one, a quarter of the prefetch memory.
		opts.QueueLen = int(max(64, min(1024, p.prefetchMem/p.blockSize*8)))
		if ram == nil {
			opts.QueueBytes = max(cache.DefaultQueueBytes, p.prefetchMem/4)
		}
		opts.Writers = 4
		opts.Logger = logger
		opts.Stats = stats
		d, err := cache.NewDisk(opts)
		if err != nil {
			if errors.Is(err, cache.ErrInUse) {
				err = fmt.Errorf("%w%s", err, cacheUser(f.cacheDir))
			}
			return nil, nil, nil, fmt.Errorf("disk cache: %w", err)
		}
		if d.Disabled() { // a read-only directory: what it holds is served
			logger.Warn("the disk cache serves what --cache-dir holds and caches nothing new: it cannot be written",
				"dir", f.cacheDir, "err", d.Err())
		}
		disk = d
		closers = append(closers, func() {
			if err := closeWithin(d.Close, diskCloseTimeout); err != nil {
				logger.Warn("closing the disk cache", "err", err)
			}
		})
	}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if ram == nil && disk == nil {
		return nil, nil, closeAll, nil
	}
	tiered := cache.NewTiered(ram, disk)
	// Blocks only RAM holds reach the disk when the mount ends, so the next
	// one starts warm; within a pod's grace period (30 s by default), as
	// far as the disk keeps up. Runs first: closers run in reverse.
	closers = append(closers, func() {
		t0 := time.Now()
		saved, left := tiered.Drain(t0.Add(drainTimeout))
		d, _ := disk.(*cache.Disk)
		switch {
		case left > 0 && d != nil && d.Disabled():
			logger.Warn("RAM cache not saved to the disk cache: it stopped taking writes", "saved", saved, "not_saved", left, "err", d.Err())
		case left > 0:
			logger.Warn("RAM cache saved to the disk cache in part: the disk cache is full, or did not keep up within "+drainTimeout.String(),
				"saved", saved, "not_saved", left, "seconds", time.Since(t0).Seconds())
		case saved > 0:
			logger.Info("RAM cache saved to the disk cache", "blocks", saved, "seconds", time.Since(t0).Seconds())
		}
	})
	return tiered, ramTier, closeAll, nil
}

// drainTimeout bounds the save of the RAM cache to disk at exit.
const drainTimeout = 20 * time.Second

// diskCloseTimeout bounds the disk cache's Close at exit: the writes it
// waits for (up to its queue's 64 MiB) and the save of its policy state.
const diskCloseTimeout = 30 * time.Second

// closeWithin runs close and waits for it at most d: a disk that hangs
// must not hold the exit of a mount already unmounted (a kubelet would
// kill it after the grace period). What close has not done by then is
// left: the next mount checks what the cache holds, as after a crash.
func closeWithin(close func() error, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- close() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("not done within %s (a hung disk?): exiting without it; the next mount checks what the cache holds", d)
	}
}

type manifestSource struct{ endpoint, bucket, prefix string }

// saveManifests keeps the manifest at path up to date with the listings the
// mount makes: it saves them once no new listing has come for a quiet
// period (a dataloader lists its directories in a burst at start), and
// once more when ctx ends (unmount) if anything changed. Directories are
// listed on demand only, never walked in the background: a job that reads
// one subtree of a large bucket lists that subtree alone.
//
// A relisting that finds nothing new changes no generation, but makes the
// listings younger: the manifest is saved again once its date would move by
// a quarter of ttl (at unmount, by anything), or a remount would find it
// older than ttl and list every directory again. preloaded is the date of
// the manifest the mount started from, zero for none.
func saveManifests(ctx context.Context, logger *slog.Logger, fsys *fuse.FS, preloaded time.Time, path string, src manifestSource,
	quiet, ttl time.Duration) {
	// Generation 1 is the preload, installed before the mount served: on
	// disk already. Listings made since are not.
	saved := uint64(0)
	savedListed := preloaded
	if !preloaded.IsZero() {
		saved = 1
	}
	save := func(final bool) {
		dirs, gen, listed := fsys.Snapshot()
		younger := listed.Sub(savedListed)
		if gen == saved && !(younger > 0 && (final || younger >= ttl/4)) {
			return
		}
		// Created is when the oldest listing was made: the next mount
		// trusts them all for --metadata-ttl from then.
		m := &store.Manifest{Endpoint: src.endpoint, Bucket: src.bucket, Prefix: src.prefix, Created: listed}
		if listed.IsZero() {
			m.Created = time.Now()
		}
		// As the disk cache at its Close: a directory emptied from outside
		// would refuse the next mount once this file is in it.
		if err := cache.CheckDir(filepath.Dir(path)); err != nil {
			logger.Warn("namespace manifest not saved: the cache directory lost its marker (emptied from outside?)", "err", err)
			return
		}
		nDirs, nFiles, err := store.SaveManifest(path, m, dirs)
		if err != nil {
			logger.Warn("namespace manifest not saved", "err", err)
			return
		}
		saved, savedListed = gen, m.Created
		logger.Debug("namespace manifest saved", "directories", nDirs, "files", nFiles)
	}
	t := time.NewTicker(quiet)
	defer t.Stop()
	last := saved
	for {
		select {
		case <-ctx.Done():
			save(true)
			return
		case <-t.C:
			if gen := fsys.Generation(); gen == last {
				save(false)
			} else {
				last = gen
			}
		}
	}
}

// yieldTo waits until no GET is in flight (busy is the gauge), or at most
// maxWait, so that background work takes idle moments but still progresses
// under constant load.
func yieldTo(ctx context.Context, busy *atomic.Int64, maxWait time.Duration) error {
	const poll = 20 * time.Millisecond
	for waited := time.Duration(0); busy.Load() > 0 && waited < maxWait; waited += poll {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
	return ctx.Err()
}

// readiness: this process has mounted dir, a FUSE mount is what dir shows,
// and the store answers. Any mount point is not enough: in a pod dir is one
// (the shared volume) before dataccel mounts, and a trainer let through
// then would read an empty directory.
func readiness(dir string, st *s3.Store, prefix string, mounted *atomic.Bool) func(context.Context) error {
	return func(ctx context.Context) error {
		if !mounted.Load() {
			return fmt.Errorf("mount %s: not mounted yet", dir)
		}
		if ok, err := fuse.IsFUSEMountpoint(dir); err != nil || !ok {
			return fmt.Errorf("mount %s is not live", dir)
		}
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := st.Check(ctx, prefix); err != nil {
			return fmt.Errorf("store not answering: %w", err)
		}
		return nil
	}
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// humanBytes is n bytes for people, in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%dB", n)
	}
}

// sizeOrOff is a cache bound for people: "off" when there is none.
func sizeOrOff(n int64) string {
	if n <= 0 {
		return "off"
	}
	return humanBytes(n)
}

// servePprof serves Go's profiles on addr (none when empty) for the life of
// the process, for performance work.
func servePprof(addr string, logger *slog.Logger) {
	if addr == "" {
		return
	}
	go func() {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		logger.Warn("pprof server stopped", "err", http.ListenAndServe(addr, mux))
	}()
}
