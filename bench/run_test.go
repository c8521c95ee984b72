package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dataccel/dataccel/store"
)

func TestPercentile(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var thousand []time.Duration
	for i := 1; i <= 1000; i++ {
		thousand = append(thousand, ms(i))
	}
	for _, c := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"p50 of 1..1000", thousand, 0.50, ms(500)},
		{"p90 of 1..1000", thousand, 0.90, ms(900)},
		{"p99 of 1..1000", thousand, 0.99, ms(990)},
		{"p99.9 of 1..1000", thousand, 0.999, ms(999)},
		{"p100 of 1..1000", thousand, 1, ms(1000)},
		{"one value", []time.Duration{ms(7)}, 0.999, ms(7)},
		{"p50 of 4 values is the 2nd (nearest rank)", []time.Duration{ms(1), ms(2), ms(3), ms(4)}, 0.5, ms(2)},
		{"empty", nil, 0.5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Percentile(c.sorted, c.q); got != c.want {
				t.Errorf("Percentile(%v) = %v, want %v", c.q, got, c.want)
			}
		})
	}
}

func TestAUFromSteps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Step 1 (excluded) ends at 600 ms. Steps 2 and 3 compute 100 ms each
	// in the 500 ms that follow: AU = 200/500.
	steps := []Step{
		{Start: at(0), Ready: at(500), End: at(600)},
		{Start: at(600), Ready: at(700), End: at(800)},
		{Start: at(800), Ready: at(1000), End: at(1100)},
	}
	for _, c := range []struct {
		name  string
		steps []Step
		want  float64
	}{
		{"three steps", steps, 0.4},
		{"no stall after the first", []Step{steps[0], {Start: at(600), Ready: at(600), End: at(700)}}, 1},
		{"one step", steps[:1], 0},
		{"none", nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := AU(c.steps); !near(got, c.want, 1e-9) {
				t.Errorf("AU = %v, want %v", got, c.want)
			}
		})
	}
}

// Stall is the wait of steps 2..n: their span less their measured compute,
// so a step's sleep overshoot (End past Ready + Compute) is not a stall.
func TestStallFromSteps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []Step{
		{Start: at(0), Ready: at(500), End: at(600), Compute: 100 * time.Millisecond},
		{Start: at(600), Ready: at(700), End: at(800), Compute: 100 * time.Millisecond},
		{Start: at(800), Ready: at(1000), End: at(1130), Compute: 100 * time.Millisecond}, // 30 ms overshoot
	}
	for _, c := range []struct {
		name  string
		steps []Step
		want  time.Duration
	}{
		{"three steps", steps, 300 * time.Millisecond},
		{"no stall after the first", []Step{steps[0], {Start: at(600), Ready: at(600), End: at(700)}}, 0},
		{"one step", steps[:1], 0},
		{"none", nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Stall(c.steps); got != c.want {
				t.Errorf("Stall = %v, want %v", got, c.want)
			}
		})
	}
}

// tailSource reads every file in 1 ms but every 50th in 40 ms: reads keep
// up with the compute on average, and the slow ones stall steps anyway.
type tailSource struct{ n int }

func (s tailSource) String() string { return "tail" }
func (s tailSource) Kind() string   { return "dir" }
func (s tailSource) Files(context.Context) ([]File, error) {
	f := make([]File, s.n)
	for i := range f {
		f[i] = File{Name: fmt.Sprintf("f%05d", i), Size: 1}
	}
	return f, nil
}
func (s tailSource) ReadFile(ctx context.Context, f File, _ []byte) (int64, error) {
	d := time.Millisecond
	if n, _ := strconv.Atoi(strings.TrimPrefix(f.Name, "f")); n%50 == 0 {
		d = 40 * time.Millisecond
	}
	time.Sleep(d)
	return 1, nil
}

