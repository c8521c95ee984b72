package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"
)

// Offer is one way to rent GPUs, as written in offers.yaml.
type Offer struct {
	Name         string     `yaml:"name"`
	GPU          string     `yaml:"gpu"`
	Count        WholeCount `yaml:"count"`
	PricePerHour float64    `yaml:"price_per_hour"`
	Spot         bool       `yaml:"spot"`
	// PreemptionsPerHour is p: expected preemptions per hour (0 on demand).
	PreemptionsPerHour float64 `yaml:"preemptions_per_hour"`
	// CheckpointIntervalH is t, hours between checkpoints; CheckpointWriteS
	// is d, the seconds a checkpoint stalls training.
	CheckpointIntervalH float64 `yaml:"checkpoint_interval_h"`
	CheckpointWriteS    float64 `yaml:"checkpoint_write_s"`
	// RestartS is the time to get a replacement node training again, not
	// counting the cold cache (added from the bench).
	RestartS float64 `yaml:"restart_s"`
	// Profile names a built-in compute profile; ComputePerSampleS (seconds
	// per sample per GPU) overrides it.
	Profile           string  `yaml:"profile"`
	ComputePerSampleS float64 `yaml:"compute_per_sample_s"`
	// IOFactor, when set, is this offer's F_io (e.g. from its own bench
	// run); nil when the file does not give one (0 given is an error).
	IOFactor *float64 `yaml:"io_factor"`
	// BenchPath picks the bench result path that models this offer's storage.
	BenchPath string `yaml:"bench_path"`
	Notes     string `yaml:"notes"`
}

// WholeCount is a count of GPUs: YAML would read 1.5 into an int as 1.
type WholeCount int

// UnmarshalYAML refuses a count that is not a whole number.
func (c *WholeCount) UnmarshalYAML(n *yaml.Node) error {
	var v int
	if n.Tag != "!!int" || n.Decode(&v) != nil {
		return fmt.Errorf("line %d: count %s: want a whole number of GPUs", n.Line, n.Value)
	}
	*c = WholeCount(v)
	return nil
}

// Offers is an offers.yaml file.
type Offers struct {
	Currency string  `yaml:"currency"`
	Offers   []Offer `yaml:"offers"`
}

// LoadOffers parses offers.yaml and checks each offer's values as score's
// flags are checked, naming the offer and the field.
func LoadOffers(r io.Reader) (Offers, error) {
	var o Offers
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(&o); errors.Is(err, io.EOF) {
		return Offers{}, errors.New("offers: the file is empty")
	} else if err != nil {
		return Offers{}, fmt.Errorf("offers: %w", err)
	}
	var more any
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return Offers{}, errors.New("offers: more than one YAML document (---): put every offer under one offers: list")
	}
	if len(o.Offers) == 0 {
		return Offers{}, errors.New("offers: no offers")
	}
	seen := map[string]bool{}
	for i, of := range o.Offers {
		if strings.TrimSpace(of.Name) == "" {
			return Offers{}, fmt.Errorf("offers: offer %d has no name", i+1)
		}
		if seen[of.Name] { // the ranking would show two rows no one can tell apart
			return Offers{}, fmt.Errorf("offers: the name %q is given to two offers", of.Name)
		}
		seen[of.Name] = true
		if err := of.check(); err != nil {
			return Offers{}, fmt.Errorf("offers: %q: %w", of.Name, err)
		}
		if _, err := of.perSample(); err != nil {
			return Offers{}, fmt.Errorf("offers: %w", err)
		}
	}
	if o.Currency == "" {
		o.Currency = "USD"
	}
	return o, nil
}

