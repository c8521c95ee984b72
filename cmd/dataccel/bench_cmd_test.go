package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dataccel/dataccel/bench"
	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
)

// runBench runs the binary with the test server's credentials and returns
// its output and exit code; a run past limit is killed and reported as -1.
func runBench(t *testing.T, limit time.Duration, args ...string) (string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey, "AWS_SESSION_TOKEN=")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		return string(out), -1, took
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode(), took
	}
	if err != nil {
		t.Fatalf("dataccel %v: %v", args, err)
	}
	return string(out), 0, took
}

// silentEndpoint accepts TCP connections and never answers a byte.
func silentEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// TestBenchEndpointNeverAnswers: bench run and bench gen against an
// endpoint that takes connections and never answers fail within
// --connect-timeout (default 10 s), as mount and warm do, instead of
// hanging without a word.
func TestBenchEndpointNeverAnswers(t *testing.T) {
	endpoint := silentEndpoint(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"run", []string{"bench", "run", "s3://bkt/p", "--batch", "50", "--epochs", "1", "--compute-per-sample", "1ms", "--endpoint", endpoint}},
		{"gen", []string{"bench", "gen", "-q", "--to", "s3://bkt/p", "-n", "5", "--endpoint", endpoint}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, code, took := runBench(t, 40*time.Second, tc.args...)
			if code == -1 {
				t.Fatalf("still running after %s; output:\n%s", took.Round(time.Second), out)
			}
			if code == 0 || !strings.Contains(out, "unreachable: no answer within 10s") || took > 20*time.Second {
				t.Fatalf("exit %d after %s, want a non-zero exit within the connect timeout saying no answer; output:\n%s", code, took.Round(time.Millisecond), out)
			}
		})
	}
}

// TestBenchStalledStore: an endpoint that answers the check and then stalls
// GETs (run) or PUTs (gen) costs a bounded wait (--stall-timeout,
// --io-timeout), not a hang.
func TestBenchStalledStore(t *testing.T) {
	st := srv.NewBucket(t)
	dataset(t, st, "run/", 8, 4<<10)
	for _, tc := range []struct {
		name, method, want string
		args               []string
	}{
		// The prefix's objects stall, not the listing under the bucket.
		{"run", "GET", "gave up after retries (io timeout 1s)", []string{"bench", "run", "-q", "s3://" + st.Bucket() + "/run", "--batch", "4", "--epochs", "1",
			"--compute-per-sample", "1ms", "--no-probe"}},
		{"gen", "PUT", "no answer within 1s", []string{"bench", "gen", "-q", "--to", "s3://" + st.Bucket() + "/gen", "-n", "5", "--classes", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := faultProxy(t)
			fp.Add(testenv.Rule{Fault: testenv.StallFirstByte, Method: tc.method, PathContains: "/" + st.Bucket() + "/" + tc.name, Stall: time.Minute})
			args := append(tc.args, "--endpoint", fp.Endpoint, "--io-timeout", "1s", "--stall-timeout", "300ms")
			out, code, took := runBench(t, 40*time.Second, args...)
			if code == -1 {
				t.Fatalf("still running after %s; output:\n%s", took.Round(time.Second), out)
			}
			if code == 0 || !strings.Contains(out, tc.want) || took > 15*time.Second {
				t.Fatalf("exit %d after %s, want a non-zero exit within seconds saying %q; output:\n%s", code, took.Round(time.Millisecond), tc.want, out)
			}
		})
	}
}

// TestBenchGenWarnsOfEarlierFiles: gen into a directory or prefix that
// holds files of an earlier, larger run warns that it leaves them (bench
// run would read the mix) and deletes nothing; a run that writes every file
// there, or files bench run skips (hidden ones), give no warning.
func TestBenchGenWarnsOfEarlierFiles(t *testing.T) {
	st := srv.NewBucket(t)
	dir := filepath.Join(t.TempDir(), "ds")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, ".keep"), nil, 0o644)
	for _, tc := range []struct {
		name  string
		to    string
		extra []string
		count func() int
	}{
		{"dir", dir, nil, func() int {
			ents, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
			return len(ents)
		}},
		{"s3", "s3://" + st.Bucket() + "/ds", []string{"--endpoint", srv.Endpoint}, func() int {
			n := 0
			st.List(context.Background(), "ds/", true, func(store.Object) error { n++; return nil })
			return n
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gen := func(files string) string {
				t.Helper()
				args := append([]string{"bench", "gen", "-q", "--to", tc.to, "-n", files, "--classes", "2",
					"--min-size", "64", "--mean-size", "1000", "--max-size", "4000"}, tc.extra...)
				out, code, _ := runBench(t, 30*time.Second, args...)
				if code != 0 {
					t.Fatalf("bench gen -n %s: exit %d; output:\n%s", files, code, out)
				}
				return out
			}
			const warn = "already holds 10 files this run does not write (such as n01440764/n01440764_5.JPEG)"
			for _, step := range []struct {
				files string
				warn  bool
			}{{"20", false}, {"10", true}, {"20", false}} {
				out := gen(step.files)
				if got := strings.Contains(out, "warning"); got != step.warn || step.warn && !strings.Contains(out, warn) {
					t.Errorf("-n %s: warned %v, want %v saying %q; output:\n%s", step.files, got, step.warn, warn, out)
				}
			}
			if n := tc.count(); n != 20 {
				t.Errorf("%d files at --to, want the 20 generated (nothing deleted)", n)
			}
		})
	}
}