// TestScoreOfTheBenchOwnOffer: an offer with the bench's own accelerators
// and compute gets an epoch no shorter than the one the bench measured
// (less its sleep overshoot), so F_io no higher than the bench's own. A
// model of the longer of compute and reads alone rated such storage as
// perfect (F_io 1) while the accelerators waited a third of the time.
func TestScoreOfTheBenchOwnOffer(t *testing.T) {
	res, err := Run(context.Background(), RunConfig{Accelerators: 1, Workers: 2, Batch: 10, Prefetch: 1, Epochs: 2,
		ComputePerSample: time.Millisecond, Order: "dir"}, tailSource{n: 1000})
	if err != nil {
		t.Fatal(err)
	}
	sum := res.Paths[0].Summary
	if !(sum.TStallColdS > 0 && sum.IOFactor < 0.95) {
		t.Fatalf("the bench measured a stall of %v s and F_io %v: want a stall and F_io under 0.95 from 40 ms reads", sum.TStallColdS, sum.IOFactor)
	}
	for _, e := range res.Paths[0].Epochs {
		if busy := e.TimeToFirstBatchS + e.ComputeS + e.StallS; busy > e.WallS+1e-9 {
			t.Errorf("epoch %d: first batch + compute + stall = %v s, over its wall time %v s", e.Epoch, busy, e.WallS)
		}
	}
	got, err := Score(ScoreInput{Offers: []Offer{{Name: "the bench's", Count: 1, PricePerHour: 1, ComputePerSampleS: 0.001}},
		Bench: res, Epochs: 2, ColdEpochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].FIO > sum.IOFactor+1e-9 {
		t.Errorf("score's F_io %v for the bench's own configuration, over the %v the bench measured", got[0].FIO, sum.IOFactor)
	}
}

// slowSource adds a fixed latency to every read, standing in for a store.
type slowSource struct {
	Source
	delay time.Duration
}

func (s slowSource) ReadFile(ctx context.Context, f File, buf []byte) (int64, error) {
	time.Sleep(s.delay)
	return s.Source.ReadFile(ctx, f, buf)
}

// tmpfsDir returns a fresh directory on tmpfs where there is one, so file
// reads cost (almost) nothing and the injected latency dominates.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "dataccel-bench-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

func genSmall(t *testing.T, dir string, files int) GenConfig {
	t.Helper()
	cfg := GenConfig{Files: files, Classes: 10, Seed: 1, MeanSize: 12_000, MinSize: 4_000, MaxSize: 40_000, Concurrency: 8}
	if _, err := Generate(context.Background(), cfg, DirPutter{Root: dir}, nil); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRunAU runs the loader on tmpfs with a fixed compute time and a fixed
// per-file latency, and checks AU against the run's own step timestamps
// and against the throughput model within a wide tolerance.
func TestRunAU(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 200)
	for _, c := range []struct {
		name          string
		delay         time.Duration
		workers       int
		auLow, auHigh float64
	}{
		// 10 files x 0.2 ms over 4 workers: loading is far below the
		// 10 ms compute of a step, so the accelerator never waits.
		{"compute-bound", 200 * time.Microsecond, 4, 0.85, 1},
		// 10 files x 3 ms on one worker: 30 ms per batch against 10 ms of
		// compute, so AU ~ 1/3.
		{"io-bound", 3 * time.Millisecond, 1, 0.15, 0.6},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := Run(context.Background(), RunConfig{Workers: c.workers, Batch: 10, Epochs: 2,
				ComputePerSample: time.Millisecond, Seed: 3}, slowSource{DirSource{Root: dir}, c.delay})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Paths[0].Epochs {
				st := e.StepTimes
				if e.Steps != 20 || len(st) != 20 || e.Samples != 200 {
					t.Fatalf("epoch %d: %d steps (%d timed), %d samples; want 20, 200", e.Epoch, e.Steps, len(st), e.Samples)
				}
				// Expected AU from the run's own timestamps.
				var compute time.Duration
				for _, s := range st[1:] {
					if s.End.Sub(s.Ready) < s.Compute {
						t.Errorf("step computed %v, less than its %v", s.End.Sub(s.Ready), s.Compute)
					}
					compute += s.End.Sub(s.Ready)
				}
				want := compute.Seconds() / st[len(st)-1].End.Sub(st[0].End).Seconds()
				if !near(e.AU, want, 0.01) {
					t.Errorf("epoch %d: AU %.4f, timestamps give %.4f", e.Epoch, e.AU, want)
				}
				if e.AU < c.auLow || e.AU > c.auHigh {
					t.Errorf("epoch %d: AU %.3f outside [%.2f, %.2f]", e.Epoch, e.AU, c.auLow, c.auHigh)
				}
				if ttfb := st[0].Ready.Sub(st[0].Start).Seconds(); !near(e.TimeToFirstBatchS, ttfb, 1e-3) || ttfb <= 0 {
					t.Errorf("time to first batch %v, timestamps give %v", e.TimeToFirstBatchS, ttfb)
				}
				l := e.Latency
				if l.P50 < c.delay.Seconds() || !(l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
					t.Errorf("latency percentiles out of order or below the injected %v: %+v", c.delay, l)
				}
				if !near(e.ComputeS, 0.2, 1e-9) {
					t.Errorf("nominal compute %v s, want 200 x 1 ms", e.ComputeS)
				}
			}
		})
	}
}

