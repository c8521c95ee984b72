package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/dataccel/dataccel/store"
)

// goldenKeys is the JSON schema of a result (every key path, arrays as
// []). A change here breaks every consumer of --json: bump SchemaVersion
// (a key added that a consumer may ignore does not).
var goldenKeys = strings.Fields(`
config config.accelerators config.announce config.batch config.compute_per_sample_s config.concurrency
config.drop_caches config.epochs config.max_steps config.order config.prefetch config.profile config.seed
config.target_au config.workers
paths paths[] paths[].bytes paths[].bounds paths[].bounds.bandwidth_s paths[].bounds.binding
paths[].bounds.bound_s paths[].bounds.latency_s paths[].bounds.measured_s paths[].bounds.ratio
paths[].bounds.request_rate_s paths[].epochs paths[].epochs[] paths[].epochs[].au paths[].epochs[].bytes
paths[].epochs[].compute_s paths[].epochs[].epoch paths[].epochs[].fetched paths[].epochs[].fetched.bytes
paths[].epochs[].fetched.bytes_per_read paths[].epochs[].fetched.cache_hit_ratio paths[].epochs[].fetched.gets
paths[].epochs[].io_time_s paths[].epochs[].latency_s
paths[].epochs[].latency_s.max paths[].epochs[].latency_s.mean paths[].epochs[].latency_s.p50
paths[].epochs[].latency_s.p90 paths[].epochs[].latency_s.p99 paths[].epochs[].latency_s.p99_9
paths[].epochs[].mb_per_s paths[].epochs[].samples paths[].epochs[].samples_per_s paths[].epochs[].stall_s paths[].epochs[].steps
paths[].epochs[].time_to_first_batch_s paths[].epochs[].wall_s paths[].files paths[].kind
paths[].latency_cdf paths[].latency_cdf.cold paths[].latency_cdf.warm paths[].list_s
paths[].max_accelerators paths[].max_accelerators.after_epochs paths[].max_accelerators.limit
paths[].max_accelerators.max paths[].max_accelerators.page_cache_dropped
paths[].max_accelerators.target_au paths[].max_accelerators.trials paths[].max_accelerators.trials[]
paths[].max_accelerators.trials[].accelerators paths[].max_accelerators.trials[].au
paths[].max_accelerators.trials[].wall_s paths[].path paths[].readers paths[].summary
paths[].summary.au_cold paths[].summary.au_warm paths[].summary.io_factor paths[].summary.samples_per_epoch
paths[].summary.t_compute_s paths[].summary.t_first_batch_cold_s paths[].summary.t_first_batch_warm_s paths[].summary.t_stall_cold_s paths[].summary.t_stall_warm_s paths[].summary.t_cold_s paths[].summary.t_io_cold_s paths[].summary.t_io_warm_s
paths[].summary.t_warm_s paths[].summary.warm_epochs
probe probe.bandwidth_bytes_per_s probe.request_rate_per_s probe.rtt_s probe.source
ratios ratios[] ratios[].baseline ratios[].cold_ratio ratios[].path ratios[].warm_ratio
started tool version`)

// keyPaths lists every key path of a decoded JSON value; arrays of objects
// are descended into, arrays of numbers are leaves.
func keyPaths(prefix string, v any, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			keyPaths(p, c, out)
		}
	case []any:
		for _, c := range v {
			if _, ok := c.(map[string]any); ok {
				out[prefix+"[]"] = true
				keyPaths(prefix+"[]", c, out)
			}
		}
	}
}

