package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// SchemaVersion is the version of the JSON result; it changes when a key
// is renamed or removed.
const SchemaVersion = 1

// Result is a bench run, as written with --json. Times are in seconds,
// sizes in bytes, unless a key says otherwise.
type Result struct {
	Version int          `json:"version"`
	Tool    string       `json:"tool"`
	Started time.Time    `json:"started"`
	Config  ResultConfig `json:"config"`
	Probe   ProbeInfo    `json:"probe"`
	Paths   []PathResult `json:"paths"`
	Ratios  []Ratio      `json:"ratios"`
}

// ResultConfig records the protocol a result was measured with.
type ResultConfig struct {
	Profile           string  `json:"profile"`
	ComputePerSampleS float64 `json:"compute_per_sample_s"`
	Accelerators      int     `json:"accelerators"`
	Workers           int     `json:"workers"`
	Concurrency       int     `json:"concurrency"`
	Batch             int     `json:"batch"`
	Prefetch          int     `json:"prefetch"`
	Epochs            int     `json:"epochs"`
	MaxSteps          int     `json:"max_steps"`
	Order             string  `json:"order"`
	Seed              uint64  `json:"seed"`
	DropCaches        bool    `json:"drop_caches"`
	Announce          bool    `json:"announce"`
	PythonOpen        bool    `json:"python_open,omitempty"`
	TargetAU          float64 `json:"target_au"`
}

// ProbeInfo is the store's physical limits used for the bounds.
type ProbeInfo struct {
	RTTS         float64 `json:"rtt_s"`
	BandwidthBps float64 `json:"bandwidth_bytes_per_s"`
	RequestRate  float64 `json:"request_rate_per_s"`
	// Source says where the numbers come from: "given", "probed from …", "none".
	Source string `json:"source"`
}