// TestRunIOTime checks that io time is the busiest reader's read time,
// also when most readers have no batch to load.
func TestRunIOTime(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 60)
	const delay = 2 * time.Millisecond
	for _, c := range []struct {
		name           string
		workers, batch int
		busiest        int // files read by the busiest reader
	}{
		{"fewer batches than readers", 16, 30, 30}, // 2 batches: 14 readers idle
		{"uneven batches", 4, 10, 20},              // 6 batches: 2 readers load 2
		{"every reader busy", 3, 10, 20},           // 6 batches: 2 each
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := Run(context.Background(), RunConfig{Workers: c.workers, Batch: c.batch, Epochs: 1, Seed: 3},
				slowSource{DirSource{Root: dir}, delay})
			if err != nil {
				t.Fatal(err)
			}
			e := res.Paths[0].Epochs[0]
			if low := (time.Duration(c.busiest) * delay).Seconds(); e.IOTimeS < low || e.IOTimeS > e.WallS {
				t.Errorf("io time %.4f s; want at least %d reads x %v = %.4f s and at most the epoch's %.4f s",
					e.IOTimeS, c.busiest, delay, low, e.WallS)
			}
		})
	}
}

// TestDirSourceKeyOrder: a directory lists its files in S3 key order, as a
// store source does, so every path of a run reads the same files in the
// same order: "a-b/" before "a/" ('-' sorts before '/'), though a walk of
// the tree visits "a/" first.
func TestDirSourceKeyOrder(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a/1", "a-b/2", "a.c/3", "b/4"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := DirSource{Root: dir}.Files(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, f.Name)
	}
	if want := []string{"a-b/2", "a.c/3", "a/1", "b/4"}; !slices.Equal(got, want) {
		t.Errorf("files %v, want key order %v", got, want)
	}
}