// TestGenRunLocalAndS3 generates one small dataset into a directory and
// into the test S3 server, runs both in one bench (A B A B), and checks
// the numbers, the JSON schema and the HTML report.
func TestGenRunLocalAndS3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := tmpfsDir(t)
	gcfg := genSmall(t, dir, 200)
	var total int64
	for _, f := range gcfg.Plan() {
		total += f.Size
	}

	st := srv.NewBucket(t)
	gcfg.Prefix = "imagenet/train/"
	var progress bytes.Buffer
	gres, err := Generate(ctx, gcfg, st, NewProgress(&progress, false))
	if err != nil {
		t.Fatal(err)
	}
	if gres.Files != 200 || gres.Bytes != total {
		t.Fatalf("gen to s3: %d files %d bytes, want 200 %d", gres.Files, gres.Bytes, total)
	}
	if !strings.Contains(progress.String(), "gen: 200/200") {
		t.Errorf("gen progress lacks the final line:\n%s", progress.String())
	}

	counting := store.NewCounting(st)
	s3src := StoreSource{Store: counting, Prefix: "imagenet/train/", Label: "s3://" + st.Bucket() + "/imagenet/train/", Counts: counting.C}
	res, err := Run(ctx, RunConfig{Workers: 2, Concurrency: 8, Batch: 16, Epochs: 2, ComputePerSample: 200 * time.Microsecond,
		Seed: 5, Probe: true, FindMaxAccelerators: true, Profile: "test"}, DirSource{Root: dir}, s3src)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Paths) != 2 || len(res.Ratios) != 1 {
		t.Fatalf("%d paths, %d ratios; want 2, 1", len(res.Paths), len(res.Ratios))
	}
	for _, p := range res.Paths {
		if p.Files != 200 || p.Bytes != total || len(p.Epochs) != 2 {
			t.Errorf("%s: %d files %d bytes %d epochs; want 200 %d 2", p.Path, p.Files, p.Bytes, len(p.Epochs), total)
		}
		for _, e := range p.Epochs {
			if e.Samples != 200 || e.Bytes != total || e.Steps != 13 || e.AU <= 0 || e.AU > 1 {
				t.Errorf("%s epoch %d: samples %d bytes %d steps %d AU %v", p.Path, e.Epoch, e.Samples, e.Bytes, e.Steps, e.AU)
			}
			// Direct GETs fetch each file once an epoch; a local directory
			// tells nothing.
			switch f := e.Fetched; {
			case p.Kind == "dir" && f != nil:
				t.Errorf("%s epoch %d: fetched %+v from a local directory", p.Path, e.Epoch, f)
			case p.Kind == "s3" && (f == nil || f.Gets != 200 || f.Bytes != total || f.BytesPerRead != 1 || f.HitRatio != 0):
				t.Errorf("%s epoch %d: fetched %+v; want 200 GETs, %d bytes, 1 per byte read, no hits", p.Path, e.Epoch, f, total)
			}
		}
		if m := p.MaxAccelerators; m == nil || len(m.Trials) == 0 || m.AfterEpochs != 2 || m.PageCacheDropped {
			t.Errorf("%s: find-max %+v; want trials after 2 epochs, page cache kept", p.Path, m)
		}
		if p.Bounds.Binding == "" || p.Bounds.BoundS <= 0 {
			t.Errorf("%s: no binding bound with a probed store: %+v", p.Path, p.Bounds)
		}
	}
	if res.Probe.RTTS <= 0 || res.Probe.BandwidthBps <= 0 || !strings.HasPrefix(res.Probe.Source, "probed") {
		t.Errorf("probe: %+v", res.Probe)
	}
	if res.Paths[1].Kind != "s3" || res.Paths[1].Readers != 8 {
		t.Errorf("s3 path: kind %s readers %d, want s3 8", res.Paths[1].Kind, res.Paths[1].Readers)
	}

	// JSON: stable keys, and it reads back.
	var js bytes.Buffer
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	keyPaths("", doc, seen)
	var got []string
	for k := range seen {
		got = append(got, k)
	}
	sort.Strings(got)
	want := slices.Clone(goldenKeys)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("JSON keys changed:\ngot  %v\nwant %v", got, want)
	}
	back, err := ReadResult(bytes.NewReader(js.Bytes()))
	if err != nil || back.Paths[1].Summary != res.Paths[1].Summary {
		t.Errorf("read back: err %v, summary %+v", err, back.Paths[1].Summary)
	}

	// Table: both paths, aligned.
	var tb bytes.Buffer
	if err := res.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{dir, "imagenet/train/", "p99.9", "AU", "relative to", "run after 2 epochs, on the caches they left"} {
		if !strings.Contains(tb.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, tb.String())
		}
	}

	// HTML: parses, has the three charts, runs no script.
	var hb bytes.Buffer
	if err := res.WriteHTML(&hb); err != nil {
		t.Fatal(err)
	}
	root, err := html.Parse(bytes.NewReader(hb.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	svgs, scripts, cdfPaths := 0, 0, 0
	for n := range root.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		switch n.Data {
		case "svg":
			svgs++
		case "script":
			scripts++
		case "path":
			cdfPaths++
		}
		for _, a := range n.Attr {
			if a.Key == "id" {
				ids[a.Val] = true
			}
		}
	}
	if svgs != 3 || scripts != 0 {
		t.Errorf("html: %d svg, %d script; want 3, 0", svgs, scripts)
	}
	for _, id := range []string{"epoch-time", "latency-cdf", "au"} {
		if !ids[id] {
			t.Errorf("html lacks chart %q", id)
		}
	}
	if cdfPaths != 4 { // cold and warm for each of two paths
		t.Errorf("html: %d CDF lines, want 4", cdfPaths)
	}
}

