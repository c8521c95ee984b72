package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/dataccel/dataccel/bench"
	"github.com/dataccel/dataccel/cache"
)

// warmMountPasses bounds the passes of a warm through a mount: the first
// reads every file, the later ones read them again when the mount's disk
// cache dropped writes during the one before.
const warmMountPasses = 3

// maxFileSlots is the most concurrency slots one file takes when warming
// through a mount: one per MiB of the file, up to this. A large file keeps
// the mount's current block and its read-ahead in memory while it is read;
// with --concurrency of them at once they outgrow a RAM cache of a few
// hundred MiB, and blocks the RAM cache gives up before they are read are
// fetched or read from disk again. Small files still go --concurrency at once.
const maxFileSlots = 8

// directReadBuf is the size of the page-aligned buffer warm reads files
// with, as O_DIRECT wants in the passes past the page cache (FUSE splits
// each read into READs of the mount's max_read).
const directReadBuf = 1 << 20

// dropSettle is how long warm waits after a pass before it reads the mount's
// counters: the RAM cache hands its given-up blocks on asynchronously, and
// MOUNT/.dataccel/stats may serve a snapshot a little older than that.
const dropSettle = 500 * time.Millisecond

type warmFile struct {
	path string
	size int64
}

// mountWarmer warms a mount's caches by reading its files.
type mountWarmer struct {
	logger      *slog.Logger
	concurrency int
	quiet       bool
	// stats is the mount's .dataccel/stats file, "" when the directory is
	// not in a dataccel mount (then one pass, with nothing to check).
	stats string
	// read reads a file whole; direct: past the kernel's page cache, so
	// that every block reaches the mount.
	read   func(path string, direct bool, buf []byte) (int64, error)
	settle time.Duration
}

func warmMount(ctx context.Context, logger *slog.Logger, f warmFlags, dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return usageError{fmt.Errorf("%s: no such directory (a mount's directory, or s3://bucket/prefix with --cache-dir)", dir)}
	}
	if err != nil || !fi.IsDir() {
		return usageError{fmt.Errorf("%s: not a directory of a mount (or use s3://bucket/prefix with --cache-dir)", dir)}
	}
	if f.concurrency < 1 {
		return usageError{fmt.Errorf("--concurrency %d: want at least 1", f.concurrency)}
	}
	want, err := readList(f.list)
	if err != nil {
		return err
	}
	var files []warmFile
	var total int64
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if want != nil && want[filepath.ToSlash(rel)] == 0 {
			return nil
		}
		var size int64
		if info, err := d.Info(); err == nil {
			size = info.Size()
		}
		total += size
		files = append(files, warmFile{p, size})
		return nil
	})
	if err != nil {
		return fmt.Errorf("walk %s: %w", dir, err)
	}
	if err := checkFound(logger, len(files), want, "file", dir, "path"); err != nil {
		return err
	}
	w := mountWarmer{
		logger: logger, concurrency: f.concurrency, quiet: f.quiet,
		stats: findMountStats(dir), read: readWhole, settle: dropSettle,
	}
	if w.stats == "" {
		logger.Warn("not a dataccel mount (no .dataccel/stats above it): reading the files once, without checking what the cache kept", "dir", dir)
	}
	logger.Info("warming through the mount", "files", len(files), "bytes", total)
	return w.run(ctx, files)
}

// run reads every file, then reads them all again past the page cache while
// the mount's disk cache dropped writes during the pass before (its write
// queue was full: the disk writes slower than the network delivers), at
// most warmMountPasses times in all.
func (w mountWarmer) run(ctx context.Context, files []warmFile) error {
	start := time.Now()
	before := w.counters()
	dropped, counted := before["cache_disk_dropped_total"]
	var failed []warmFailure // in the first pass: the later ones only add to the cache
	for pass := 1; ; pass++ {
		label := "warm"
		if pass > 1 {
			label = fmt.Sprintf("warm, pass %d (past the page cache)", pass)
		}
		f, err := w.pass(ctx, files, pass > 1, benchProgress(w.quiet).Begin(label, int64(len(files))))
		if err != nil {
			return fmt.Errorf("warm interrupted (%w): run it again to fetch the rest", err)
		}
		if pass == 1 {
			failed = f
		} else if len(f) > 0 {
			w.logger.Warn("reading again past the page cache failed: part of the files may not be in the disk cache",
				"files", len(f), "first", f[0].key, "err", f[0].err)
			break
		}
		if !counted {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("warm interrupted (%w): run it again to fetch the rest", ctx.Err())
		case <-time.After(w.settle):
		}
		now, ok := w.counters()["cache_disk_dropped_total"]
		if !ok || now <= dropped {
			break
		}
		if pass == warmMountPasses {
			w.logger.Warn("the mount's disk cache still dropped writes: part of the files are not in it. "+
				"Warm before mounting (dataccel warm s3://... --cache-dir DIR), which waits for the disk",
				"dropped_blocks", now-dropped, "passes", pass)
			break
		}
		w.logger.Info("the mount's disk cache dropped writes (its disk writes slower than the network delivers): reading the files again",
			"dropped_blocks", now-dropped)
		dropped = now
	}
	w.logger.Info("warm done", "files", len(files), "took", time.Since(start).Round(time.Millisecond))
	// Blocks reach the disk cache as the RAM cache gives them up: a warm
	// the RAM cache holds whole learns of a full disk only later.
	after := w.counters()
	if was, ok := before["cache_disk_rejected_total"]; ok {
		if now := after["cache_disk_rejected_total"]; now > was {
			w.logger.Warn("the mount's disk cache is full (its --cache-size, or its file system down to --cache-min-free): part of the files are not in it",
				"writes_refused", now-was)
		}
	}
	// A disk error turns the tier's writes off for the mount's life (an
	// unwritable --cache-dir at start, say): what the RAM cache gives up
	// is then lost, and nothing outlives the mount.
	if errs := after["cache_disk_errors_total"]; errs > 0 {
		w.logger.Warn("the mount's disk cache takes no writes since an error (the mount's log says which): the files are in its RAM cache at most",
			"disk_errors", errs)
	}
	w.reportTiers(files, after)
	return reportFailures(failed, "files")
}