// TestFindMaxTooFewSteps: a --max-steps below a trial's three steps is
// named as the cause, and the table says no count was measured instead of
// "at least 0".
func TestFindMaxTooFewSteps(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 50)
	res, err := Run(context.Background(), RunConfig{Workers: 2, Batch: 5, Epochs: 1, MaxSteps: 2, TargetAU: 0.9,
		FindMaxAccelerators: true}, DirSource{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Paths[0].MaxAccelerators
	if m == nil || len(m.Trials) != 0 || !strings.Contains(m.Limit, "--max-steps 2") {
		t.Fatalf("find-max %+v; want no trial and a limit naming --max-steps 2", m)
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, ": none measured (") || strings.Contains(out, "at least 0") {
		t.Errorf("table:\n%s\nwant \"none measured\"", out)
	}
}

func TestRunMaxStepsAndDirOrder(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 50)
	res, err := Run(context.Background(), RunConfig{Workers: 2, Batch: 5, Epochs: 1, MaxSteps: 4, Order: "dir"}, DirSource{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	if e := res.Paths[0].Epochs[0]; e.Steps != 4 || e.Samples != 20 {
		t.Errorf("%d steps, %d samples; want 4, 20", e.Steps, e.Samples)
	}
	if _, err := Run(context.Background(), RunConfig{Order: "random"}, DirSource{Root: dir}); err == nil {
		t.Error("order random accepted")
	}
}

func TestAnnounce(t *testing.T) {
	mount := t.TempDir()
	data := filepath.Join(mount, "train")
	genSmall(t, data, 40)
	ctl := filepath.Join(mount, filepath.FromSlash(ControlFile))
	if err := os.MkdirAll(filepath.Dir(ctl), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ctl, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	src := DirSource{Root: data}
	res, err := Run(context.Background(), RunConfig{Workers: 2, Batch: 8, Epochs: 2, Seed: 9, Announce: true}, src)
	if err != nil {
		t.Fatal(err)
	}
	files, err := src.Files(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, i := range epochOrder(files, "shuffle", 9, 2) {
		want.WriteString("train/" + files[i].Name + "\n")
	}
	got, err := os.ReadFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Errorf("control file holds\n%.200s\nwant epoch 2's order\n%.200s", got, want.String())
	}
	if res.Paths[0].Files != 40 {
		t.Errorf("%d files listed, want 40", res.Paths[0].Files)
	}
	for _, e := range res.Paths[0].Epochs {
		if e.AnnounceS <= 0 {
			t.Errorf("epoch %d: announce_s %g, want the announcement's time", e.Epoch, e.AnnounceS)
		}
	}
	// The control directory itself is never read as data.
	whole, err := DirSource{Root: mount}.Files(context.Background())
	if err != nil || len(whole) != 40 {
		t.Errorf("listing the mount root: %d files, err %v; want 40 (no .dataccel)", len(whole), err)
	}

	plain := t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, "a.JPEG"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), RunConfig{Announce: true}, DirSource{Root: plain})
	if err == nil || !strings.Contains(err.Error(), "not inside a dataccel mount") {
		t.Errorf("announce on a plain directory: err = %v", err)
	}
	// Beside a mount, a plain directory (the local-disk reference) is read
	// without an announcement, and the mount still gets its order.
	os.WriteFile(ctl, nil, 0o644)
	if _, err := Run(context.Background(), RunConfig{Workers: 2, Batch: 8, Epochs: 1, Seed: 9, Announce: true}, src, DirSource{Root: plain}); err != nil {
		t.Fatalf("announce with a mount and a plain directory: %v", err)
	}
	if got, _ := os.ReadFile(ctl); len(got) == 0 {
		t.Error("the mount's control file was not written when a plain directory ran beside it")
	}
	// Direct GETs alone: nothing to announce to.
	if _, err := Run(context.Background(), RunConfig{Announce: true}, StoreSource{Store: oneFileStore{}}); err == nil || !strings.Contains(err.Error(), "no path is a dataccel mount") {
		t.Errorf("announce with direct GETs alone: err = %v", err)
	}
}

func TestParseFileList(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []File // nil: an error
		errText  string
	}{
		{"names and sizes, sorted", "b/2.jpg\t20\n./a/1.jpg\t10\n\nc.jpg\r\n", []File{{Name: "a/1.jpg", Size: 10}, {Name: "b/2.jpg", Size: 20}, {Name: "c.jpg"}}, ""},
		{"bad size", "a.jpg\tbig\n", nil, "line 1: size"},
		{"negative size", "a.jpg\t-1\n", nil, "line 1: size"},
		{"escapes the root", "x.jpg\n../a.jpg\n", nil, "line 2"},
		{"absolute", "/etc/passwd\n", nil, "line 1"},
		{"not clean", "a//b.jpg\n", nil, "line 1"},
		{"twice", "a.jpg\na.jpg\n", nil, "listed twice"},
		{"empty", "\n\n", nil, "no files"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseFileList(strings.NewReader(c.in))
			if c.want == nil {
				if err == nil || !strings.Contains(err.Error(), c.errText) {
					t.Fatalf("err %v, want one with %q", err, c.errText)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// bufRecorder records the buffers a source is handed. Holding a pointer into
// each keeps it alive, so a buffer made anew for an epoch cannot take the
// address of one the collector freed.
type bufRecorder struct {
	Source
	mu   sync.Mutex
	seen map[*byte]bool
}

func (r *bufRecorder) ReadFile(ctx context.Context, f File, buf []byte) (int64, error) {
	r.mu.Lock()
	r.seen[&buf[0]] = true
	r.mu.Unlock()
	return r.Source.ReadFile(ctx, f, buf)
}

// Every epoch of every path reads into the same buffers, one per reader,
// made before the first epoch: a buffer made in an epoch would put its
// first touches (page faults) in that epoch's time.
func TestRunReusesReadBuffers(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 60)
	const readers = 3
	rec := &bufRecorder{Source: DirSource{Root: dir}, seen: map[*byte]bool{}}
	if _, err := Run(context.Background(), RunConfig{Workers: readers, Batch: 4, Epochs: 3, Seed: 1}, rec, DirSource{Root: dir}); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.seen); n == 0 || n > readers {
		t.Errorf("%d readers read into %d buffers over 3 epochs, want at most %d", readers, n, readers)
	}
	b := newReadBufs(2)
	if len(b) != 2 || len(b.get(1)) != readBufSize || &b.get(1)[0] != &b[1][0] {
		t.Error("get does not hand out the buffers made for the readers")
	}
	if extra := b.get(5); len(extra) != readBufSize || &extra[0] == &b[0][0] || &extra[0] == &b[1][0] {
		t.Error("a reader beyond the buffers made shares one")
	}
}

// The search for the most accelerators makes the buffers of a trial with
// more readers than the epochs before that trial, and keeps them: a buffer
// made in the trial put its page faults in the trial's time, and each trial
// made its own again.
func TestFindMaxReusesReadBuffers(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 60)
	rec := &bufRecorder{Source: DirSource{Root: dir}, seen: map[*byte]bool{}}
	res, err := Run(context.Background(), RunConfig{Workers: 1, Batch: 4, Epochs: 1, Seed: 1, ComputePerSample: time.Millisecond,
		FindMaxAccelerators: true, TargetAU: 0.01}, rec)
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for _, tr := range res.Paths[0].MaxAccelerators.Trials {
		most = max(most, tr.Accelerators)
	}
	// One worker an accelerator: a trial of a accelerators has a readers.
	if n := len(rec.seen); most < 4 || n > most {
		t.Errorf("trials of up to %d accelerators read into %d buffers, want at most %d (and a trial of 4 at least)", most, n, most)
	}
}

// shortSource hands out half of one file with a clean end, as a path with a
// truncation bug would.
type shortSource struct {
	Source
	victim string
}

func (s shortSource) ReadFile(ctx context.Context, f File, buf []byte) (int64, error) {
	n, err := s.Source.ReadFile(ctx, f, buf)
	if f.Name == s.victim {
		n /= 2
	}
	return n, err
}

// A read shorter than the file fails the run: a path that hands out fewer
// bytes would otherwise be measured faster than it is.
func TestRunFailsOnShortRead(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 20)
	files, err := DirSource{Root: dir}.Files(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	src := shortSource{Source: DirSource{Root: dir}, victim: files[7].Name}
	_, err = Run(context.Background(), RunConfig{Workers: 2, Batch: 4, Epochs: 1, Seed: 1}, src)
	if err == nil || !strings.Contains(err.Error(), files[7].Name) || !strings.Contains(err.Error(), fmt.Sprintf("of a file of %d", files[7].Size)) {
		t.Fatalf("run over a path with a short read: %v, want an error naming %s", err, files[7].Name)
	}
}

// failingSource fails every read after the first `after`.
type failingSource struct {
	Source
	after int64
	reads *atomic.Int64
}

func (s failingSource) ReadFile(ctx context.Context, f File, buf []byte) (int64, error) {
	if s.reads.Add(1) > s.after {
		return 0, fmt.Errorf("read %s: %w", f.Name, os.ErrPermission)
	}
	return s.Source.ReadFile(ctx, f, buf)
}

// TestRunKeepsCompletedEpochs: a read error in epoch 3 fails the run, and
// the result of the epochs that completed comes back with the error, for
// every path, ready to print.
func TestRunKeepsCompletedEpochs(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 20)
	src := failingSource{Source: DirSource{Root: dir}, after: 45, reads: new(atomic.Int64)} // epochs 1 and 2 read 40
	res, err := Run(context.Background(), RunConfig{Workers: 2, Batch: 4, Epochs: 4, Seed: 1}, DirSource{Root: dir}, src)
	if err == nil || !strings.Contains(err.Error(), "epoch 3") {
		t.Fatalf("err %v, want the read error of epoch 3", err)
	}
	if res == nil {
		t.Fatal("no result of the completed epochs")
	}
	for i, want := range []int{3, 2} { // the first path completed epoch 3 before the second failed it
		if p := res.Paths[i]; len(p.Epochs) != want || p.Summary.TColdS <= 0 {
			t.Errorf("%s: %d epochs, summary %+v; want %d epochs summed up", p.Path, len(p.Epochs), p.Summary, want)
		}
	}
	var tb bytes.Buffer
	if err := res.WriteTable(&tb); err != nil || !strings.Contains(tb.String(), "T_cold") {
		t.Errorf("table of a stopped run: %v\n%s", err, tb.String())
	}

	// A path that failed in its first epoch has no time: not 0 s (which
	// read as the fastest), and no ratio.
	first := failingSource{Source: DirSource{Root: dir}, after: 5, reads: new(atomic.Int64)}
	res, err = Run(context.Background(), RunConfig{Workers: 2, Batch: 4, Epochs: 2, Seed: 1}, DirSource{Root: dir}, first)
	if err == nil || res == nil {
		t.Fatalf("err %v, result %v: want both", err, res)
	}
	tb.Reset()
	if err := res.WriteTable(&tb); err != nil || !strings.Contains(tb.String(), "no epoch") || strings.Contains(tb.String(), "cold 0.00x") || len(res.Ratios) != 0 {
		t.Errorf("table of a path with no epoch (ratios %v): %v\n%s", res.Ratios, err, tb.String())
	}
}

// TestRunOneEpochHasNoWarm: with one epoch there is no warm epoch: the
// summary says so (warm_epochs 0), the table shows no T_warm, and the warm
// figures score reads stay the cold ones (every epoch as cold as the first).
func TestRunOneEpochHasNoWarm(t *testing.T) {
	dir := tmpfsDir(t)
	genSmall(t, dir, 20)
	for _, tc := range []struct {
		epochs, warm int
		tableWarm    bool
	}{{1, 0, false}, {2, 1, true}} {
		t.Run(fmt.Sprintf("epochs %d", tc.epochs), func(t *testing.T) {
			res, err := Run(context.Background(), RunConfig{Workers: 2, Batch: 4, Epochs: tc.epochs, Seed: 1}, DirSource{Root: dir}, DirSource{Root: dir})
			if err != nil {
				t.Fatal(err)
			}
			s := res.Paths[0].Summary
			if s.WarmEpochs != tc.warm || s.TWarmS <= 0 || s.TIOWarmS <= 0 {
				t.Errorf("summary %+v, want %d warm epoch(s) and warm times for score", s, tc.warm)
			}
			var js bytes.Buffer
			res.WriteJSON(&js)
			if !strings.Contains(js.String(), fmt.Sprintf(`"warm_epochs": %d`, tc.warm)) {
				t.Errorf("JSON lacks warm_epochs %d", tc.warm)
			}
			// score reads it back, and says when it took the cold epoch for the warm ones.
			back, err := ReadResult(&js)
			if err != nil {
				t.Fatal(err)
			}
			scores, err := Score(ScoreInput{Bench: back, Offers: []Offer{{Name: "o", Count: 1, PricePerHour: 1, ComputePerSampleS: 1e-6}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(scores[0].FIOSource, "no warm epoch"); got == tc.tableWarm || scores[0].TWarm <= 0 {
				t.Errorf("score: F_io from %q, T_warm %v", scores[0].FIOSource, scores[0].TWarm)
			}
			var tb bytes.Buffer
			if err := res.WriteTable(&tb); err != nil {
				t.Fatal(err)
			}
			row := ""
			for _, l := range strings.Split(tb.String(), "\n") {
				if f := strings.Fields(l); len(f) > 5 && f[0] == shortName(dir) && !strings.Contains(l, "%") {
					row = l // the summary row: no AU column
				}
			}
			if hasWarm := !strings.Contains(row, "none"); hasWarm != tc.tableWarm || strings.Contains(tb.String(), "no warm epoch") == tc.tableWarm {
				t.Errorf("T_warm shown: %v, want %v; table:\n%s", hasWarm, tc.tableWarm, tb.String())
			}
		})
	}
}

// TestShortNameKeepsRunes: a long name is cut to its last 31 characters,
// never inside one (the table and the page must stay UTF-8).
func TestShortNameKeepsRunes(t *testing.T) {
	long := "/data/" + strings.Repeat("数据集", 20) + "/xy"
	got := shortName(long)
	if !utf8.ValidString(got) || utf8.RuneCountInString(got) != 32 || !strings.HasSuffix(got, "/xy") {
		t.Errorf("shortName = %q: want 32 characters of valid UTF-8 ending in /xy", got)
	}
	if shortName("short") != "short" {
		t.Error("a short name was changed")
	}
}

// oneFileStore lists one object; nothing else is asked of it.
type oneFileStore struct{ store.Store }

func (oneFileStore) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	return fn(store.Object{Key: prefix + "a.JPEG", Size: 1, ETag: "e"})
}