// TestRunFileList: with a file list, a directory path and an object path
// both read exactly the listed files, with the list's sizes in the report
// for the directory; an object path that lacks a listed file fails.
func TestRunFileList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := tmpfsDir(t)
	gcfg := genSmall(t, dir, 60)
	var list strings.Builder
	var want int64
	for i, f := range gcfg.Plan() { // keys relative to the dataset's root
		if i%3 == 0 {
			fmt.Fprintf(&list, "%s\t%d\n", f.Key, f.Size)
			want += f.Size
		}
	}
	st := srv.NewBucket(t)
	gcfg.Prefix = "ds/"
	if _, err := Generate(ctx, gcfg, st, NewProgress(io.Discard, false)); err != nil {
		t.Fatal(err)
	}
	s3src := StoreSource{Store: st, Prefix: "ds/", Label: "s3://" + st.Bucket() + "/ds/"}
	// A list without sizes (paths alone, as a CSV of paths gives) reports
	// the bytes its reads found, for a directory as for an object path.
	noSizes := regexp.MustCompile(`\t[0-9]+\n`).ReplaceAllString(list.String(), "\n")
	var files []File
	for _, tc := range []struct{ name, list string }{{"with sizes", list.String()}, {"paths alone", noSizes}} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if files, err = ParseFileList(strings.NewReader(tc.list)); err != nil {
				t.Fatal(err)
			}
			res, err := Run(ctx, RunConfig{Workers: 2, Concurrency: 4, Batch: 4, Epochs: 2, Seed: 3, FileList: files}, DirSource{Root: dir}, s3src)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range res.Paths {
				if e := p.Epochs[0]; p.Files != 20 || p.Bytes != want || e.Samples != 20 || e.Bytes != want {
					t.Errorf("%s: %d files %d bytes listed, epoch %d samples %d bytes; want 20 and %d", p.Path, p.Files, p.Bytes, e.Samples, e.Bytes, want)
				}
			}
			if files[0].Size != 0 && tc.name == "paths alone" {
				t.Error("the run wrote into the caller's file list")
			}
		})
	}
	missing := append(slices.Clone(files), File{Name: "no/such.jpg"})
	if _, err := Run(ctx, RunConfig{Workers: 2, Concurrency: 4, Batch: 4, Epochs: 1, FileList: missing}, s3src); err == nil || !strings.Contains(err.Error(), `no object "no/such.jpg"`) {
		t.Errorf("a listed file missing from the bucket: err %v", err)
	}
}
