package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// Profile is the compute time of one sample on one emulated accelerator.
type Profile struct {
	Name      string
	PerSample time.Duration
	About     string
}

// Profiles lists the built-in compute profiles (MLPerf Storage's ResNet-50
// emulation, batch 400).
func Profiles() []Profile {
	return []Profile{
		{Name: "resnet50-a100", PerSample: 435 * time.Millisecond / 400, About: "ResNet-50 on A100: 0.435 s per 400 samples"},
		{Name: "resnet50-h100", PerSample: 224 * time.Millisecond / 400, About: "ResNet-50 on H100: 0.224 s per 400 samples"},
	}
}

// LookupProfile finds a built-in profile by name.
func LookupProfile(name string) (Profile, bool) {
	for _, p := range Profiles() {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// RunConfig is the loader emulation's protocol.
type RunConfig struct {
	// Accelerators is the number of emulated accelerators (data-parallel ranks).
	Accelerators int
	// Workers is the number of reader workers per accelerator (directories);
	// each loads whole batches, like a PyTorch DataLoader worker.
	Workers int
	// Concurrency is the number of reads in flight for s3:// sources.
	Concurrency int
	// Batch is the per-accelerator batch size in samples.
	Batch int
	// Prefetch is how many batches each worker may load ahead.
	Prefetch int
	Epochs   int
	// MaxSteps bounds the steps per epoch (0: the whole dataset).
	MaxSteps int
	// Profile names the compute profile; ComputePerSample is its time.
	Profile          string
	ComputePerSample time.Duration
	// Order is "shuffle" (a new permutation per epoch from Seed) or "dir".
	Order string
	Seed  uint64
	// DropCaches drops the kernel page cache before each epoch (needs root;
	// a failure is logged once and the run goes on).
	DropCaches bool
	// Announce writes each epoch's order to the dataccel mount's control
	// file before the epoch.
	Announce bool
	// PythonOpen makes directory sources open files as Python's open()
	// does before 3.14 (see DirSource.PythonOpen).
	PythonOpen bool
	// FileList, when set, names the files to read (ParseFileList), as a
	// job that knows its paths from an annotation file or a CSV does: a
	// directory path is not walked, and an object path keeps only these.
	FileList []File
	// FindMaxAccelerators searches the largest accelerator count with AU >= TargetAU.
	FindMaxAccelerators bool
	TargetAU            float64
	// Physical bounds: RTT, Bandwidth (bytes/s) and RequestRate (requests/s)
	// of the store; zero values are probed from the first s3:// source when
	// Probe is set, else left out.
	RTT         time.Duration
	Bandwidth   float64
	RequestRate float64
	Probe       bool

	Progress *Progress
	Logger   *slog.Logger
}

func (c RunConfig) withDefaults() RunConfig {
	if c.Accelerators <= 0 {
		c.Accelerators = 1
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.Batch <= 0 {
		c.Batch = 400
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 2
	}
	if c.Epochs <= 0 {
		c.Epochs = 3
	}
	if c.Order == "" {
		c.Order = "shuffle"
	}
	if c.TargetAU <= 0 {
		c.TargetAU = 0.9
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Step is the timeline of one training step: the batch for every
// accelerator was ready at Ready, compute ran until End (Compute is the
// nominal compute time; End-Ready the measured one).
type Step struct {
	Start, Ready, End time.Time
	Compute           time.Duration
}

// AU is the accelerator utilisation of a run of steps: compute time over
// wall time, from the end of the first step (its load is a cold start) to
// the end of the last. It uses the measured compute (End-Ready) so sleep
// overshoot is not counted as stall. Fewer than two steps: 0.
func AU(steps []Step) float64 {
	if len(steps) < 2 {
		return 0
	}
	var compute time.Duration
	for _, s := range steps[1:] {
		compute += s.End.Sub(s.Ready)
	}
	wall := steps[len(steps)-1].End.Sub(steps[0].End)
	if wall <= 0 {
		return 0
	}
	return min(1, compute.Seconds()/wall.Seconds())
}

// Stall is how long steps 2..n waited for their data: their span (from the
// end of the first step to the end of the last) minus their measured
// compute, so sleep overshoot is not counted. The first step's wait is the
// time to first batch. Fewer than two steps: 0.
func Stall(steps []Step) time.Duration {
	if len(steps) < 2 {
		return 0
	}
	span := steps[len(steps)-1].End.Sub(steps[0].End)
	for _, s := range steps[1:] {
		span -= s.End.Sub(s.Ready)
	}
	return max(0, span)
}

// Run runs the protocol on each source in turn, epoch by epoch (A B A B
// ...), so a comparison holds on a machine whose speed drifts. When an
// epoch (or the search for the most accelerators) fails, the result of the
// epochs that completed comes back with the error; nil when none started.
func Run(ctx context.Context, cfg RunConfig, sources ...Source) (*Result, error) {
	cfg = cfg.withDefaults()
	if len(sources) == 0 {
		return nil, errors.New("run: no paths")
	}
	if cfg.Order != "shuffle" && cfg.Order != "dir" {
		return nil, fmt.Errorf("run: order %q: want shuffle or dir", cfg.Order)
	}
	res := newResult(cfg)
	type pathState struct {
		src     Source
		files   []File
		readers int
		workers int
		ctl     *announcer
		// fileLevel: workers is the total GET concurrency (s3 sources).
		fileLevel bool
		// fetched counts what the store sent this path; nil where
		// nothing tells (a peer's mount, a local directory).
		fetched fetchCounter
	}
	states := make([]*pathState, len(sources))
	var announceErr error
	announced := 0
	var plain []string // directories outside a mount, read without announcing
	for i, src := range sources {
		if d, ok := src.(DirSource); ok && cfg.PythonOpen {
			d.PythonOpen = true
			src = d
		}
		t0 := time.Now()
		files, err := filesOf(ctx, src, cfg.FileList)
		if err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("run: %s: no files", src)
		}
		st := &pathState{src: src, files: files, workers: cfg.Workers, readers: cfg.Workers * cfg.Accelerators}
		if src.Kind() == "s3" {
			// Direct GETs: the network ceiling at a fixed GET concurrency.
			st.fileLevel, st.workers, st.readers = true, cfg.Concurrency, cfg.Concurrency
		}
		switch s := src.(type) {
		case StoreSource:
			if s.Counts != nil {
				st.fetched = storeCounter(s.Counts)
			}
		case DirSource:
			if f, _ := MountFile(s.Root, "stats"); f != "" {
				st.fetched = mountCounter(f)
			}
		}
		if cfg.Announce && src.Kind() == "dir" {
			// Beside a mount, a plain directory (the local-disk
			// reference) is read without an announcement, as direct
			// GETs are; alone, asking to announce to it is a mistake.
			if st.ctl, err = findAnnouncer(src.String()); err != nil {
				announceErr = errors.Join(announceErr, err)
				plain = append(plain, src.String())
			} else {
				announced++
			}
		}
		states[i] = st
		res.Paths = append(res.Paths, PathResult{Path: src.String(), Kind: src.Kind(), Files: len(files),
			Readers: st.readers, ListS: time.Since(t0).Seconds(), Epochs: []EpochResult{}})
	}
	switch {
	case !cfg.Announce || announced > 0:
		for _, p := range plain {
			cfg.Logger.Warn("not a dataccel mount: read without announcing", "path", p)
		}
	case announceErr != nil:
		return nil, fmt.Errorf("run: --announce: %w", announceErr)
	default:
		return nil, errors.New("run: --announce: no path is a dataccel mount (s3:// paths are read with GETs: there is no order to announce to them)")
	}
	if err := probeBounds(ctx, cfg, res, sources); err != nil {
		return nil, err
	}

	// summed completes res with what the epochs so far measured: a run
	// that fails mid-way still reports the epochs it completed.
	summed := func() *Result {
		for i, st := range states {
			res.Paths[i].Bytes = fileBytes(st.files)
			res.Paths[i].finish(res.Probe)
		}
		res.computeRatios()
		return res
	}
	readers := 0
	for _, st := range states {
		readers = max(readers, st.readers)
	}
	bufs := newReadBufs(readers)
	dropOK := cfg.DropCaches
	for e := 1; e <= cfg.Epochs; e++ {
		for i, st := range states {
			if dropOK {
				if err := DropPageCache(); err != nil {
					cfg.Logger.Warn("cannot drop the page cache; epochs after the first may be served from it", "err", err)
					dropOK = false
				}
			}
			// Like testing.B: collect the previous epoch's garbage (a direct-GET
			// epoch leaves hundreds of MB) now, not during the next measurement.
			runtime.GC()
			order := epochOrder(st.files, cfg.Order, cfg.Seed, e)
			began := time.Now()
			var gets0, bytes0 int64
			if st.fetched != nil {
				// Before the announcement, which starts fetching.
				var err error
				if gets0, bytes0, err = st.fetched(); err != nil {
					cfg.Logger.Warn("cannot count what the store sends; epochs go on without", "path", st.src.String(), "err", err)
					st.fetched = nil
				}
			}
			var announceS float64
			if st.ctl != nil {
				t0 := time.Now()
				if err := st.ctl.announce(st.files, order); err != nil {
					return summed(), fmt.Errorf("run: epoch %d: %w", e, err)
				}
				announceS = time.Since(t0).Seconds()
			}
			label := fmt.Sprintf("epoch %d/%d %s", e, cfg.Epochs, shortName(st.src.String()))
			ep, err := runEpoch(ctx, epochPlan{src: st.src, files: st.files, order: order, accels: cfg.Accelerators,
				workers: st.workers, batch: cfg.Batch, prefetch: cfg.Prefetch, perSample: cfg.ComputePerSample,
				maxSteps: cfg.MaxSteps, fileLevel: st.fileLevel, bufs: bufs}, cfg.Progress, label)
			if err != nil {
				return summed(), fmt.Errorf("run: %s epoch %d: %w", st.src, e, err)
			}
			ep.Epoch = e
			ep.AnnounceS = announceS
			if wait := statsFresh - time.Since(began); wait > 0 {
				time.Sleep(wait)
			}
			if st.fetched != nil {
				gets, bytes, err := st.fetched()
				if err != nil {
					cfg.Logger.Warn("cannot count what the store sends; epochs go on without", "path", st.src.String(), "err", err)
					st.fetched = nil
				} else {
					ep.Fetched = newFetched(gets-gets0, bytes-bytes0, ep.Bytes)
				}
			}
			res.Paths[i].Epochs = append(res.Paths[i].Epochs, ep)
		}
	}
	summed()
	if cfg.FindMaxAccelerators {
		for i, st := range states {
			m, err := findMax(ctx, cfg, st.src, st.files, st.workers, st.fileLevel, bufs, dropOK)
			if err != nil {
				return res, fmt.Errorf("run: %s: find max accelerators: %w", st.src, err)
			}
			res.Paths[i].MaxAccelerators = m
		}
	}
	return res, nil
}

// fileBytes is the size of files: what a listing said, or, for files
// listed without a size, what their reads found.
func fileBytes(files []File) int64 {
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}

// shortName keeps a name's last 31 characters (runes: a cut byte would make
// the table and the report invalid UTF-8).
func shortName(s string) string {
	r := []rune(s)
	if len(r) <= 32 {
		return s
	}
	return "…" + string(r[len(r)-31:])
}

// epochOrder returns the read order of an epoch: directory order, or a
// permutation seeded by (seed, epoch), the same for every path with the
// same files so paths are compared on the same sequence.
func epochOrder(files []File, order string, seed uint64, epoch int) []int {
	idx := make([]int, len(files))
	for i := range idx {
		idx[i] = i
	}
	if order == "shuffle" {
		r := rand.New(rand.NewPCG(seed, uint64(epoch)))
		r.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
	}
	return idx
}

type epochPlan struct {
	src       Source
	files     []File
	order     []int
	accels    int
	workers   int
	batch     int
	prefetch  int
	perSample time.Duration
	maxSteps  int
	// fileLevel: workers is the total number of readers, taking files one
	// by one (direct GETs); else workers per accelerator load whole batches.
	fileLevel bool
	// bufs are the readers' buffers, by reader.
	bufs readBufs
}

// readBufSize is a reader's buffer: one read(2) takes a whole ImageNet file.
const readBufSize = 1 << 20

// readBufs are the readers' buffers, one per reader, made and touched once
// before the first epoch and reused by every epoch of every path. A buffer
// made inside an epoch is fresh memory that the epoch's first reads fault
// in, and on a VM that hands freed memory back to its host each of those
// faults is a host fault whose cost moves with the host: whichever path's
// epoch paid for them (64 MiB for 64 readers) would move the comparison.
type readBufs [][]byte

func newReadBufs(n int) readBufs { return readBufs(nil).grow(n) }

// grow returns b with buffers for n readers at least, the new ones made and
// touched now: outside the epoch that measures them.
func (b readBufs) grow(n int) readBufs {
	for len(b) < n {
		buf := make([]byte, readBufSize)
		for j := 0; j < readBufSize; j += 4096 {
			buf[j] = 1 // fault it in now: make leaves fresh pages untouched
		}
		b = append(b, buf)
	}
	return b
}

// get returns reader id's buffer, or a new one beyond the readers it was
// made for.
func (b readBufs) get(id int) []byte {
	if id < len(b) {
		return b[id]
	}
	return make([]byte, readBufSize)
}

// runEpoch loads one epoch, with per-accelerator batch workers or, for
// direct GETs, a shared pool of file readers (see epochPlan). The coordinator
// waits for every accelerator's batch of a step (the barrier of
// data-parallel training), then sleeps the step's compute time.
func runEpoch(ctx context.Context, p epochPlan, progress *Progress, label string) (EpochResult, error) {
	global := p.accels * p.batch
	steps := (len(p.order) + global - 1) / global
	if p.maxSteps > 0 {
		steps = min(steps, p.maxSteps)
	}
	samples := min(len(p.order), steps*global)
	batchOf := func(s, a int) []int {
		lo := s*global + a*p.batch
		hi := min(lo+p.batch, samples)
		if lo >= hi {
			return nil
		}
		return p.order[lo:hi]
	}
	ready := make([][]chan struct{}, steps)
	taken := make([]chan struct{}, steps)
	for s := range ready {
		ready[s] = make([]chan struct{}, p.accels)
		for a := range ready[s] {
			ready[s][a] = make(chan struct{})
		}
		taken[s] = make(chan struct{})
	}
	// waitTaken blocks until step s is being computed (s < 0: at once).
	waitTaken := func(ctx context.Context, s int) error {
		if s < 0 {
			return nil
		}
		select {
		case <-taken[s]:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	nw := p.accels * p.workers
	if p.fileLevel {
		nw = p.workers
	}
	lat := make([][]time.Duration, nw)
	bytes := make([]int64, nw)
	var stepsOut []Step

	bar := progress.Begin(label, int64(samples))
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	read := func(id int, buf []byte, i int) error {
		f0 := time.Now()
		n, err := p.src.ReadFile(gctx, p.files[i], buf)
		if err != nil {
			return err
		}
		// A path that hands out fewer bytes than the file holds (a clean
		// EOF too early) would look faster than it is. A list without
		// sizes gives 0, unknown: the first read tells the size, for the
		// report and for the next epochs' check. (Each file is read by one
		// reader per epoch, and epochs follow one another.)
		switch f := p.files[i]; {
		case f.Size == 0:
			p.files[i].Size = n
		case n != f.Size:
			return fmt.Errorf("%s: read %d bytes of a file of %d", f.Name, n, f.Size)
		}
		lat[id] = append(lat[id], time.Since(f0))
		bytes[id] += n
		bar.Add(1, n)
		return nil
	}
	if p.fileLevel {
		// Direct GETs: readers take files one by one in step order, so up
		// to `workers` GETs are in flight whatever the batch size; a batch
		// is ready when its last file is in.
		type task struct{ s, a, i int }
		tasks := make(chan task)
		left := make([][]atomic.Int64, steps)
		for s := range left {
			left[s] = make([]atomic.Int64, p.accels)
		}
		ahead := p.prefetch + (p.workers+global-1)/global
		g.Go(func() error {
			defer close(tasks)
			for s := range steps {
				if err := waitTaken(gctx, s-ahead); err != nil {
					return err
				}
				for a := range p.accels {
					b := batchOf(s, a)
					if len(b) == 0 {
						close(ready[s][a])
						continue
					}
					left[s][a].Store(int64(len(b)))
					for _, i := range b {
						select {
						case tasks <- task{s, a, i}:
						case <-gctx.Done():
							return gctx.Err()
						}
					}
				}
			}
			return nil
		})
		for id := range p.workers {
			g.Go(func() error {
				buf := p.bufs.get(id)
				for t := range tasks {
					if err := read(id, buf, t.i); err != nil {
						return err
					}
					if left[t.s][t.a].Add(-1) == 0 {
						close(ready[t.s][t.a])
					}
				}
				return nil
			})
		}
	} else {
		// Like a PyTorch DataLoader: each worker of an accelerator loads
		// whole batches (steps w, w+W, ...), at most W*prefetch batches
		// ahead of the step being computed.
		for a := range p.accels {
			for w := range p.workers {
				g.Go(func() error {
					id := a*p.workers + w
					buf := p.bufs.get(id)
					for s := w; s < steps; s += p.workers {
						if err := waitTaken(gctx, s-p.workers*p.prefetch); err != nil {
							return err
						}
						for _, i := range batchOf(s, a) {
							if err := read(id, buf, i); err != nil {
								return err
							}
						}
						close(ready[s][a])
					}
					return nil
				})
			}
		}
	}
	g.Go(func() error {
		prev := start
		for s := range steps {
			for a := range p.accels {
				select {
				case <-ready[s][a]:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			ready := time.Now()
			close(taken[s])
			c := p.perSample * time.Duration(len(batchOf(s, 0)))
			if err := sleepCtx(gctx, c); err != nil {
				return err
			}
			end := time.Now()
			stepsOut = append(stepsOut, Step{Start: prev, Ready: ready, End: end, Compute: c})
			prev = end
		}
		return nil
	})
	err := g.Wait()
	bar.Done()
	if err != nil {
		return EpochResult{}, err
	}

	ep := EpochResult{Samples: samples, Steps: steps, StepTimes: stepsOut}
	var busiest time.Duration
	for id := range lat {
		ep.latencies = append(ep.latencies, lat[id]...)
		var busy time.Duration
		for _, d := range lat[id] {
			busy += d
		}
		busiest = max(busiest, busy)
		ep.Bytes += bytes[id]
	}
	slices.Sort(ep.latencies)
	wall := stepsOut[len(stepsOut)-1].End.Sub(start)
	ep.WallS = wall.Seconds()
	ep.SamplesPerS = safeDiv(float64(samples), ep.WallS)
	ep.MBPerS = safeDiv(float64(ep.Bytes)/1e6, ep.WallS)
	ep.Latency = latencyStats(ep.latencies)
	ep.TimeToFirstBatchS = stepsOut[0].Ready.Sub(start).Seconds()
	ep.AU = AU(stepsOut)
	ep.StallS = Stall(stepsOut).Seconds()
	for _, s := range stepsOut {
		ep.ComputeS += s.Compute.Seconds()
	}
	// The busiest reader's read time: what the epoch's reads would take if
	// no reader ever waited for a free prefetch slot. Not the mean over every
	// reader: with fewer batches than readers most of them read nothing.
	ep.IOTimeS = busiest.Seconds()
	return ep, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// findMax doubles the accelerator count while AU stays at or above the
// target, then bisects between the last count that held and the first that
// did not. Each trial is one epoch (bounded by MaxSteps), after the run's
// epochs; with drop, the page cache is dropped before each, as before each
// epoch.
func findMax(ctx context.Context, cfg RunConfig, src Source, files []File, workers int, fileLevel bool, bufs readBufs, drop bool) (*MaxAccelerators, error) {
	m := &MaxAccelerators{TargetAU: cfg.TargetAU, Trials: []Trial{}, AfterEpochs: cfg.Epochs, PageCacheDropped: drop}
	// Direct GETs keep their total concurrency whatever the accelerator
	// count (the network is what is measured); mounts get workers per
	// accelerator, as each training rank brings its own loader.
	trial := func(a int) (float64, bool, error) {
		order := epochOrder(files, cfg.Order, cfg.Seed, 1000+len(m.Trials))
		steps := (len(files) + a*cfg.Batch - 1) / (a * cfg.Batch)
		if cfg.MaxSteps > 0 {
			steps = min(steps, cfg.MaxSteps)
		}
		if steps < 3 {
			// AU excludes the first step: two steps say too little.
			return 0, false, nil
		}
		if drop {
			if err := DropPageCache(); err != nil {
				return 0, false, err
			}
		}
		readers := a * workers
		if fileLevel {
			readers = workers
		}
		bufs = bufs.grow(readers) // a trial with more readers than the epochs
		runtime.GC()
		ep, err := runEpoch(ctx, epochPlan{src: src, files: files, order: order, accels: a, workers: workers, batch: cfg.Batch,
			prefetch: cfg.Prefetch, perSample: cfg.ComputePerSample, maxSteps: cfg.MaxSteps, fileLevel: fileLevel, bufs: bufs}, cfg.Progress,
			fmt.Sprintf("find-max %d acc", a))
		if err != nil {
			return 0, false, err
		}
		m.Trials = append(m.Trials, Trial{Accelerators: a, AU: ep.AU, WallS: ep.WallS})
		return ep.AU, true, nil
	}
	const limit = 1024
	good, bad := 0, 0
	for a := 1; a <= limit; a *= 2 {
		au, ok, err := trial(a)
		if err != nil {
			return nil, err
		}
		if !ok {
			if cfg.MaxSteps > 0 && cfg.MaxSteps < 3 {
				m.Limit = fmt.Sprintf("--max-steps %d is too few (a trial needs 3 steps)", cfg.MaxSteps)
			} else {
				m.Limit = fmt.Sprintf("dataset too small for %d accelerators x batch %d (a trial needs 3 steps)", a, cfg.Batch)
			}
			break
		}
		if au < cfg.TargetAU {
			bad = a
			break
		}
		good = a
	}
	if good == limit {
		m.Limit = fmt.Sprintf("search stopped at %d accelerators", limit)
	}
	for bad > 0 && bad-good > 1 {
		mid := (good + bad) / 2
		au, ok, err := trial(mid)
		if err != nil {
			return nil, err
		}
		if ok && au >= cfg.TargetAU {
			good = mid
		} else {
			bad = mid
		}
	}
	m.Max = good
	return m, nil
}

// DropPageCache flushes dirty pages and drops the kernel page cache, so the
// next epoch reads from the device, not RAM (Linux, root only).
func DropPageCache() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop page cache: %w", err)
	}
	return nil
}

// announcer writes an epoch's order to a dataccel mount's control file.
type announcer struct {
	mountRoot, ctl, dir string
}

// ControlFile is the path, relative to a dataccel mount's root, of the file
// that takes an announced read order (one path per line).
const ControlFile = controlDir + "/prefetch"

// controlDir is a dataccel mount's control directory, relative to its root.
const controlDir = ".dataccel"

// findAnnouncer looks for the control file in dir and its parents: the
// bench path may be a subdirectory of the mount.
func findAnnouncer(dir string) (*announcer, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	ctl, root := MountFile(abs, path.Base(ControlFile))
	if ctl == "" {
		return nil, fmt.Errorf("%s is not inside a dataccel mount (no %s in it or its parents)", dir, ControlFile)
	}
	return &announcer{mountRoot: root, ctl: ctl, dir: abs}, nil
}

// announce writes the order in one write and applies it with an fsync, so
// it is in effect (and resolved) before the epoch starts. A mount that
// cannot fsync the control file takes the list after writes pause.
func (a *announcer) announce(files []File, order []int) error {
	rel, err := filepath.Rel(a.mountRoot, a.dir)
	if err != nil {
		return err
	}
	// The names are clean paths relative to the bench directory: joined by
	// hand, as filepath.Join would, without a string per line.
	dir := ""
	if rel != "." {
		dir = filepath.ToSlash(rel) + "/"
	}
	var b strings.Builder
	b.Grow(len(order) * (len(dir) + 32))
	for _, i := range order {
		b.WriteString(dir)
		b.WriteString(files[i].Name) // "/"-separated already
		b.WriteByte('\n')
	}
	f, err := os.OpenFile(a.ctl, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("announce: %w", err)
	}
	_, err = f.Write([]byte(b.String()))
	if err == nil {
		if err = f.Sync(); errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			err = nil // an older mount: it applies the list after a pause
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("announce to %s: %w", a.ctl, err)
	}
	return nil
}

func probeBounds(ctx context.Context, cfg RunConfig, res *Result, sources []Source) error {
	res.Probe = ProbeInfo{RTTS: cfg.RTT.Seconds(), BandwidthBps: cfg.Bandwidth, RequestRate: cfg.RequestRate, Source: "given"}
	if (cfg.RTT > 0 && cfg.Bandwidth > 0) || !cfg.Probe {
		if cfg.RTT == 0 && cfg.Bandwidth == 0 && cfg.RequestRate == 0 {
			res.Probe.Source = "none"
		}
		return nil
	}
	for _, src := range sources {
		ss, ok := src.(StoreSource)
		if !ok {
			continue
		}
		files, err := ss.Files(ctx)
		if err != nil {
			return err
		}
		rtt, bw, err := ss.probe(ctx, files, cfg.Concurrency)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		if cfg.RTT == 0 {
			res.Probe.RTTS = rtt.Seconds()
		}
		if cfg.Bandwidth == 0 {
			res.Probe.BandwidthBps = bw
		}
		res.Probe.Source = "probed from " + ss.String()
		return nil
	}
	if cfg.RTT == 0 && cfg.Bandwidth == 0 && cfg.RequestRate == 0 {
		res.Probe.Source = "none"
	}
	return nil
}