// PathResult is one measured path.
type PathResult struct {
	Path  string `json:"path"`
	Kind  string `json:"kind"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
	// Readers is the most reads in flight (accelerators x workers).
	Readers         int              `json:"readers"`
	ListS           float64          `json:"list_s"`
	Epochs          []EpochResult    `json:"epochs"`
	Summary         Summary          `json:"summary"`
	Bounds          Bounds           `json:"bounds"`
	LatencyCDF      LatencyCDF       `json:"latency_cdf"`
	MaxAccelerators *MaxAccelerators `json:"max_accelerators"`
}

// EpochResult is one epoch of one path.
type EpochResult struct {
	Epoch             int     `json:"epoch"`
	WallS             float64 `json:"wall_s"`
	Samples           int     `json:"samples"`
	Bytes             int64   `json:"bytes"`
	Steps             int     `json:"steps"`
	SamplesPerS       float64 `json:"samples_per_s"`
	MBPerS            float64 `json:"mb_per_s"`
	Latency           Latency `json:"latency_s"`
	TimeToFirstBatchS float64 `json:"time_to_first_batch_s"`
	// ComputeS is the nominal compute time of all steps.
	ComputeS float64 `json:"compute_s"`
	AU       float64 `json:"au"`
	// StallS is how long steps 2..n waited for data (Stall). With
	// TimeToFirstBatchS and ComputeS it makes the epoch's wall time
	// without the emulation's sleep overshoot.
	StallS float64 `json:"stall_s"`
	// IOTimeS is the busiest loader worker's read time.
	IOTimeS float64 `json:"io_time_s"`
	// AnnounceS is the time the epoch's order took to write and apply
	// (--announce), before the epoch's clock starts.
	AnnounceS float64 `json:"announce_s,omitempty"`
	// Fetched is what the store sent during the epoch, where the path
	// tells: a dataccel mount or direct GETs.
	Fetched *Fetched `json:"fetched,omitempty"`

	// StepTimes is each step's timeline (not in the JSON: it grows with the dataset).
	StepTimes []Step          `json:"-"`
	latencies []time.Duration // sorted
}

// Latency is the per-file read latency distribution, in seconds.
type Latency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

// Summary condenses a path's epochs into the score's inputs.
type Summary struct {
	SamplesPerEpoch int `json:"samples_per_epoch"`
	// WarmEpochs counts the epochs after the first. With none, the warm
	// figures (t_warm_s, t_io_warm_s, au_warm) repeat the cold epoch's:
	// what score then assumes of every epoch.
	WarmEpochs int `json:"warm_epochs"`
	// TColdS is the first epoch's wall time; TWarmS the mean of the others
	// (the first when there is none).
	TColdS float64 `json:"t_cold_s"`
	TWarmS float64 `json:"t_warm_s"`
	// TComputeS is one epoch's compute time alone.
	TComputeS float64 `json:"t_compute_s"`
	TIOColdS  float64 `json:"t_io_cold_s"`
	TIOWarmS  float64 `json:"t_io_warm_s"`
	AUCold    float64 `json:"au_cold"`
	AUWarm    float64 `json:"au_warm"`
	// TFirstBatch*S and TStall*S are the epochs' time to first batch and
	// stall (EpochResult.StallS): cold, and the mean of the others.
	TFirstBatchColdS float64 `json:"t_first_batch_cold_s"`
	TFirstBatchWarmS float64 `json:"t_first_batch_warm_s"`
	TStallColdS      float64 `json:"t_stall_cold_s"`
	TStallWarmS      float64 `json:"t_stall_warm_s"`
	// IOFactor is F_io over the measured epochs (k = 1 cold epoch), each
	// taken as its first batch + T_compute + stall: the wall time less the
	// emulation's sleep overshoot, which no accelerator would have.
	IOFactor float64 `json:"io_factor"`
}

// busyS is an epoch as the accelerators see it: waiting for the first
// batch, computing, and stalled between steps.
func busyS(firstBatch, compute, stall float64) float64 { return firstBatch + compute + stall }

// Bounds are the physical lower bounds on one epoch's load time.
type Bounds struct {
	BandwidthS   float64 `json:"bandwidth_s"`
	LatencyS     float64 `json:"latency_s"`
	RequestRateS float64 `json:"request_rate_s"`
	// Binding names the largest bound: "bandwidth", "latency", "request_rate", or "" (none known).
	Binding string  `json:"binding"`
	BoundS  float64 `json:"bound_s"`
	// MeasuredS is the cold epoch's load time (io_time_s); Ratio = MeasuredS / BoundS.
	MeasuredS float64 `json:"measured_s"`
	Ratio     float64 `json:"ratio"`
}

// LatencyCDF holds [seconds, fraction] points of the cold and warm epochs'
// per-file latency distributions (at most 200 points each).
type LatencyCDF struct {
	Cold [][2]float64 `json:"cold"`
	Warm [][2]float64 `json:"warm"`
}

// MaxAccelerators is the outcome of --find-max-accelerators.
type MaxAccelerators struct {
	TargetAU float64 `json:"target_au"`
	Max      int     `json:"max"`
	// AfterEpochs: the trials ran after this many epochs of the path, so
	// on what its caches kept of them (a mount's included): the count a
	// warm epoch sustains, not a cold one's. PageCacheDropped: the kernel
	// page cache was dropped before each trial (--drop-caches).
	AfterEpochs      int  `json:"after_epochs"`
	PageCacheDropped bool `json:"page_cache_dropped"`
	// Limit says why the search stopped early, if it did.
	Limit  string  `json:"limit"`
	Trials []Trial `json:"trials"`
}

// Trial is one accelerator count tried.
type Trial struct {
	Accelerators int     `json:"accelerators"`
	AU           float64 `json:"au"`
	WallS        float64 `json:"wall_s"`
}

// Ratio compares a path's epoch times with the first path's (the
// baseline): below 1 is faster.
type Ratio struct {
	Path      string  `json:"path"`
	Baseline  string  `json:"baseline"`
	ColdRatio float64 `json:"cold_ratio"`
	WarmRatio float64 `json:"warm_ratio"`
}

func newResult(cfg RunConfig) *Result {
	return &Result{
		Version: SchemaVersion,
		Tool:    "dataccel bench",
		Started: time.Now().UTC().Truncate(time.Second),
		Config: ResultConfig{
			Profile: cfg.Profile, ComputePerSampleS: cfg.ComputePerSample.Seconds(), Accelerators: cfg.Accelerators,
			Workers: cfg.Workers, Concurrency: cfg.Concurrency, Batch: cfg.Batch, Prefetch: cfg.Prefetch,
			Epochs: cfg.Epochs, MaxSteps: cfg.MaxSteps, Order: cfg.Order, Seed: cfg.Seed,
			DropCaches: cfg.DropCaches, Announce: cfg.Announce, PythonOpen: cfg.PythonOpen, TargetAU: cfg.TargetAU,
		},
		Paths:  []PathResult{},
		Ratios: []Ratio{},
	}
}

// Percentile returns the q-quantile (0..1) of sorted by nearest rank.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func latencyStats(sorted []time.Duration) Latency {
	if len(sorted) == 0 {
		return Latency{}
	}
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return Latency{
		Mean: sum.Seconds() / float64(len(sorted)),
		P50:  Percentile(sorted, 0.50).Seconds(),
		P90:  Percentile(sorted, 0.90).Seconds(),
		P99:  Percentile(sorted, 0.99).Seconds(),
		P999: Percentile(sorted, 0.999).Seconds(),
		Max:  sorted[len(sorted)-1].Seconds(),
	}
}

func cdfPoints(sorted []time.Duration) [][2]float64 {
	const maxPoints = 200
	out := [][2]float64{}
	n := len(sorted)
	for k := range min(n, maxPoints) {
		i := (k+1)*n/min(n, maxPoints) - 1
		out = append(out, [2]float64{sorted[i].Seconds(), float64(i+1) / float64(n)})
	}
	return out
}

// IOFactor is F_io = E*T_compute / (k*T_cold + (E-k)*T_warm): the share of
// training time the accelerators compute, over E epochs of which k start
// cold. It is capped at 1 (an epoch cannot be faster than its compute).
func IOFactor(epochs, cold int, tCompute, tCold, tWarm float64) float64 {
	cold = min(max(cold, 0), epochs)
	den := float64(cold)*tCold + float64(epochs-cold)*tWarm
	if epochs <= 0 || den <= 0 {
		return 0
	}
	return min(1, float64(epochs)*tCompute/den)
}

// summarize condenses epochs into a Summary (the zero one for none).
func summarize(eps []EpochResult) Summary {
	if len(eps) == 0 {
		return Summary{}
	}
	cold := eps[0]
	s := Summary{SamplesPerEpoch: cold.Samples, TColdS: cold.WallS, TComputeS: cold.ComputeS,
		TIOColdS: cold.IOTimeS, AUCold: cold.AU, TWarmS: cold.WallS, TIOWarmS: cold.IOTimeS, AUWarm: cold.AU,
		TFirstBatchColdS: cold.TimeToFirstBatchS, TFirstBatchWarmS: cold.TimeToFirstBatchS,
		TStallColdS: cold.StallS, TStallWarmS: cold.StallS}
	if len(eps) > 1 {
		var wall, io, au, first, stall float64
		for _, e := range eps[1:] {
			wall += e.WallS
			io += e.IOTimeS
			au += e.AU
			first += e.TimeToFirstBatchS
			stall += e.StallS
		}
		n := float64(len(eps) - 1)
		s.TWarmS, s.TIOWarmS, s.AUWarm, s.WarmEpochs = wall/n, io/n, au/n, len(eps)-1
		s.TFirstBatchWarmS, s.TStallWarmS = first/n, stall/n
	}
	s.IOFactor = IOFactor(len(eps), 1, s.TComputeS, busyS(s.TFirstBatchColdS, s.TComputeS, s.TStallColdS),
		busyS(s.TFirstBatchWarmS, s.TComputeS, s.TStallWarmS))
	return s
}

func (p *PathResult) finish(probe ProbeInfo) {
	eps := p.Epochs
	if len(eps) == 0 {
		return
	}
	cold := eps[0]
	p.Summary = summarize(eps)

	b := Bounds{MeasuredS: cold.IOTimeS}
	if probe.BandwidthBps > 0 {
		b.BandwidthS = float64(cold.Bytes) / probe.BandwidthBps
	}
	if probe.RTTS > 0 && p.Readers > 0 {
		b.LatencyS = float64(cold.Samples) * probe.RTTS / float64(p.Readers)
	}
	if probe.RequestRate > 0 {
		b.RequestRateS = float64(cold.Samples) / probe.RequestRate
	}
	for _, c := range []struct {
		name string
		v    float64
	}{{"bandwidth", b.BandwidthS}, {"latency", b.LatencyS}, {"request_rate", b.RequestRateS}} {
		if c.v > b.BoundS {
			b.Binding, b.BoundS = c.name, c.v
		}
	}
	b.Ratio = safeDiv(b.MeasuredS, b.BoundS)
	p.Bounds = b

	p.LatencyCDF = LatencyCDF{Cold: cdfPoints(cold.latencies), Warm: [][2]float64{}}
	if len(eps) > 1 {
		var warm []time.Duration
		for _, e := range eps[1:] {
			warm = append(warm, e.latencies...)
		}
		slices.Sort(warm)
		p.LatencyCDF.Warm = cdfPoints(warm)
	}
}

// computeRatios compares each path with the first; warm_ratio is 0 where
// either has no warm epoch.
func (r *Result) computeRatios() {
	r.Ratios = r.Ratios[:0]
	if len(r.Paths) < 2 {
		return
	}
	base := r.Paths[0]
	for _, p := range r.Paths[1:] {
		if len(base.Epochs) == 0 || len(p.Epochs) == 0 {
			continue // a run that failed before this path's first epoch: no time to compare
		}
		q := Ratio{Path: p.Path, Baseline: base.Path, ColdRatio: safeDiv(p.Summary.TColdS, base.Summary.TColdS)}
		if p.Summary.WarmEpochs > 0 && base.Summary.WarmEpochs > 0 {
			q.WarmRatio = safeDiv(p.Summary.TWarmS, base.Summary.TWarmS)
		}
		r.Ratios = append(r.Ratios, q)
	}
}

// Epochs counts the epochs measured, over all paths.
func (r *Result) Epochs() int {
	n := 0
	for _, p := range r.Paths {
		n += len(p.Epochs)
	}
	return n
}

// WriteJSON writes the result as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// ReadResult reads a result written by WriteJSON.
func ReadResult(r io.Reader) (*Result, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read bench result: %w", err)
	}
	var res Result
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("read bench result: %w", err)
	}
	if res.Version != SchemaVersion {
		return nil, fmt.Errorf("read bench result: schema version %d, want %d", res.Version, SchemaVersion)
	}
	// Results written before epochs had stall_s: take each epoch's wall
	// time less its first batch and compute, which leaves the sleep
	// overshoot in the stall (a little more than the accelerators waited).
	var probe struct {
		Paths []struct {
			Epochs []struct {
				StallS *float64 `json:"stall_s"`
			} `json:"epochs"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("read bench result: %w", err)
	}
	for i, p := range probe.Paths {
		if i >= len(res.Paths) || len(p.Epochs) == 0 || p.Epochs[0].StallS != nil {
			continue
		}
		eps := res.Paths[i].Epochs
		for j := range eps {
			eps[j].StallS = max(0, eps[j].WallS-eps[j].TimeToFirstBatchS-eps[j].ComputeS)
		}
		res.Paths[i].Summary = summarize(eps)
	}
	return &res, nil
}