// check refuses values the formulas cannot use (a negative rate or time),
// and an io_factor outside (0, 1] when given, as score's flags do.
// YAML's .nan and .inf fail every comparison or win every one, so each
// check is written to refuse them.
func (o Offer) check() error {
	switch {
	case o.Count < 1:
		return fmt.Errorf("count %d: want at least 1", o.Count)
	case !(o.PricePerHour > 0) || math.IsInf(o.PricePerHour, 1):
		return fmt.Errorf("price_per_hour %v: want a price above 0", o.PricePerHour)
	case o.IOFactor != nil && !(*o.IOFactor > 0 && *o.IOFactor <= 1):
		return fmt.Errorf("io_factor %v: want a value in (0, 1]", *o.IOFactor)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"preemptions_per_hour", o.PreemptionsPerHour}, {"checkpoint_interval_h", o.CheckpointIntervalH},
		{"checkpoint_write_s", o.CheckpointWriteS}, {"restart_s", o.RestartS}, {"compute_per_sample_s", o.ComputePerSampleS}} {
		if !(f.v >= 0) || math.IsInf(f.v, 1) {
			return fmt.Errorf("%s %v: want 0 or more", f.name, f.v)
		}
	}
	switch {
	case o.PreemptionsPerHour > 0 && o.CheckpointIntervalH <= 0:
		return errors.New("preemptions_per_hour needs checkpoint_interval_h")
	case o.CheckpointWriteS > 0 && o.CheckpointIntervalH <= 0:
		return errors.New("checkpoint_write_s needs checkpoint_interval_h (a checkpoint's cost is d/t)")
	case o.Spot && o.PreemptionsPerHour == 0:
		// Else it would rank as an on-demand offer at the spot price.
		return errors.New("spot: true needs preemptions_per_hour, the preemptions expected per hour")
	}
	return nil
}

func (o Offer) perSample() (float64, error) {
	p, ok := LookupProfile(o.Profile)
	switch {
	case o.Profile != "" && !ok: // a typo, even beside compute_per_sample_s
		return 0, fmt.Errorf("%q: profile %q unknown", o.Name, o.Profile)
	case o.ComputePerSampleS > 0:
		return o.ComputePerSampleS, nil
	case !ok:
		return 0, fmt.Errorf("%q: no profile and no compute_per_sample_s", o.Name)
	}
	return p.PerSample.Seconds(), nil
}

// ScoreInput is what Score needs besides the offers.
type ScoreInput struct {
	Offers []Offer
	// Bench is an optional bench result; its paths give T_io per sample.
	Bench *Result
	// BenchPath picks the default path of Bench (default: the first).
	BenchPath string
	// IOFactor, when > 0, is F_io for every offer (no bench needed).
	IOFactor float64
	// Epochs is E (default: the bench's epochs, else 1) and ColdEpochs k
	// of the training job: 0 for a cache warmed before it.
	Epochs, ColdEpochs int
	// Samples per epoch (default: the bench's, else ImageNet-1K's 1,281,167).
	Samples int64
	// SamplesFrom says where Resolved took Samples from ("" when given).
	SamplesFrom string
}

// OfferScore is an offer with every formula value that ranked it. Times
// are in seconds unless named _h.
type OfferScore struct {
	Offer
	XCompute  float64 // samples/s of the GPUs alone: Count / compute per sample
	TCompute  float64 // one epoch's compute time
	TCold     float64 // cold epoch: max(T_compute, T_io cold)
	TWarm     float64 // warm epoch: max(T_compute, T_io warm)
	FIO       float64 // I/O factor
	FIOSource string  // "--io-factor", "offer", or the bench path
	RestartH  float64 // R: restart + cold-cache penalty, hours
	Goodput   float64 // g
	XEff      float64 // X_compute * F_io * g
	// CostPerEpoch and CostPer1M are in the offers' currency.
	CostPerEpoch, CostPer1M float64
	// SamplesPerCurrency is the score: samples per currency unit.
	SamplesPerCurrency float64
	// JobH and JobCost are the training job's E epochs: E*N / X_eff, in
	// hours and in the offers' currency.
	JobH, JobCost float64
	Rank          int
}

// Usable reports whether the offer makes progress at all: with X_eff = 0
// (goodput 0: preempted faster than it checkpoints) it has no cost per
// sample, which must not read as free.
func (s OfferScore) Usable() bool { return s.XEff > 0 }

// Goodput is g = 1 - d/t - p*(R + t/2): the share of paid time that
// advances training, with a checkpoint of d hours every t hours, p
// preemptions per hour each losing R hours of restart plus on average half
// a checkpoint interval of work. It is clamped to [0, 1].
func Goodput(dH, tH, p, rH float64) float64 {
	g := 1.0
	if tH > 0 {
		g -= dH/tH + p*(rH+tH/2)
	} else {
		g -= p * rH
	}
	return min(1, max(0, g))
}

// CostPerMillion is P_hour * 1e6 / (3600 * X_eff).
func CostPerMillion(priceHour, xEff float64) float64 {
	if xEff <= 0 {
		return 0
	}
	return priceHour * 1e6 / (3600 * xEff)
}

const imagenet1kSamples = 1281167

