package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestIOFactor(t *testing.T) {
	for _, c := range []struct {
		name                   string
		e, k                   int
		tc, tCold, tWarm, want float64
	}{
		{"90 epochs, cold 3x compute, warm at compute speed", 90, 1, 100, 300, 100, 9000.0 / 9200},
		{"3 epochs, cold 2x, warm at compute", 3, 1, 10, 20, 10, 30.0 / 40},
		{"one cold epoch only", 1, 1, 10, 20, 999, 0.5},
		{"k larger than E is clamped", 2, 5, 10, 20, 10, 0.5},
		{"no epochs", 0, 0, 10, 20, 10, 0},
		{"faster than compute is capped at 1", 2, 1, 10, 5, 5, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := IOFactor(c.e, c.k, c.tc, c.tCold, c.tWarm); !near(got, c.want, 1e-9) {
				t.Errorf("IOFactor = %.9f, want %.9f", got, c.want)
			}
		})
	}
}

func TestGoodput(t *testing.T) {
	for _, c := range []struct {
		name        string
		d, tt, p, r float64
		want        float64
	}{
		{"on demand, no checkpoints", 0, 0, 0, 0, 1},
		{"checkpoint 3 min per hour, 0.1 preemptions/h, R 15 min", 0.05, 1, 0.1, 0.25, 1 - 0.05 - 0.1*(0.25+0.5)},
		{"checkpoint cost only", 60.0 / 3600, 1, 0, 0, 1 - 1.0/60},
		{"preempted all the time is clamped at 0", 0, 1, 10, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Goodput(c.d, c.tt, c.p, c.r); !near(got, c.want, 1e-12) {
				t.Errorf("Goodput = %.12f, want %.12f", got, c.want)
			}
		})
	}
}

func TestCostPerMillion(t *testing.T) {
	// 10/h at 1000 samples/s: 3.6M samples per hour, so 1M cost 10/3.6.
	if got := CostPerMillion(10, 1000); !near(got, 10/3.6, 1e-12) {
		t.Errorf("CostPerMillion = %v", got)
	}
	if got := CostPerMillion(10, 0); got != 0 {
		t.Errorf("CostPerMillion with no throughput = %v, want 0", got)
	}
}

// An offer 8% dearer whose stall drops from 18% to 1% must rank first:
// 10/0.82 = 12.2 > 10.8/0.99 = 10.9 per unit of work.
func TestScoreDearerOfferWithLessStallRanksFirst(t *testing.T) {
	offers := []Offer{
		{Name: "cheap, 18% stall", GPU: "A100", Count: 8, PricePerHour: 10, Profile: "resnet50-a100", IOFactor: ptr(0.82)},
		{Name: "8% dearer, 1% stall", GPU: "A100", Count: 8, PricePerHour: 10.8, Profile: "resnet50-a100", IOFactor: ptr(0.99)},
	}
	got, err := Score(ScoreInput{Offers: offers, Samples: 1281167})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Name != "8% dearer, 1% stall" || got[0].Rank != 1 || got[1].Rank != 2 {
		t.Fatalf("ranking: %s (rank %d) first, want the dearer offer", got[0].Name, got[0].Rank)
	}
	xc := 8 / (0.435 / 400) // 7356.32 samples/s
	for _, c := range []struct {
		s      OfferScore
		xEff   float64
		per1M  float64
		perEpo float64
	}{
		{got[0], xc * 0.99, 0.4119318181818182, 10.8 * 1281167 / (xc * 0.99) / 3600},
		{got[1], xc * 0.82, 0.4604928861788618, 10 * 1281167 / (xc * 0.82) / 3600},
	} {
		if !near(c.s.XCompute, xc, 1e-6) || !near(c.s.XEff, c.xEff, 1e-6) || !near(c.s.Goodput, 1, 0) {
			t.Errorf("%s: X_compute %v X_eff %v g %v, want %v %v 1", c.s.Name, c.s.XCompute, c.s.XEff, c.s.Goodput, xc, c.xEff)
		}
		if !near(c.s.CostPer1M, c.per1M, 1e-9) || !near(c.s.CostPerEpoch, c.perEpo, 1e-9) {
			t.Errorf("%s: cost/1M %v per epoch %v, want %v %v", c.s.Name, c.s.CostPer1M, c.s.CostPerEpoch, c.per1M, c.perEpo)
		}
	}
}