// reportTiers says where the warmed files stay when that is not the disk
// cache alone: a warm through a mount fills its RAM cache, which gives
// blocks to the disk cache as it evicts them, or when the mount ends
// cleanly.
func (w mountWarmer) reportTiers(files []warmFile, after map[string]int64) {
	diskLimit, known := after["cache_disk_bytes_limit"]
	if !known {
		return // an older mount, or its counters could not be read
	}
	var total int64
	for _, f := range files {
		total += f.size
	}
	ram := after["cache_ram_bytes_limit"]
	switch {
	case diskLimit == 0 && total > ram:
		w.logger.Warn("the mount has no disk cache (--cache-dir), and its RAM cache is smaller than the files: the job will fetch again what it gave up",
			"ram_cache", humanBytes(ram), "files_bytes", humanBytes(total))
	case diskLimit == 0:
		w.logger.Info("the mount has no disk cache (--cache-dir): the files are in its RAM cache, for as long as the mount runs")
	case after["cache_ram_bytes"] > 0:
		w.logger.Info("part of the files is in the mount's RAM cache: its disk cache gets them as RAM gives them up, or when the mount ends "+
			"cleanly (not if it is killed); for a disk cache filled at once, warm s3://... --cache-dir DIR before mounting",
			"ram_bytes", humanBytes(after["cache_ram_bytes"]))
	}
}

// pass reads every file once, a file of n MiB taking min(n, maxFileSlots)
// of the concurrency slots (at least one), and returns the ones that failed.
func (w mountWarmer) pass(ctx context.Context, files []warmFile, direct bool, bar *bench.Bar) ([]warmFailure, error) {
	defer bar.Done()
	slots := int64(w.concurrency)
	sem := semaphore.NewWeighted(slots)
	bufs := make(chan []byte, w.concurrency) // at most one per file being read
	var mu sync.Mutex
	var failed []warmFailure
	g, gctx := errgroup.WithContext(ctx)
	for _, f := range files {
		n := min(slots, max(1, min(maxFileSlots, f.size>>20)))
		if err := sem.Acquire(gctx, n); err != nil {
			break
		}
		g.Go(func() error {
			defer sem.Release(n)
			if gctx.Err() != nil {
				return gctx.Err()
			}
			var buf []byte
			select {
			case buf = <-bufs:
			default:
				buf = cache.AlignedBuf(directReadBuf)
			}
			got, err := w.read(f.path, direct, buf)
			select {
			case bufs <- buf:
			default:
			}
			if err != nil {
				mu.Lock()
				failed = append(failed, warmFailure{f.path, err})
				mu.Unlock()
			}
			bar.Add(1, got)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return failed, err
	}
	return failed, ctx.Err()
}

// counters reads the mount's counters: nil when there is no mount to ask
// or its answer cannot be read (a read of the nil map finds nothing).
func (w mountWarmer) counters() map[string]int64 {
	if w.stats == "" {
		return nil
	}
	b, err := os.ReadFile(w.stats)
	if err != nil {
		w.logger.Warn("cannot read the mount's counters", "err", err)
		return nil
	}
	var counters map[string]int64
	if err := json.Unmarshal(b, &counters); err != nil {
		w.logger.Warn("cannot read the mount's counters", "file", w.stats, "err", err)
		return nil
	}
	return counters
}

// findMountStats returns the .dataccel/stats file of the dataccel mount
// that dir lies in, or "" if none is found above it.
func findMountStats(dir string) string {
	f, _ := bench.MountFile(dir, "stats")
	return f
}

// readWhole reads the file at p to its end, len(buf) bytes at a time;
// direct opens it O_DIRECT (buf must then be page-aligned).
func readWhole(p string, direct bool, buf []byte) (int64, error) {
	flags := os.O_RDONLY
	if direct {
		flags |= syscall.O_DIRECT
	}
	fh, err := os.OpenFile(p, flags, 0)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	return bench.ReadAll(fh, buf)
}