// Resolved fills the defaults Score uses: E from the bench (else 1), k
// within [0, E] as given (0: no cold epoch), and the samples per epoch from
// the bench path that offers without their own use (else ImageNet-1K).
func (in ScoreInput) Resolved() ScoreInput {
	if in.Epochs <= 0 {
		in.Epochs = 1
		if in.Bench != nil && in.Bench.Config.Epochs > 0 {
			in.Epochs = in.Bench.Config.Epochs
		}
	}
	in.ColdEpochs = min(max(in.ColdEpochs, 0), in.Epochs)
	if in.Samples <= 0 {
		in.Samples, in.SamplesFrom = imagenet1kSamples, "ImageNet-1K's"
		if in.Bench != nil {
			if p, err := benchPath(in.Bench, in.BenchPath); err == nil {
				in.Samples, in.SamplesFrom = int64(p.Files), "the bench's file count"
			}
		}
	}
	return in
}

// Score computes each offer's effective throughput and cost, and ranks
// the offers by cost per 1M samples, cheapest first. An offer whose
// goodput is 0 ranks last.
func Score(in ScoreInput) ([]OfferScore, error) {
	in = in.Resolved()
	var out []OfferScore
	for _, o := range in.Offers {
		perSample, err := o.perSample()
		if err != nil {
			return nil, fmt.Errorf("score: %w", err)
		}
		s := OfferScore{Offer: o}
		s.XCompute = float64(o.Count) / perSample
		s.TCompute = float64(in.Samples) / s.XCompute
		s.TCold, s.TWarm = s.TCompute, s.TCompute
		switch { // the offer's own figure first: it is the most specific
		case o.IOFactor != nil:
			s.FIO, s.FIOSource = *o.IOFactor, "offer"
		case in.IOFactor > 0:
			s.FIO, s.FIOSource = min(1, in.IOFactor), "--io-factor"
		case in.Bench != nil:
			name := o.BenchPath
			if name == "" {
				name = in.BenchPath
			}
			pr, err := benchPath(in.Bench, name)
			if err != nil {
				return nil, fmt.Errorf("score: %q: %w", o.Name, err)
			}
			var noLoss bool
			s.TCold, s.TWarm, noLoss = epochModel(pr.Summary, s.TCompute, in.Samples)
			s.FIO, s.FIOSource = IOFactor(in.Epochs, in.ColdEpochs, s.TCompute, s.TCold, s.TWarm), pr.Path
			if noLoss {
				s.FIOSource += ", a bench without compute: no overlap loss measured"
			}
			if len(pr.Epochs) == 1 { // its summary repeats the cold epoch as the warm one
				s.FIOSource += ", no warm epoch: warm taken as cold"
			}
		default:
			return nil, fmt.Errorf("score: %q: no I/O factor: give --bench, --io-factor, or io_factor in the offer", o.Name)
		}
		// A replacement node starts with an empty cache: each restart costs
		// one cold pass over the data on top of the restart itself.
		// (A warm epoch slower than the cold one is noise, not a gain.)
		s.RestartH = (o.RestartS + max(0, s.TCold-s.TWarm)) / 3600
		s.Goodput = Goodput(o.CheckpointWriteS/3600, o.CheckpointIntervalH, o.PreemptionsPerHour, s.RestartH)
		s.XEff = s.XCompute * s.FIO * s.Goodput
		if s.XEff > 0 {
			s.CostPer1M = CostPerMillion(o.PricePerHour, s.XEff)
			s.CostPerEpoch = o.PricePerHour * float64(in.Samples) / s.XEff / 3600
			s.SamplesPerCurrency = 3600 * s.XEff / o.PricePerHour
			s.JobH = float64(in.Epochs) * float64(in.Samples) / s.XEff / 3600
			s.JobCost = s.JobH * o.PricePerHour
			if math.IsInf(s.SamplesPerCurrency, 0) || math.IsInf(s.JobH, 0) {
				return nil, fmt.Errorf("score: %q: price_per_hour %v and X_eff %v give no finite cost", o.Name, o.PricePerHour, s.XEff)
			}
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(a, b int) bool {
		if ua, ub := out[a].Usable(), out[b].Usable(); ua != ub {
			return ua // unusable offers last
		}
		return out[a].CostPer1M < out[b].CostPer1M
	})
	for i := range out {
		out[i].Rank = i + 1
	}
	return out, nil
}

// epochModel is an offer's cold and warm epoch time, for samples per epoch
// and the offer's own compute time tCompute, from a bench path's summary.
// An epoch takes the longer of its compute and its reads (the bench's read
// time per sample, scaled), plus what the bench's epoch lost beyond that:
// its first batch, and the overlap loss, how much longer the bench's steps
// took than the longer of its own compute and reads (waits at the step
// barrier for slow files, a full prefetch window), per sample. So an offer
// like the bench's own configuration gets at least the epoch the bench
// measured, less the emulation's sleep overshoot. A bench run without
// compute measures no overlap: its readers' waits at the barrier, which
// compute would hide, are no loss (noLoss).
func epochModel(b Summary, tCompute float64, samples int64) (cold, warm float64, noLoss bool) {
	perSample := float64(samples) / float64(b.SamplesPerEpoch)
	noLoss = b.TComputeS <= 0
	model := func(first, io, stall float64) float64 {
		var loss float64
		if !noLoss {
			loss = max(0, b.TComputeS+stall-max(b.TComputeS, io))
		}
		return first + max(tCompute, io*perSample) + loss*perSample
	}
	return model(b.TFirstBatchColdS, b.TIOColdS, b.TStallColdS), model(b.TFirstBatchWarmS, b.TIOWarmS, b.TStallWarmS), noLoss
}

func benchPath(r *Result, name string) (PathResult, error) {
	if len(r.Paths) == 0 {
		return PathResult{}, errors.New("bench result has no paths")
	}
	if name == "" {
		return checkedPath(r.Paths[0])
	}
	var names []string
	for _, p := range r.Paths {
		if p.Path == name {
			return checkedPath(p)
		}
		names = append(names, p.Path)
	}
	return PathResult{}, fmt.Errorf("bench path %q not in the result (have %s)", name, strings.Join(names, ", "))
}

// checkedPath refuses a path whose summary the model cannot use: one with
// no epoch would score as perfect storage.
func checkedPath(p PathResult) (PathResult, error) {
	s := p.Summary
	if s.SamplesPerEpoch <= 0 {
		return PathResult{}, fmt.Errorf("bench path %q has no measured epoch", p.Path)
	}
	for _, v := range []float64{s.TComputeS, s.TIOColdS, s.TIOWarmS, s.TFirstBatchColdS, s.TFirstBatchWarmS, s.TStallColdS, s.TStallWarmS} {
		if !(v >= 0) || math.IsInf(v, 1) {
			return PathResult{}, fmt.Errorf("bench path %q: a time of %v in its summary: want 0 or more", p.Path, v)
		}
	}
	return p, nil
}

// WriteScoreTable prints the ranking and, below it, each offer's formula values.
func WriteScoreTable(w io.Writer, scores []OfferScore, currency string, in ScoreInput) error {
	ew := &errWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "rank\toffer\tGPUs\t%s/h\tspot\tX_compute/s\tF_io\tg\tX_eff/s\t%s/epoch\t%s/1M samples\tsamples/%s\tjob h\tjob %s\t\n",
		currency, currency, currency, currency, currency)
	for _, s := range scores {
		spot := "no"
		if s.Spot {
			spot = "yes"
		}
		// No cost for an offer that makes no progress: a 0 would read as free.
		perEpoch, per1M, perUnit, jobH, job := "-", "-", "-", "-", "-"
		if s.Usable() {
			perEpoch, per1M, perUnit = figureText(s.CostPerEpoch), fmt.Sprintf("%.3f", s.CostPer1M), fmt.Sprintf("%.0f", s.SamplesPerCurrency)
			jobH, job = figureText(s.JobH), figureText(s.JobCost)
		}
		fmt.Fprintf(tw, "%d\t%s\t%dx %s\t%.2f\t%s\t%.0f\t%.3f\t%.3f\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", s.Rank, s.Name, s.Count, s.GPU,
			s.PricePerHour, spot, s.XCompute, s.FIO, s.Goodput, s.XEff, perEpoch, per1M, perUnit, jobH, job)
	}
	tw.Flush()
	from := ""
	if in.SamplesFrom != "" {
		from = ": " + in.SamplesFrom + "; --samples gives the training job's"
	}
	fmt.Fprintf(ew, "\nformulas (E = %d epochs, k = %d cold, N = %d samples/epoch%s):\n", in.Epochs, in.ColdEpochs, in.Samples, from)
	fmt.Fprintln(ew, "  F_io = E*T_compute / (k*T_cold + (E-k)*T_warm)    g = 1 - d/t - p*(R + t/2)")
	if in.Bench != nil {
		fmt.Fprintln(ew, "  T_cold, T_warm = first batch + max(T_compute, T_io) + the bench's overlap loss (from its stalls)")
	}
	fmt.Fprintln(ew, "  X_eff = X_compute * F_io * g    cost/1M = P_hour*1e6 / (3600*X_eff)    job = E*N / X_eff")
	for _, s := range scores {
		name := s.Name
		if !s.Usable() {
			name += ": unusable, X_eff = 0 (no progress, so no cost per sample)"
		}
		fmt.Fprintf(ew, "  %s: T_compute %s, T_cold %s, T_warm %s, F_io %.4f (%s); d %.0fs, t %.2gh, p %.3g/h, R %.3gh -> g %.4f\n",
			name, fmtSec(s.TCompute), fmtSec(s.TCold), fmtSec(s.TWarm), s.FIO, s.FIOSource,
			s.CheckpointWriteS, s.CheckpointIntervalH, s.PreemptionsPerHour, s.RestartH, s.Goodput)
	}
	return ew.err
}