// A dataset that fits in cache is cold for one epoch in 90: even an
// accelerator that makes the cold epoch nearly free gains ~2%, less than an
// 8% premium, so the plain offer must rank first.
func TestScoreCachedDatasetMakesAcceleratorWorthLessThanPremium(t *testing.T) {
	const n = 100000 // samples; 1 GPU at 1 ms/sample: T_compute = 100 s
	bench := &Result{Version: SchemaVersion, Config: ResultConfig{Epochs: 3}, Paths: []PathResult{
		{Path: "s3fs", Files: n, Summary: Summary{SamplesPerEpoch: n, TIOColdS: 300, TIOWarmS: 100}},
		{Path: "dataccel", Files: n, Summary: Summary{SamplesPerEpoch: n, TIOColdS: 110, TIOWarmS: 100}},
	}}
	offers := []Offer{
		{Name: "plain", GPU: "X", Count: 1, PricePerHour: 10, ComputePerSampleS: 0.001, BenchPath: "s3fs"},
		{Name: "accelerated, +8%", GPU: "X", Count: 1, PricePerHour: 10.8, ComputePerSampleS: 0.001, BenchPath: "dataccel"},
	}
	got, err := Score(ScoreInput{Offers: offers, Bench: bench, Epochs: 90, ColdEpochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ fio, per1M float64 }{
		"plain":            {9000.0 / 9200, 2.839506172839506},
		"accelerated, +8%": {9000.0 / 9010, 3.0033333333333334},
	}
	if got[0].Name != "plain" {
		t.Errorf("%q ranks first; a cached dataset should make the 8%% premium not pay", got[0].Name)
	}
	for _, s := range got {
		w := want[s.Name]
		if !near(s.FIO, w.fio, 1e-9) || !near(s.CostPer1M, w.per1M, 1e-9) || !near(s.TCompute, 100, 1e-9) {
			t.Errorf("%s: F_io %.9f cost/1M %.9f T_compute %v, want %.9f %.9f 100", s.Name, s.FIO, s.CostPer1M, s.TCompute, w.fio, w.per1M)
		}
	}
}

// R includes the cold-start penalty T_cold - T_warm of the offer's epoch; a
// warm epoch measured slower than the cold one (noise) adds nothing to a
// restart, rather than taking time off it.
func TestScoreRestartIncludesColdPenalty(t *testing.T) {
	for _, c := range []struct {
		name                  string
		ioCold, ioWarm        float64
		restartH, wantGoodput float64
	}{
		{"cold slower", 300, 100, 1100.0 / 3600, 0.9430555555555555},
		{"warm slower", 100, 300, 900.0 / 3600, 1 - 60.0/3600 - 0.05*(900.0/3600+0.5)},
	} {
		t.Run(c.name, func(t *testing.T) {
			bench := &Result{Version: SchemaVersion, Paths: []PathResult{
				{Path: "p", Files: 100000, Summary: Summary{SamplesPerEpoch: 100000, TIOColdS: c.ioCold, TIOWarmS: c.ioWarm}},
			}}
			offers := []Offer{{Name: "spot", Count: 1, PricePerHour: 5, ComputePerSampleS: 0.001, Spot: true,
				PreemptionsPerHour: 0.05, CheckpointIntervalH: 1, CheckpointWriteS: 60, RestartS: 900}}
			got, err := Score(ScoreInput{Offers: offers, Bench: bench, Epochs: 90})
			if err != nil {
				t.Fatal(err)
			}
			s := got[0]
			if !near(s.RestartH, c.restartH, 1e-12) || !near(s.Goodput, c.wantGoodput, 1e-12) {
				t.Errorf("R %v h, g %v; want %v h, g %v", s.RestartH, s.Goodput, c.restartH, c.wantGoodput)
			}
		})
	}
}

func TestScoreNeedsAnIOFactor(t *testing.T) {
	_, err := Score(ScoreInput{Offers: []Offer{{Name: "x", Count: 1, PricePerHour: 1, Profile: "resnet50-a100"}}})
	if err == nil || !strings.Contains(err.Error(), "no I/O factor") {
		t.Errorf("err = %v, want a missing I/O factor error", err)
	}
}

func TestExampleOffers(t *testing.T) {
	f, err := os.Open("offers.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	offers, err := LoadOffers(f)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, o := range offers.Offers {
		names[o.Name] = true
	}
	for _, want := range []string{"2x L20 48GB", "4x RTX 4090", "8x A100 80GB reserved", "8x A100 80GB spot", "8x H800 InfiniBand", "8x H800 RoCE"} {
		if !names[want] {
			t.Errorf("offers.example.yaml lacks %q", want)
		}
	}
	scores, err := Score(ScoreInput{Offers: offers.Offers, IOFactor: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteScoreTable(&out, scores, offers.Currency, ScoreInput{Epochs: 90, ColdEpochs: 1, Samples: 1281167}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"F_io = E*T_compute", "8x H800 RoCE", "USD/1M samples"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("score table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestLoadOffersRejects(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown field", "offers:\n- {name: a, count: 1, price_per_hour: 1, profile: resnet50-a100, prise: 2}\n", "prise"},
		{"no price", "offers:\n- {name: a, count: 1, profile: resnet50-a100}\n", "price_per_hour"},
		{"unknown profile", "offers:\n- {name: a, count: 1, price_per_hour: 1, profile: tpu}\n", "profile"},
		{"unknown profile beside a compute time", "offers:\n- {name: a, count: 1, price_per_hour: 1, profile: resnet50-a10O, compute_per_sample_s: 0.001}\n", `profile "resnet50-a10O" unknown`},
		{"no profile and no compute time", "offers:\n- {name: a, count: 1, price_per_hour: 1}\n", "no profile and no compute_per_sample_s"},
		{"a second document", "offers:\n- {name: a, count: 1, price_per_hour: 1, profile: resnet50-a100}\n---\noffers:\n- {name: b, count: 1, price_per_hour: 1, profile: resnet50-a100}\n", "more than one YAML document"},
		{"preemption without checkpoints", "offers:\n- {name: a, count: 1, price_per_hour: 1, profile: resnet50-a100, preemptions_per_hour: 0.1}\n", "checkpoint_interval_h"},
		{"no offers", "currency: EUR\n", "no offers"},
		{"a count of 1.5", "offers:\n- {name: a, count: 1.5, price_per_hour: 1, profile: resnet50-a100}\n", "line 2: count 1.5: want a whole number"},
		{"a blank name", "offers:\n- {name: ' ', count: 1, price_per_hour: 1, profile: resnet50-a100}\n", "offer 1 has no name"},
		{"a name twice", "offers:\n- {name: a, count: 1, price_per_hour: 1, profile: resnet50-a100}\n- {name: a, count: 2, price_per_hour: 2, profile: resnet50-a100}\n", `the name "a" is given to two offers`},
		{"checkpoint cost without interval", "offers:\n- {name: a, count: 1, price_per_hour: 1, profile: resnet50-a100, checkpoint_write_s: 600}\n", "checkpoint_write_s needs checkpoint_interval_h"},
		{"spot without preemptions", "offers:\n- {name: a, count: 1, price_per_hour: 1, profile: resnet50-a100, spot: true}\n", "spot: true needs preemptions_per_hour"},
		{"empty file", "", "offers: the file is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadOffers(strings.NewReader(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

// A cache warmed before the job (k = 0) makes every epoch a warm one:
// F_io = T_compute / T_warm, where k = 1 charges one cold epoch.
func TestScoreNoColdEpoch(t *testing.T) {
	bench := &Result{Version: SchemaVersion, Paths: []PathResult{
		{Path: "p", Files: 100000, Summary: Summary{SamplesPerEpoch: 100000, TIOColdS: 1000, TIOWarmS: 200}},
	}}
	offers := []Offer{{Name: "x", Count: 1, PricePerHour: 1, ComputePerSampleS: 0.001}} // T_compute 100 s
	for _, tc := range []struct {
		cold int
		fio  float64
	}{{0, 100.0 / 200}, {1, 10 * 100.0 / (1000 + 9*200)}} {
		got, err := Score(ScoreInput{Offers: offers, Bench: bench, Epochs: 10, ColdEpochs: tc.cold})
		if err != nil {
			t.Fatal(err)
		}
		if !near(got[0].FIO, tc.fio, 1e-12) {
			t.Errorf("k = %d: F_io %v, want %v", tc.cold, got[0].FIO, tc.fio)
		}
	}
}

// TestScoreUnusableOffer: an offer whose goodput is 0 (preempted more
// often than it can checkpoint) costs nothing per sample only because it
// makes none: it shows no cost and ranks last, below dearer usable offers.
func TestScoreUnusableOffer(t *testing.T) {
	offers := []Offer{
		{Name: "always preempted", GPU: "A100", Count: 8, PricePerHour: 1, Spot: true, Profile: "resnet50-a100", PreemptionsPerHour: 50, CheckpointIntervalH: 1},
		{Name: "on demand", GPU: "A100", Count: 8, PricePerHour: 30, Profile: "resnet50-a100"},
	}
	scores, err := Score(ScoreInput{Offers: offers, IOFactor: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	if scores[0].Name != "on demand" || scores[1].Name != "always preempted" || scores[1].Usable() || !scores[0].Usable() {
		t.Fatalf("ranking %s (usable %v), %s (usable %v); want the preempted offer last and unusable",
			scores[0].Name, scores[0].Usable(), scores[1].Name, scores[1].Usable())
	}
	var out bytes.Buffer
	in := ScoreInput{Epochs: 90, ColdEpochs: 1, Samples: 1281167}
	if err := WriteScoreTable(&out, scores, "USD", in); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "2 ") {
			continue
		}
		f := strings.Fields(l)
		if got := strings.Join(f[len(f)-5:], " "); got != "- - - - -" {
			t.Errorf("unusable offer's costs, score and job %q, want - - - - -:\n%s", got, out.String())
		}
	}
	var js bytes.Buffer
	if err := WriteScoreJSON(&js, scores, "USD", in); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Version int `json:"version"`
		Offers  []struct {
			Name      string   `json:"name"`
			Usable    bool     `json:"usable"`
			CostPer1M *float64 `json:"cost_per_1m_samples"`
			JobH      *float64 `json:"job_h"`
		} `json:"offers"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Version != ScoreSchemaVersion || len(back.Offers) != 2 {
		t.Fatalf("JSON version %d with %d offers:\n%s", back.Version, len(back.Offers), js.String())
	}
	if o := back.Offers[1]; o.Name != "always preempted" || o.Usable || o.CostPer1M != nil || o.JobH != nil {
		t.Errorf("unusable offer in JSON %+v: want usable false and null costs", o)
	}
	if o := back.Offers[0]; !o.Usable || o.CostPer1M == nil || !near(*o.CostPer1M, scores[0].CostPer1M, 1e-12) || o.JobH == nil || !near(*o.JobH, scores[0].JobH, 1e-12) {
		t.Errorf("usable offer in JSON %+v: want its cost per 1M %v and job hours %v", o, scores[0].CostPer1M, scores[0].JobH)
	}
	if !strings.Contains(out.String(), "always preempted: unusable") {
		t.Errorf("the formulas do not say why the offer is unusable:\n%s", out.String())
	}
}

// TestLoadOffersRejectsValues: the offers file's numbers are checked as the
// flags are, with the offer and the field named.
func TestLoadOffersRejectsValues(t *testing.T) {
	const base = "offers:\n- {name: o, count: 1, price_per_hour: 1, profile: resnet50-a100, checkpoint_interval_h: 1, %s}\n"
	for _, c := range []struct{ field, want string }{
		{"io_factor: 2", `"o": io_factor 2: want a value in (0, 1]`},
		{"io_factor: -0.5", `"o": io_factor -0.5: want a value in (0, 1]`},
		{"io_factor: 0", `"o": io_factor 0: want a value in (0, 1]`},
		{"preemptions_per_hour: -1", `"o": preemptions_per_hour -1: want 0 or more`},
		{"checkpoint_write_s: -5", `"o": checkpoint_write_s -5: want 0 or more`},
		{"restart_s: -1", `"o": restart_s -1: want 0 or more`},
		{"compute_per_sample_s: -0.001", `"o": compute_per_sample_s -0.001: want 0 or more`},
		{"count: 0", `"o": count 0: want at least 1`},
		{"io_factor: .nan", `"o": io_factor NaN: want a value in (0, 1]`},
		{"price_per_hour: .nan", `"o": price_per_hour NaN: want a price above 0`},
		{"price_per_hour: .inf", `"o": price_per_hour +Inf: want a price above 0`},
		{"restart_s: .inf", `"o": restart_s +Inf: want 0 or more`},
		{"checkpoint_write_s: .nan", `"o": checkpoint_write_s NaN: want 0 or more`},
	} {
		t.Run(c.field, func(t *testing.T) {
			y := strings.Replace(base, "%s", c.field, 1)
			for _, f := range []string{"count: 1, ", "price_per_hour: 1, "} {
				if strings.HasPrefix(c.field, strings.Split(f, ":")[0]) {
					y = strings.Replace(y, f, "", 1)
				}
			}
			_, err := LoadOffers(strings.NewReader(y))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
	for _, ok := range []string{"io_factor: 1", "io_factor: 0.85", "preemptions_per_hour: 0", "restart_s: 0"} {
		if _, err := LoadOffers(strings.NewReader(strings.Replace(base, "%s", ok, 1))); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func ptr(v float64) *float64 { return &v }

// A result written before epochs had stall_s scores with each epoch's wall
// time less its first batch and compute as the stall; one that has it keeps
// it, 0 included.
func TestReadResultWithoutStall(t *testing.T) {
	for _, c := range []struct {
		name, stall string
		want        float64
	}{
		{"written before stall_s", ``, 3},
		{"stall_s 0", `"stall_s": 0,`, 0},
		{"stall_s 2", `"stall_s": 2,`, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			js := `{"version": 1, "paths": [{"path": "p", "files": 100, "epochs": [{"epoch": 1, ` + c.stall +
				` "wall_s": 10, "samples": 100, "time_to_first_batch_s": 1, "compute_s": 6, "io_time_s": 4}],
				"summary": {"samples_per_epoch": 100, "t_cold_s": 10, "t_warm_s": 10, "t_compute_s": 6, "t_io_cold_s": 4, "t_io_warm_s": 4}}]}`
			res, err := ReadResult(strings.NewReader(js))
			if err != nil {
				t.Fatal(err)
			}
			p := res.Paths[0]
			if p.Epochs[0].StallS != c.want {
				t.Errorf("epoch stall %v s, want %v", p.Epochs[0].StallS, c.want)
			}
			if c.stall == "" && (p.Summary.TStallColdS != c.want || p.Summary.TFirstBatchColdS != 1 || p.Summary.SamplesPerEpoch != 100) {
				t.Errorf("summary %+v: want it made again from the epoch", p.Summary)
			}
		})
	}
}

// A bench path the model cannot use is refused, not scored as perfect
// storage.
func TestScoreRefusesEmptyBenchPath(t *testing.T) {
	for _, c := range []struct {
		name string
		sum  Summary
		want string
	}{
		{"no epoch", Summary{}, "no measured epoch"},
		{"negative read time", Summary{SamplesPerEpoch: 10, TIOColdS: -1}, "want 0 or more"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bench := &Result{Version: SchemaVersion, Paths: []PathResult{{Path: "p", Summary: c.sum}}}
			_, err := Score(ScoreInput{Offers: []Offer{{Name: "x", Count: 1, PricePerHour: 1, ComputePerSampleS: 0.001}}, Bench: bench})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
}

// An offer's own io_factor is more specific than --io-factor, which is for
// the offers without one; the job takes E*N / X_eff.
func TestScoreOfferIOFactorFirst(t *testing.T) {
	own := 0.5
	offers := []Offer{
		{Name: "own", Count: 1, PricePerHour: 2, ComputePerSampleS: 0.001, IOFactor: &own},
		{Name: "flag", Count: 1, PricePerHour: 2, ComputePerSampleS: 0.001},
	}
	got, err := Score(ScoreInput{Offers: offers, IOFactor: 0.8, Epochs: 10, Samples: 36000})
	if err != nil {
		t.Fatal(err)
	}
	fio := map[string]float64{}
	for _, s := range got {
		fio[s.Name] = s.FIO
		// X_eff = 1000 * F_io samples/s; 10 epochs of 36,000 samples.
		if want := 10 * 36000 / (1000 * s.FIO) / 3600; !near(s.JobH, want, 1e-12) || !near(s.JobCost, 2*want, 1e-12) {
			t.Errorf("%s: job %v h, %v; want %v h, %v", s.Name, s.JobH, s.JobCost, want, 2*want)
		}
	}
	if fio["own"] != 0.5 || fio["flag"] != 0.8 {
		t.Errorf("F_io own %v, flag %v; want 0.5 (the offer's) and 0.8 (--io-factor)", fio["own"], fio["flag"])
	}
}

// Without --samples the table says N is the bench's file count, from the
// path --path names, not the bench's first.
func TestScoreSamplesFromTheBenchPath(t *testing.T) {
	bench := &Result{Version: SchemaVersion, Paths: []PathResult{
		{Path: "first", Files: 100, Summary: Summary{SamplesPerEpoch: 100, TIOColdS: 1, TIOWarmS: 1}},
		{Path: "used", Files: 4000, Summary: Summary{SamplesPerEpoch: 4000, TIOColdS: 1, TIOWarmS: 1}},
	}}
	in := ScoreInput{Offers: []Offer{{Name: "x", Count: 1, PricePerHour: 1, ComputePerSampleS: 0.001}}, Bench: bench, BenchPath: "used"}.Resolved()
	if in.Samples != 4000 || in.SamplesFrom == "" {
		t.Fatalf("N %d from %q, want 4000 from the bench", in.Samples, in.SamplesFrom)
	}
	scores, err := Score(in)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteScoreTable(&out, scores, "USD", in); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "N = 4000 samples/epoch: the bench's file count; --samples gives the training job's") {
		t.Errorf("the table does not say where N comes from:\n%s", out.String())
	}
}

func TestCostText(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{12345.6, "12346"}, {100, "100"}, {99.994, "99.99"}, {1, "1.00"}, {0, "0.00"}, {0.034125, "0.0341"}, {0.00034125, "0.000341"}} {
		if got := figureText(c.v); got != c.want {
			t.Errorf("figureText(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

// A bench run without compute (an I/O-only run, as make compare's) has
// readers that wait at every step barrier, which compute would hide: no
// overlap loss is taken from it, and the source says so.
func TestScoreIOOnlyBenchNoLoss(t *testing.T) {
	bench := &Result{Version: SchemaVersion, Paths: []PathResult{{Path: "p", Files: 1000, Epochs: []EpochResult{{}, {}},
		Summary: Summary{SamplesPerEpoch: 1000, TIOColdS: 1, TIOWarmS: 0.01, TStallColdS: 1.2, TStallWarmS: 0.06}}}}
	offers := []Offer{{Name: "x", Count: 1, PricePerHour: 1, ComputePerSampleS: 0.001}} // T_compute 1 s
	got, err := Score(ScoreInput{Offers: offers, Bench: bench, Epochs: 2, ColdEpochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s := got[0]; s.TCold != 1 || s.TWarm != 1 || !strings.Contains(s.FIOSource, "no overlap loss") {
		t.Errorf("T_cold %v, T_warm %v (%s); want max(compute, reads) = 1 s each, and a word that no loss was measured", s.TCold, s.TWarm, s.FIOSource)
	}
}