// TestBenchRunOutputFiles: an output file that cannot be created is a usage
// error before any epoch runs; one that fails at the end (a full disk)
// still leaves the tables printed.
func TestBenchRunOutputFiles(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, f := range []string{"a/1.jpg", "a/2.jpg", "b/3.jpg", "b/4.jpg"} {
		p := filepath.Join(data, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, make([]byte, 1000), 0o644)
	}
	run := []string{"bench", "run", "-q", data, "--batch", "2", "--epochs", "2", "--compute-per-sample", "1ms"}
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantMsg    string
		wantTables bool
	}{
		{"json dir missing", []string{"--json", "/nonexistdir/r.json"}, 2, "--json /nonexistdir/r.json: open /nonexistdir/r.json: no such file or directory", false},
		{"html dir missing", []string{"--html", "/nonexistdir/r.html"}, 2, "--html /nonexistdir/r.html", false},
		{"json full at the end", []string{"--json", "/dev/full"}, 1, "/dev/full: write json: write /dev/full: no space left on device", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, _ := runBench(t, 60*time.Second, append(run, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantMsg) {
				t.Fatalf("exit %d, want %d saying %q; output:\n%s", code, tc.wantCode, tc.wantMsg, out)
			}
			if got := strings.Contains(out, "T_cold"); got != tc.wantTables {
				t.Fatalf("tables printed: %v, want %v; output:\n%s", got, tc.wantTables, out)
			}
		})
	}
	if _, err := os.Stat("/nonexistdir"); err == nil {
		t.Error("/nonexistdir was made")
	}
}

// benchFailingAfter20 runs bench run --json over 20 objects whose 25th GET
// stalls past --io-timeout, with args added, and returns its output, exit
// code and the --json path.
func benchFailingAfter20(t *testing.T, args ...string) (out string, code int, jsonFile string) {
	t.Helper()
	st := srv.NewBucket(t)
	dataset(t, st, "ds/", 20, 4<<10)
	fp := faultProxy(t)
	fp.Add(testenv.Rule{Fault: testenv.StallFirstByte, Method: "GET", PathContains: "/" + st.Bucket() + "/ds/", Every: 25, Stall: time.Minute})
	jsonFile = filepath.Join(t.TempDir(), "r.json")
	out, code, _ = runBench(t, 60*time.Second, append([]string{"bench", "run", "-q", "s3://" + st.Bucket() + "/ds", "--batch", "4",
		"--compute-per-sample", "1ms", "--no-probe", "--endpoint", fp.Endpoint, "--io-timeout", "100ms", "--stall-timeout", "300ms",
		"--json", jsonFile}, args...)...)
	return out, code, jsonFile
}

// TestBenchRunAbortKeepsEpochs: a run that fails in its second epoch still
// prints the first epoch's tables beside the error.
func TestBenchRunAbortKeepsEpochs(t *testing.T) {
	// Epoch 1 reads the 20 objects; the 25th GET, in epoch 2, fails the run.
	out, code, jf := benchFailingAfter20(t, "--epochs", "3")
	if code != 1 || !strings.Contains(out, "epoch 2:") || !strings.Contains(out, "T_cold") {
		t.Fatalf("exit %d, want 1 with epoch 1's tables and epoch 2's error; output:\n%s", code, out)
	}
	if _, err := os.Stat(jf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--json of a run that stopped in its second epoch: %v, want no file (no partial result passes for a whole one)", err)
	}
	var epochRows int
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && strings.HasPrefix(f[0], "s3://") && (f[1] == "1" || f[1] == "2" || f[1] == "3") {
			epochRows++
		}
	}
	if epochRows != 1 {
		t.Errorf("%d epoch rows, want 1 (the completed epoch); output:\n%s", epochRows, out)
	}
}