// figureText shows a cost or a number of hours in whole units from 100,
// with two decimals from 1, and with three significant digits below (the
// epochs of a small bench's dataset cost fractions of a cent), never in
// exponent form.
func figureText(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1 || v == 0:
		return fmt.Sprintf("%.2f", v)
	}
	scale := math.Pow(10, 2-math.Floor(math.Log10(v)))
	return strconv.FormatFloat(math.Round(v*scale)/scale, 'f', -1, 64)
}

// ScoreSchemaVersion is the version of score's JSON; it changes when a key
// is renamed or removed.
const ScoreSchemaVersion = 1

type scoreJSON struct {
	Version         int        `json:"version"`
	Currency        string     `json:"currency"`
	Epochs          int        `json:"epochs"`
	ColdEpochs      int        `json:"cold_epochs"`
	SamplesPerEpoch int64      `json:"samples_per_epoch"`
	SamplesFrom     string     `json:"samples_from,omitempty"`
	Offers          []scoreRow `json:"offers"`
}

// scoreRow is one offer in the JSON. The costs are null for an offer that
// makes no progress (usable false): a 0 would read as free.
type scoreRow struct {
	Rank               int      `json:"rank"`
	Name               string   `json:"name"`
	GPU                string   `json:"gpu"`
	Count              int      `json:"count"`
	PricePerHour       float64  `json:"price_per_hour"`
	Spot               bool     `json:"spot"`
	XComputePerS       float64  `json:"x_compute_per_s"`
	TComputeS          float64  `json:"t_compute_s"`
	TColdS             float64  `json:"t_cold_s"`
	TWarmS             float64  `json:"t_warm_s"`
	FIO                float64  `json:"f_io"`
	FIOSource          string   `json:"f_io_source"`
	RestartH           float64  `json:"restart_h"`
	Goodput            float64  `json:"goodput"`
	XEffPerS           float64  `json:"x_eff_per_s"`
	Usable             bool     `json:"usable"`
	CostPerEpoch       *float64 `json:"cost_per_epoch"`
	CostPer1M          *float64 `json:"cost_per_1m_samples"`
	SamplesPerCurrency *float64 `json:"samples_per_currency"`
	JobH               *float64 `json:"job_h"`
	JobCost            *float64 `json:"job_cost"`
}

