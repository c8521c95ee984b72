package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/bench"
	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/fuse"
	"github.com/dataccel/dataccel/localcopy"
	"github.com/dataccel/dataccel/prefetch"
	"github.com/dataccel/dataccel/store"
)

type warmFlags struct {
	mount       mountFlags // s3 and cache flags, shared with mount
	list        string
	concurrency int
	quiet       bool
}

func newWarmCmd(logger *slog.Logger) *cobra.Command {
	var f warmFlags
	cmd := &cobra.Command{
		Use:   "warm s3://bucket[/prefix] --cache-dir DIR | MOUNTPOINT[/subdir]",
		Short: "Fill the disk cache with a dataset at full parallelism (resumable)",
		Long: `warm fetches every object of a prefix into the disk cache before training, with a
progress bar. Run it again after an interruption: what is cached is skipped. Given a
directory of a running dataccel mount instead, it reads every file under it through the
mount, which fills that mount's cache, and reads them again past the page cache (up to
three passes) while the mount's disk cache drops writes for want of disk speed. With
--passthrough-min-size, files at least that large go into whole local copies instead of the
disk cache, which the next mount with the same flag adopts. It exits non-zero and lists what
failed.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("warm takes 1 argument, s3://bucket[/prefix] or a directory of a mount; got %d", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.mount.changed = cmd.Flags().Changed
			servePprof(f.mount.pprofAddr, logger)
			if strings.HasPrefix(args[0], "s3://") {
				return warmStore(cmd.Context(), logger, f, args[0])
			}
			// Through a mountpoint the mount's own store, cache and block
			// size apply: say so of the flags that would set them.
			var ignored []string
			cmd.Flags().Visit(func(fl *pflag.Flag) {
				switch fl.Name {
				case "list", "concurrency", "quiet", "pprof", "log-level":
				default:
					ignored = append(ignored, "--"+fl.Name)
				}
			})
			if len(ignored) > 0 {
				logger.Warn("flags with no effect through a mountpoint (the mount's own settings apply)", "flags", strings.Join(ignored, " "))
			}
			return warmMount(cmd.Context(), logger, f, args[0])
		},
	}
	f.mount.register(cmd)
	for _, name := range []string{"allow-other", "announce-any-user", "uid", "gid", "metadata-ttl", "outage-grace", "debug-fuse", "prefetch", "prefetch-memory",
		"prefetch-list", "prefetch-inflight", "prefetch-push", "sweep", "manifest", "http", "ready-file", "hedge", "ram-cache-size", "max-inflight",
		"list-ahead"} {
		cmd.Flags().MarkHidden(name)
	}
	cmd.Flags().Lookup("passthrough-min-size").Usage = "with s3://...: also make the local copies a mount with this --passthrough-min-size reads large files from, which the next mount on --cache-dir adopts; 0: none"
	cmd.Flags().StringVar(&f.list, "list", "", "warm only the paths in this file (one per line, relative to the prefix or directory; a tab and what follows it, such as the size bench run --files-from takes, are ignored)")
	cmd.Flags().IntVar(&f.concurrency, "concurrency", 64, "objects fetched in parallel (through a mount, a file of n MiB counts n times, at most 8)")
	cmd.Flags().BoolVarP(&f.quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

// readList reads a list of relative paths, cleaned so none climbs out.
func readList(file string) (map[string]int, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageError{fmt.Errorf("--list: %w", err)}
	}
	set := map[string]int{} // path: its place in the list, from 1
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// What follows a tab is ignored: bench run --files-from lists take
		// a size there, and the same list warms the same files.
		name, _, _ := strings.Cut(sc.Text(), "\t")
		if line := strings.TrimSpace(name); line != "" {
			if p := path.Clean("/" + line)[1:]; set[p] == 0 {
				set[p] = len(set) + 1
			}
		}
	}
	return set, sc.Err()
}

// checkFound fails a warm that found nothing to warm under where, and
// warns when --list (want, nil without one) names paths it did not find:
// a mistyped prefix, path or list would leave the job it prepares nothing
// warm. kind names what was looked for, fix what to check.
func checkFound(logger *slog.Logger, found int, want map[string]int, kind, where, fix string) error {
	if found == 0 {
		what := "no " + kind + " under " + where
		if want != nil {
			what += " named by --list"
		}
		return errors.New("warm: " + what + ": check the " + fix)
	}
	if want != nil && found < len(want) {
		logger.Warn("--list names paths that are not "+kind+"s under "+where, "missing", len(want)-found)
	}
	return nil
}

// warmFailure is one object that could not be warmed.
type warmFailure struct {
	key string
	err error
}

func reportFailures(failed []warmFailure, what string) error {
	if len(failed) == 0 {
		return nil
	}
	sort.Slice(failed, func(i, j int) bool { return failed[i].key < failed[j].key })
	for i, f := range failed {
		if i == 50 {
			fmt.Fprintf(os.Stderr, "  ... and %d more\n", len(failed)-50)
			break
		}
		fmt.Fprintf(os.Stderr, "  failed: %s: %v\n", f.key, f.err)
	}
	return fmt.Errorf("%d %s failed to warm (listed above); run warm again to retry them", len(failed), what)
}

func warmStore(ctx context.Context, logger *slog.Logger, f warmFlags, rawURL string) error {
	if f.mount.cacheDir == "" {
		return usageError{errors.New("warm s3://... needs --cache-dir (the disk cache to fill)")}
	}
	if f.concurrency < 1 {
		return usageError{fmt.Errorf("--concurrency %d: want at least 1", f.concurrency)}
	}
	p, err := f.mount.plan(rawURL)
	if err != nil {
		return err
	}
	for _, w := range p.warnings {
		logger.Warn(w)
	}
	want, err := readList(f.list)
	if err != nil {
		return err
	}
	f.mount.s3.log = logger
	raw, err := f.mount.s3.openStore(ctx, p.bucket, p.prefix, f.mount.wait.connect)
	if err != nil {
		return err
	}
	var counts store.Counts
	counted := store.NewCounting(raw)
	counted.C = &counts
	st := store.NewRetrying(counted, f.mount.wait.retry(nil, logger))

	var cstats cache.Stats
	opts := cache.DefaultDiskOptions(f.mount.cacheDir, p.cacheBytes)
	opts.Compress = f.mount.cacheCompress
	opts.MinFreeFraction = p.minFree
	opts.Logger = logger
	opts.Stats = &cstats
	opts.QueueLen = 4 * f.concurrency
	budget := max(p.prefetchMem, int64(f.concurrency)*p.blockSize)
	opts.QueueBytes = budget // warm's memory is the queue
	disk, err := cache.NewDisk(opts)
	if err != nil {
		if errors.Is(err, cache.ErrInUse) {
			return fmt.Errorf("disk cache: %w%s (to warm the cache of a running mount, run warm on its mountpoint)", err, cacheUser(f.mount.cacheDir))
		}
		return fmt.Errorf("disk cache: %w", err)
	}
	defer disk.Close()

	var objs []store.Object
	var total int64
	err = store.ListAll(ctx, st, p.prefix, 32, func(o store.Object) error {
		if strings.HasSuffix(o.Key, "/") || (want != nil && want[strings.TrimPrefix(o.Key, p.prefix)] == 0) {
			return nil
		}
		objs = append(objs, o)
		total += o.Size
		return nil
	})
	if err != nil {
		return err
	}
	if err := checkFound(logger, len(objs), want, "object", "s3://"+p.bucket+"/"+p.prefix, "prefix"); err != nil {
		return err
	}
	// In the order the job reads: --list's, else a walk's of the tree;
	// ListAll's own is no order. A cache too small for all of them takes
	// the first.
	if want != nil {
		slices.SortFunc(objs, func(a, b store.Object) int {
			return cmp.Compare(want[strings.TrimPrefix(a.Key, p.prefix)], want[strings.TrimPrefix(b.Key, p.prefix)])
		})
	} else {
		slices.SortFunc(objs, func(a, b store.Object) int { return walkOrder(a.Key, b.Key) })
	}
	logger.Info("warming", "objects", len(objs), "bytes", total, "cache_dir", f.mount.cacheDir)
	// Objects that get a local copy skip the disk cache: the copy holds
	// them, and the mount reads them from it.
	copied, objs := forCopies(logger, p, objs)

	var pstats prefetch.Stats
	loader := prefetch.NewLoader(st, disk, prefetch.Options{
		BlockSize: p.blockSize, MaxInflight: f.concurrency, MemoryBudget: budget,
		Logger: logger, Stats: &pstats,
	})
	defer loader.Close()

	// A disk cache that stops taking writes (a full or read-only file
	// system, an I/O error) ends the warm: the rest would only be
	// downloaded.
	wctx, stop := context.WithCancel(ctx) // the check after the passes says why
	defer stop()
	fill := func(ctx context.Context, o store.Object) error {
		err := loader.Fill(ctx, o)
		if disk.Disabled() {
			stop()
		}
		return err
	}
	// A dataset larger than the cache: warm fetches the part that fits, in
	// the order of objs (a walk's, or --list's), not the rest, which the
	// cache would refuse: its policy keeps the blocks it holds (another
	// dataset's too) rather than evict them for blocks seen once, so the
	// room is what it does not hold. Blocks that compress take less than
	// their size: each round after the first plans by the share of it the
	// last one took, until nothing more fits.
	var failed []warmFailure
	var werr error
	left := 0    // objects warm did not fetch for want of room
	share := 1.0 // of an object's room stored raw, what its blocks take
	for round, pending := 1, objs; len(pending) > 0 && round <= 4; round++ {
		held := cstats.DiskBytes.Load()
		room := warmCapacity(p, f.mount.cacheDir, held) - held - disk.Reserved()
		todo, rest, raw := warmPlan(loader, pending, room, func(o store.Object) int64 { return footprint(disk, o, p.blockSize) }, share)
		if round == 1 && len(rest) > 0 {
			logger.Warn("the dataset is larger than the room in the disk cache: warm fetches the part that fits, in the order a walk of the tree reads (--list sets another), not the rest, which the cache would refuse "+
				"(what it holds stays: `dataccel cache purge` empties it of other datasets)",
				"objects", len(objs), "fitting", len(objs)-len(rest), "room_bytes", max(room, 0), "cache_holds_bytes", held)
		}
		left = len(rest)
		if len(todo) == 0 {
			break
		}
		// The disk tier writes in the background and drops a write when its
		// queue is full (a reader must never wait on it); warm does want every
		// block, so it checks what landed and fetches the rest again.
		var f2 []warmFailure
		f2, werr = warmPasses(todo, func(pass int, pending []store.Object) ([]warmFailure, bool, error) {
			label := "warm"
			if round > 1 {
				label = fmt.Sprintf("warm, round %d", round)
			}
			if pass > 1 {
				label += fmt.Sprintf(", pass %d", pass)
			}
			dropped := cstats.DiskDropped.Load()
			failed, err := warmEach(wctx, pending, f.concurrency, benchProgress(f.quiet).Begin(label, int64(len(pending))), fill)
			disk.Flush()
			return failed, cstats.DiskDropped.Load() > dropped, err
		}, func(pending []store.Object, failed []warmFailure) []store.Object {
			missing, _ := notCached(loader, pending, failed)
			return missing
		})
		failed = append(failed, f2...)
		if werr != nil || disk.Disabled() {
			break
		}
		if raw > 0 {
			share = min(1, max(0.05, 1.05*float64(cstats.DiskBytes.Load()-held)/float64(raw)))
		}
		pending = rest
	}
	disk.Flush()
	s := cstats.Snapshot()
	outcome := "warm done"
	if werr != nil {
		outcome = "warm stopped" // what it fetched stays cached
	}
	// objs are the disk cache's part: the ones for local copies come after.
	logger.Info(outcome, "objects", len(objs), "for_local_copies", len(copied), "gets", counts.Gets.Load(), "fetched_bytes", counts.Bytes.Load(),
		"already_cached_blocks", pstats.CacheHits.Load(), "cache_entries", s.DiskEntries, "cache_bytes", s.DiskBytes,
		"not_admitted_cache_full", s.DiskRejected, "dropped_writes", s.DiskDropped)
	if disk.Disabled() {
		missing, _ := notCached(loader, objs, nil)
		return fmt.Errorf("warm: the disk cache at %s stopped taking writes (%w): %d of the %d objects are not cached",
			f.mount.cacheDir, disk.Err(), len(missing), len(objs))
	}
	if werr != nil {
		return fmt.Errorf("warm interrupted (%w): run it again to fetch the rest", werr)
	}
	if s.DiskRejected > 0 || left > 0 {
		missing, missingBytes := notCached(loader, objs, failed)
		if err := reportFull(logger, f.mount.cacheDir, p, s.DiskBytes, objs, missing, missingBytes); err != nil {
			return err
		}
	}
	if err := reportFailures(failed, "objects"); err != nil {
		return err
	}
	if len(copied) > 0 {
		return warmCopies(ctx, logger, f, p, st, budget, copied)
	}
	return nil
}

// warmCapacity is the most the disk cache at dir can hold, holding held
// bytes now: its --cache-size, or what it holds and the free space above
// the --cache-min-free floor, whichever is less.
func warmCapacity(p mountPlan, dir string, held int64) int64 {
	capacity := p.cacheBytes
	if free, floor, err := cache.FreeSpace(dir, p.minFree); err == nil {
		capacity = min(capacity, held+max(free-floor, 0))
	}
	return capacity
}

// warmPlan splits objs, in order, into the ones that fit room bytes of the
// cache (todo: the ones it holds whole, and the ones missing blocks as long
// as each one's room on disk, fp times share, fits what is left) and the
// rest; one that does not fit is passed over for the ones after it (a job
// reads its files in order: the first ones are the ones to have). raw sums
// fp of the objects in todo missing blocks.
func warmPlan(loader *prefetch.Loader, objs []store.Object, room int64, fp func(store.Object) int64, share float64) (todo, rest []store.Object, raw int64) {
	for _, o := range objs {
		if loader.Uncached(o) == 0 {
			todo = append(todo, o)
			continue
		}
		n := fp(o)
		if need := int64(math.Ceil(float64(n) * share)); need <= room {
			room -= need
			raw += n
			todo = append(todo, o)
		} else {
			rest = append(rest, o)
		}
	}
	return todo, rest, raw
}

// footprint is the room obj's blocks of blockSize take in disk, stored raw.
func footprint(disk *cache.Disk, obj store.Object, blockSize int64) int64 {
	var n int64
	for off := int64(0); off < obj.Size; off += blockSize {
		n += disk.Footprint(cache.Key{Object: obj.Key, ETag: obj.ETag}, min(blockSize, obj.Size-off))
	}
	return n
}

// walkOrder compares keys as a walk of their tree reads them, name by name:
// "train/x" before "train-a/x", though '-' sorts before '/' in a key.
func walkOrder(a, b string) int {
	for i := range min(len(a), len(b)) {
		switch ca, cb := a[i], b[i]; {
		case ca == cb:
		case ca == '/':
			return -1
		case cb == '/':
			return 1
		default:
			return cmp.Compare(ca, cb)
		}
	}
	return cmp.Compare(len(a), len(b))
}

// reportFull says how much of objs the full disk cache could not take and
// which bound stopped it: the cache's --cache-size, or the free space of its
// file system down to --cache-min-free (space other files took). A warm
// that cached none of them fails: the job it prepares would read them all
// from the store; one that cached part warns, as a dataset larger than the
// cache can only be warmed in part.
func reportFull(logger *slog.Logger, dir string, p mountPlan, cacheBytes int64, objs, missing []store.Object, missingBytes int64) error {
	if len(missing) == 0 {
		return nil
	}
	why := fmt.Sprintf("the disk cache at %s holds %s of its --cache-size %s", dir, humanBytes(cacheBytes), humanBytes(p.cacheBytes))
	if free, floor, err := cache.FreeSpace(dir, p.minFree); err == nil {
		why += fmt.Sprintf("; its file system has %s free, %s above the --cache-min-free floor of %s",
			humanBytes(free), humanBytes(max(free-floor, 0)), humanBytes(floor))
	}
	nonEmpty := 0 // an empty object is cached for nothing: one cached alone is no warm
	for _, o := range objs {
		if o.Size > 0 {
			nonEmpty++
		}
	}
	if len(missing) == nonEmpty {
		return fmt.Errorf("warm cached none of the %d objects (%s): %s", len(objs), humanBytes(missingBytes), why)
	}
	logger.Warn("the cache is full: part of the dataset was not cached", "objects_not_cached", len(missing),
		"bytes_not_cached", missingBytes, "objects", len(objs), "why", why)
	return nil
}

// forCopies splits objs into the ones that get a local copy (at least
// --passthrough-min-size, as many as fit --local-copies: more would evict
// the first ones) and the rest.
func forCopies(logger *slog.Logger, p mountPlan, objs []store.Object) (copied, rest []store.Object) {
	if p.passthroughMin <= 0 || p.localCopyBytes <= 0 {
		return nil, objs
	}
	if why := fuse.PassthroughUnavailable(); why != "" {
		logger.Warn("no local copies made: a mount here could not use them; every file goes to the disk cache", "why", why)
		return nil, objs
	}
	var bytes, skipped int64
	for _, o := range objs {
		switch {
		case o.Size < p.passthroughMin:
			rest = append(rest, o)
		case bytes+o.Size > p.localCopyBytes:
			skipped++
			rest = append(rest, o)
		default:
			copied = append(copied, o)
			bytes += o.Size
		}
	}
	if skipped > 0 {
		logger.Warn("--local-copies is too small for every large file: the rest goes to the disk cache and is read through the mount", "without_copy", skipped)
	}
	return copied, rest
}

// warmCopies makes the local copies a mount with the same
// --passthrough-min-size would make at the first open of each large file,
// straight from the store (no cache tier: the copy is the cache); the
// mount adopts them (package localcopy).
func warmCopies(ctx context.Context, logger *slog.Logger, f warmFlags, p mountPlan, st store.Store, budget int64, objs []store.Object) error {
	var pstats prefetch.Stats
	loader := prefetch.NewLoader(st, nil, prefetch.Options{
		BlockSize: p.blockSize, MaxInflight: f.concurrency, MemoryBudget: budget,
		Logger: logger, Stats: &pstats,
	})
	defer loader.Close()
	var stats localcopy.Stats
	copies, err := localcopy.New(filepath.Join(f.mount.cacheDir, localCopyDir), copySource{loader}, localcopy.Options{
		Budget: p.localCopyBytes, Source: copiesSource(f.mount, p), Chunk: int(p.blockSize), MinFree: p.minFree, Logger: logger, Stats: &stats})
	if err != nil {
		return err
	}
	// 16 at a time beat 4 (bench/RESULTS.md, session 28).
	failed, werr := warmEach(ctx, objs, min(f.concurrency, 16), benchProgress(f.quiet).Begin("local copies", int64(len(objs))),
		func(ctx context.Context, o store.Object) error {
			_, release, err := copies.Acquire(ctx, o)
			if err == nil {
				release()
			}
			return err
		})
	if err := copies.Close(); err != nil {
		return err
	}
	logger.Info("local copies done", "made", stats.Made.Load(), "kept_from_before", stats.Adopted.Load(),
		"bytes", stats.Bytes.Load(), "failed", len(failed))
	if werr != nil {
		return fmt.Errorf("warm interrupted (%w): run it again to make the rest", werr)
	}
	return reportFailures(failed, "local copies")
}

// warmPasses runs pass over objs and, while the disk tier dropped writes
// in the pass before (its queue was full), again over the objects missing
// from the cache but the failed ones, three passes at most. It returns the
// failures of every pass: a later pass skips those of the one before, and
// must not make them look cached.
func warmPasses(objs []store.Object, pass func(n int, pending []store.Object) (failed []warmFailure, dropped bool, err error),
	missing func(pending []store.Object, failed []warmFailure) []store.Object) ([]warmFailure, error) {
	var failed []warmFailure
	for n, pending := 1, objs; len(pending) > 0; n++ {
		f, dropped, err := pass(n, pending)
		failed = append(failed, f...)
		if err != nil || n == 3 || !dropped {
			return failed, err
		}
		pending = missing(pending, failed)
	}
	return failed, nil
}

// warmEach runs fn on every object of objs, concurrency at a time, and
// returns the ones it failed for; it stops at the first error of ctx.
func warmEach(ctx context.Context, objs []store.Object, concurrency int, bar *bench.Bar, fn func(context.Context, store.Object) error) ([]warmFailure, error) {
	var mu sync.Mutex
	var failed []warmFailure
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for _, o := range objs {
		if gctx.Err() != nil {
			break // interrupted: the objects left are neither fetched nor counted
		}
		g.Go(func() error {
			if err := fn(gctx, o); err != nil {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				mu.Lock()
				failed = append(failed, warmFailure{o.Key, err})
				mu.Unlock()
			}
			bar.Add(1, o.Size)
			return nil
		})
	}
	err := g.Wait()
	bar.Done()
	return failed, err
}

// notCached returns the objects of objs (but the failed ones) that the
// cache lacks a block of, and the bytes of those blocks.
func notCached(loader *prefetch.Loader, objs []store.Object, failed []warmFailure) (missing []store.Object, bytes int64) {
	skip := make(map[string]bool, len(failed))
	for _, f := range failed {
		skip[f.key] = true
	}
	for _, o := range objs {
		if skip[o.Key] {
			continue
		}
		if n := loader.Uncached(o); n > 0 {
			missing = append(missing, o)
			bytes += n
		}
	}
	return missing, bytes
}