// TestBenchRunFindMaxFailsAfterEpochs: every epoch completed, and the
// search for the most accelerators after them failed: the epochs' results
// are written anyway, beside the error, and say no search finished.
func TestBenchRunFindMaxFailsAfterEpochs(t *testing.T) {
	// The epoch reads the 20 objects; the search's first trial fails.
	out, code, jf := benchFailingAfter20(t, "--epochs", "1", "--find-max-accelerators")
	if code != 1 || !strings.Contains(out, "find max accelerators") || !strings.Contains(out, "results are written") {
		t.Fatalf("exit %d, want 1 with the search's error and a word that the results are written; output:\n%s", code, out)
	}
	f, err := os.Open(jf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := bench.ReadResult(f)
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Paths[0]; len(p.Epochs) != 1 || p.MaxAccelerators != nil || p.Summary.SamplesPerEpoch != 20 {
		t.Errorf("result: %d epochs, max accelerators %+v, %d samples; want the 1 epoch of 20 and no search", len(p.Epochs), p.MaxAccelerators, p.Summary.SamplesPerEpoch)
	}
}

// TestScoreOffersValidated: the offers file's values are checked as the
// flags are, naming the offer and the field.
func TestScoreOffersValidated(t *testing.T) {
	const base = "offers:\n- {name: big, count: 1, price_per_hour: 1, profile: resnet50-a100, checkpoint_interval_h: 1, %s}\n"
	for _, tc := range []struct{ field, want string }{
		{"io_factor: 2", `"big": io_factor 2: want a value in (0, 1]`},
		{"io_factor: -0.5", `"big": io_factor -0.5: want a value in (0, 1]`},
		{"preemptions_per_hour: -1", `"big": preemptions_per_hour -1: want 0 or more`},
	} {
		t.Run(tc.field, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "offers.yaml")
			os.WriteFile(f, []byte(strings.Replace(base, "%s", tc.field, 1)), 0o644)
			out, code, _ := runBench(t, 30*time.Second, "score", "--offers", f, "--io-factor", "0.9")
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want an error saying %q; output:\n%s", code, tc.want, out)
			}
		})
	}
}

// TestBenchCountsFetches: through a real mount the bench reports what the
// store sent in each epoch, from the mount's own counters: the cold epoch
// fetches every file, the warm one nothing. Direct GETs count their own.
func TestBenchCountsFetches(t *testing.T) {
	st := srv.NewBucket(t)
	const n = 40
	total := 0
	for _, b := range dataset(t, st, "ds/", n, 20<<10) {
		total += len(b)
	}
	m := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "--ram-cache-size", "64MiB", "s3://"+st.Bucket())
	for _, tc := range []struct {
		name, path string
		// fetched per byte read in the second epoch: none through the
		// mount (its caches), all again for direct GETs
		warmGets int64
		warm     float64
	}{
		{"mount", filepath.Join(m.dir, "ds"), 0, 0},
		{"direct GETs", "s3://" + st.Bucket() + "/ds", n, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := filepath.Join(t.TempDir(), "r.json")
			out, code, _ := runBench(t, 60*time.Second, "bench", "run", "-q", "--endpoint", srv.Endpoint, "--no-probe",
				"--batch", "4", "--epochs", "2", "--compute-per-sample", "0", "--json", js, tc.path)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			b, err := os.ReadFile(js)
			if err != nil {
				t.Fatal(err)
			}
			var res bench.Result
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			eps := res.Paths[0].Epochs
			if len(eps) != 2 || eps[0].Fetched == nil || eps[1].Fetched == nil {
				t.Fatalf("epochs %+v: want two, each with what was fetched", eps)
			}
			// The cold epoch: every file once (a mount may also fetch
			// ahead, never less than what was read).
			if c := eps[0].Fetched; c.Gets < n || c.Bytes < int64(total) || c.BytesPerRead < 1 || c.HitRatio != 0 {
				t.Errorf("cold epoch fetched %+v; want at least %d GETs and %d bytes", c, n, total)
			}
			if w := eps[1].Fetched; w.Gets != tc.warmGets || w.BytesPerRead != tc.warm || w.HitRatio != 1-tc.warm {
				t.Errorf("warm epoch fetched %+v; want %d GETs, %v per byte read", w, tc.warmGets, tc.warm)
			}
			if !strings.Contains(out, "fetched/read") {
				t.Errorf("the table has no fetched/read column:\n%s", out)
			}
		})
	}
}

// TestParseBandwidth: bytes or bits per second, as NICs are quoted; a
// lower-case b alone would read a 25 Gbit/s NIC as 25 GB/s.
func TestParseBandwidth(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		err  string
	}{
		{"1.2GB", 1.2e9, ""},
		{"500MiB/s", 500 << 20, ""},
		{"25Gbit", 25e9 / 8, ""},
		{"10Gbps", 10e9 / 8, ""},
		{"1GBps", 1e9, ""},
		{"100MBps", 100e6, ""},
		{"2GiBps", 2 << 30, ""},
		{"10GBit", 10e9 / 8, ""},
		{"100Mbit/s", 100e6 / 8, ""},
		{"25Gb", 0, "ambiguous"},
		{"0", 0, "want bytes per second"},
		{"fast", 0, "want bytes per second"},
	} {
		got, err := parseBandwidth(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseBandwidth(%q) = %v, %v; want an error saying %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("parseBandwidth(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