// WriteScoreJSON writes the ranking as JSON, in rank order, with every
// formula value of each offer.
func WriteScoreJSON(w io.Writer, scores []OfferScore, currency string, in ScoreInput) error {
	out := scoreJSON{Version: ScoreSchemaVersion, Currency: currency, Epochs: in.Epochs, ColdEpochs: in.ColdEpochs,
		SamplesPerEpoch: in.Samples, SamplesFrom: in.SamplesFrom, Offers: []scoreRow{}}
	for _, s := range scores {
		r := scoreRow{Rank: s.Rank, Name: s.Name, GPU: s.GPU, Count: int(s.Count), PricePerHour: s.PricePerHour, Spot: s.Spot,
			XComputePerS: s.XCompute, TComputeS: s.TCompute, TColdS: s.TCold, TWarmS: s.TWarm, FIO: s.FIO, FIOSource: s.FIOSource,
			RestartH: s.RestartH, Goodput: s.Goodput, XEffPerS: s.XEff, Usable: s.Usable()}
		if r.Usable {
			r.CostPerEpoch, r.CostPer1M, r.SamplesPerCurrency = &s.CostPerEpoch, &s.CostPer1M, &s.SamplesPerCurrency
			r.JobH, r.JobCost = &s.JobH, &s.JobCost
		}
		out.Offers = append(out.Offers, r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write score json: %w", err)
	}
	return nil
}
