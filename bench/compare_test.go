package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestTargetMet(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		name         string
		t            Target
		met, bounded bool
		bound        string
	}{
		{"ratio over its min", Target{Value: 3.6, Min: f(3)}, true, true, ">= 3"},
		{"ratio at its min", Target{Value: 0.67, Min: f(0.67)}, true, true, ">= 0.67"},
		{"ratio under its min", Target{Value: 0.62, Min: f(0.67)}, false, true, ">= 0.67"},
		{"ratio that rounds onto its min", Target{Value: 0.6663, Min: f(0.67)}, false, true, ">= 0.67"},
		{"ratio a hair under its min", Target{Value: 0.6699999, Min: f(0.67)}, false, true, ">= 0.67"},
		{"figure under its max", Target{Value: -341, Max: f(300)}, true, true, "<= 300"},
		{"figure over its max", Target{Value: 420, Max: f(300)}, false, true, "<= 300"},
		{"no bound", Target{Value: 0.41}, true, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.t.Met(); got != c.met {
				t.Errorf("Met = %v, want %v", got, c.met)
			}
			if got := c.t.Bounded(); got != c.bounded {
				t.Errorf("Bounded = %v, want %v", got, c.bounded)
			}
			if got := c.t.Bound(); got != c.bound {
				t.Errorf("Bound = %q, want %q", got, c.bound)
			}
			if c.bounded && (c.t.margin() >= 1) != c.met {
				t.Errorf("margin = %v: on the wrong side of 1 for met=%v", c.t.margin(), c.met)
			}
			// The value as shown must not contradict the verdict.
			if v, err := strconv.ParseFloat(c.t.ValueText(), 64); err != nil || (Target{Value: v, Min: c.t.Min, Max: c.t.Max}).Met() != c.met {
				t.Errorf("ValueText = %q: reads as the other verdict (%v)", c.t.ValueText(), err)
			}
		})
	}
}

// renderCompare returns s as compare-report prints it and as its page.
func renderCompare(t *testing.T, s *CompareSummary) (text, page string) {
	t.Helper()
	var tb, pb bytes.Buffer
	if err := s.WriteText(&tb); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteHTML(&pb); err != nil {
		t.Fatal(err)
	}
	return tb.String(), pb.String()
}

// moreBars is how many more bars page has than before.
func moreBars(before, page string) int {
	return strings.Count(page, `class="bar"`) - strings.Count(before, `class="bar"`)
}

// readCompareFixture reads a summary.json that bench/compare.sh wrote (one
// flat directory, session 17): 7 of its 8 bounded targets met, announced x
// direct missed.
func readCompareFixture(t *testing.T) *CompareSummary {
	t.Helper()
	f, err := os.Open("testdata/compare-summary.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := ReadCompareSummary(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReadCompareSummaryRejects(t *testing.T) {
	for _, in := range []string{``, `{}`, `not json`, `{"dataset": {"files": 5}}`, `{"paths": [], "config": {}}`} {
		if _, err := ReadCompareSummary(strings.NewReader(in)); err == nil {
			t.Errorf("ReadCompareSummary(%q): no error", in)
		}
	}
}

func TestCompareText(t *testing.T) {
	s := readCompareFixture(t)
	var b bytes.Buffer
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"train-110000-10000-1000000-1: files 5000, 546 MB, order shuffle, 10 ms round trip, 16 readers, batch 32",
		"command: FILES=5000 MEAN_SIZE=110000 MIN_SIZE=10000 MAX_SIZE=1000000 CLASSES=1 ORDER=shuffle BATCH=32 READERS=16 RTT_MS=10 REPEATS=3 make compare",
		"dataccel       3.06 (1635) [3-3.41]",
		"dataccel announced     2.92 (1712) [2.48-3.21]; direct GETs beside it 1.8 [1.71-2.25]",
		"warm, peers unmounted  dataccel 93 ms [83-136], local disk 97 ms [76-105]",
		"cold, announced: x direct-GET ceiling (>= 0.67): 0.62  MISSED",
		"cold, no announcement: x the faster peer (>= 3): 3.62  met",
		"peak RSS - RAM cache, MiB (<= 300): -341  met",
		"after warm: warm + epoch x direct-GET ceiling: 0.41\n", // no bound, no verdict
		"targets met: 7 of 8",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "MISSED"); n != 1 {
		t.Errorf("%d MISSED, want 1", n)
	}
}

// A summary with the walk of the dataset (newer than the fixture) shows it
// as a line with each path's time and range, and as one bar per path.
func TestCompareWalk(t *testing.T) {
	s := readCompareFixture(t)
	if s.WalkS != nil {
		t.Fatal("the fixture has walk times: this test adds its own")
	}
	_, before := renderCompare(t, s)
	s.WalkS = map[string]float64{"dataccel": 0.283, "s3fs": 11.193, "rclone": 1.738}
	s.RunsS["walk"] = map[string][]float64{"dataccel": {0.27, 0.283, 0.31}, "rclone": {1.7, 1.738, 1.9}}
	text, page := renderCompare(t, s)
	if want := "walk the dataset       dataccel 0.283 [0.27-0.31] s3fs 11.193 rclone 1.738 [1.7-1.9]\n"; !strings.Contains(text, want) {
		t.Errorf("text lacks %q:\n%s", want, text)
	}
	if got := moreBars(before, page); got != 3 {
		t.Errorf("%d more bars with the walk, want 3", got)
	}
}

// A summary with phase G (newer than the fixture) shows the training
// loader's epochs, one line per path, and one bar per path and epoch.
func TestCompareLoader(t *testing.T) {
	s := readCompareFixture(t)
	if s.Loader != nil {
		t.Fatal("the fixture has phase G: this test adds its own")
	}
	_, before := renderCompare(t, s)
	e := func(wall, au, first float64) LoaderEpoch { return LoaderEpoch{WallS: wall, AU: au, FirstBatchS: first} }
	s.Loader = &LoaderPhase{Workers: 8, Batch: 100, Profile: "resnet50-h100", ComputeS: 2.8, Epochs: map[string]map[string]LoaderEpoch{
		"dataccel":           {"cold": e(4.66, 0.997, 1.844), "warm": e(2.83, 1, 0.011)},
		"dataccel_announced": {"cold": e(3.42, 0.862, 0.14), "warm": e(2.84, 1, 0.015)},
		"rclone":             {"cold": e(14.0, 0.232, 2.031), "warm": e(4.2, 0.786, 0.64)},
		"direct":             {"cold": e(2.94, 1, 0.109), "warm": e(2.93, 1, 0.089)},
	}}
	text, page := renderCompare(t, s)
	for _, want := range []string{
		"training loader        8 workers x batches of 100, resnet50-h100 (2.8 s of compute an epoch)",
		"  dataccel             cold 4.66 s, AU 100%, first 1.84s     warm 2.83 s, AU 100%, first 11ms\n",
		"  dataccel announced   cold 3.42 s, AU 86%, first 140ms",
		"  rclone               cold 14 s, AU 23%, first 2.03s",
		"  direct GETs          cold 2.94 s, AU 100%, first 109ms",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if got := moreBars(before, page); got != 8 {
		t.Errorf("%d more bars with the loader, want 8", got)
	}
	if !strings.Contains(page, "training loader, cold epoch (2.8 s of compute)") {
		t.Error("page lacks the loader's cold epochs")
	}
}

// The summary says when the host pages out idle page cache (DAMON) and when
// the VM hands freed memory back to its host, and says nothing of either
// otherwise.
func TestCompareHostMemory(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*CompareSummary, bool)
		text string
	}{
		{"DAMON", func(s *CompareSummary, on bool) { s.DAMONPageout = on }, "DAMON pages out page cache"},
		{"page reporting", func(s *CompareSummary, on bool) { s.PageReporting = on }, "hands freed memory back to its host"},
	} {
		for _, on := range []bool{true, false} {
			s := readCompareFixture(t)
			tc.set(s, on)
			text, page := renderCompare(t, s)
			for what, out := range map[string]string{"text": text, "page": page} {
				if got := strings.Contains(out, tc.text); got != on {
					t.Errorf("%s %v: %s mentions it: %v", tc.name, on, what, got)
				}
			}
		}
	}
}

// A summary that lacks a time, or holds a zero one, prints "-" for it, not
// 0 s or a rate of +Inf, and the page says nothing of a fresh-memory touch
// it was not given.
func TestCompareMissingTimes(t *testing.T) {
	s := readCompareFixture(t)
	delete(s.AnnouncedColdS, "direct")
	s.FreshMemory = nil
	s.PrefetchModes = map[string]float64{"off": 0, "dir_order": 1.5}
	text, page := renderCompare(t, s)
	for _, want := range []string{"direct GETs beside it -", "prefetch off 0 (-)  dir order 1.5 (3333)  announced - (-)"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "Inf") || strings.Contains(page, "Inf") {
		t.Errorf("a rate of Inf printed:\n%s", text)
	}
	if strings.Contains(page, "fresh-memory touch") {
		t.Error("the page reports a fresh-memory touch the summary does not hold")
	}
}

func TestCompareHTML(t *testing.T) {
	s := readCompareFixture(t)
	var b bytes.Buffer
	if err := s.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, "<h2>Targets: 7 of 8 met</h2>") {
		t.Error("page lacks the count of targets met")
	}
	if !strings.Contains(page, "<code>FILES=5000 MEAN_SIZE=110000") {
		t.Error("page lacks the command that reproduces the run")
	}
	if n := strings.Count(page, `<td class="missed">`); n != 1 {
		t.Errorf("%d targets marked missed, want 1", n)
	}
	if n := strings.Count(page, `<td class="met">`); n != 7 {
		t.Errorf("%d targets marked met, want 7", n)
	}
	svgs := regexp.MustCompile(`(?s)<svg.*?</svg>`).FindAllString(page, -1)
	if len(svgs) != 2 {
		t.Fatalf("%d charts, want 2", len(svgs))
	}
	for _, svg := range svgs {
		if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
			t.Errorf("chart is not well-formed SVG: %v", err)
		}
	}
	// One bar per bounded target, red for the one missed; one bar per time:
	// 5 paths cold and warm, 2 announced, 3 after warm, 2 + 2 re-reads, 3 listings.
	bars := func(svg string) int { return strings.Count(svg, `class="bar"`) }
	if n := bars(svgs[0]); n != 8 {
		t.Errorf("targets chart: %d bars, want 8", n)
	}
	if n := strings.Count(svgs[0], `fill="#d62728"`); n != 1 {
		t.Errorf("targets chart: %d red bars, want 1", n)
	}
	if n := bars(svgs[1]); n != 22 {
		t.Errorf("times chart: %d bars, want 22", n)
	}
	for _, fetch := range []string{"<script", " src=", " href="} {
		if strings.Contains(page, fetch) {
			t.Errorf("page has %q: not self-contained", fetch)
		}
	}
}

// TestCompareScriptRejectsBadMix: compare.sh and randread.sh refuse a mix
// they cannot generate or run, before they install, start or write anything.
func TestCompareScriptRejectsBadMix(t *testing.T) {
	for _, c := range []struct {
		name    string
		script  string
		env     []string
		wantMsg string
	}{
		{"mean under the smallest size", "compare.sh", []string{"MEAN_SIZE=5000"}, "MEAN_SIZE=5000 lies outside MIN_SIZE..MAX_SIZE (10000..1000000)"},
		{"mean over the largest size", "compare.sh", []string{"MEAN_SIZE=300000", "MAX_SIZE=200000"}, "MEAN_SIZE=300000 lies outside"},
		{"not a number", "compare.sh", []string{"READERS=sixteen"}, "READERS=sixteen: want a whole number"},
		{"no readers", "compare.sh", []string{"READERS=0"}, "READERS=0: want a whole number > 0"},
		{"no files", "compare.sh", []string{"FILES=0"}, "FILES=0: want a whole number > 0"},
		{"a leading zero", "compare.sh", []string{"BATCH=08"}, "BATCH=08: want a whole number > 0"},
		{"round trip with a leading zero", "compare.sh", []string{"RTT_MS=010"}, "RTT_MS=010: want a whole number"},
		{"unknown order", "compare.sh", []string{"ORDER=random"}, "ORDER=random: want shuffle or dir"},
		{"walk neither on nor off", "compare.sh", []string{"WALK=yes"}, "WALK=yes: want 1 or 0"},
		{"subdirectories not a number", "compare.sh", []string{"SUBDIRS=two"}, "SUBDIRS=two: want a whole number"},
		{"mount flags with a command in them", "compare.sh", []string{"DATACCEL_FLAGS=--hedge=false $(id)"}, "DATACCEL_FLAGS: $(id): want flags and plain values"},
		{"random: mean outside the sizes", "randread.sh", []string{"MEAN_SIZE=5"}, "MEAN_SIZE=5 lies outside MIN_SIZE..MAX_SIZE (20000000..80000000)"},
		{"a mix larger than the disk", "compare.sh", []string{"FILES=1000000000", "MEAN_SIZE=1000000"}, "not enough disk at"},
		{"random: records larger than the disk", "randread.sh", []string{"FILES=1000000000"}, "not enough disk at"},
		{"random: no runs", "randread.sh", []string{"RUNS=0"}, "RUNS=0: want a whole number > 0"},
		{"random: read size", "randread.sh", []string{"BS=64kb"}, "BS=64kb: want a size such as 4k or 64k"},
		{"random: direct", "randread.sh", []string{"DIRECT=yes"}, "DIRECT=yes: want 0 or 1"},
		{"random: small disk cache", "randread.sh", []string{"DISK_SMALL=lots"}, "DISK_SMALL=lots: want a size such as 256MiB, 2GiB or 10%"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			cmd := exec.Command("bash", c.script)
			cmd.Env = append(os.Environ(), append(c.env, "OUT="+out, "PEERS_DIR=/nonexistent")...)
			msg, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(msg), c.wantMsg) {
				t.Fatalf("%s with %v: %v, want exit 2 saying %q; output:\n%s", c.script, c.env, err, c.wantMsg, msg)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s created its output directory for a rejected mix", c.script)
			}
		})
	}
}

// TestScriptsFindPeers runs the comparison scripts from a checkout placed
// below the directory that holds shared/peers, as a reviewer's clone may be,
// with stub peer scripts whose install.sh says which copy ran and stops the
// run there.
func TestScriptsFindPeers(t *testing.T) {
	stubPeers := func(t *testing.T, dir string, code int) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		install := fmt.Sprintf("#!/bin/sh\necho \"stub install ran: %s\"\nexit %d\n", dir, code)
		if err := os.WriteFile(filepath.Join(dir, "install.sh"), []byte(install), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "lib.sh"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkout := func(t *testing.T, root string) string {
		t.Helper()
		repo := filepath.Join(root, "work", "review", "dataccel")
		if err := os.MkdirAll(filepath.Join(repo, "bench"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"compare.sh", "randread.sh", "room.sh", "peers.sh", "lib.sh"} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(repo, "bench", f), b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return repo
	}
	for _, c := range []struct {
		name     string
		peers    string // where stub peers go, relative to the temporary root; "" for none
		peersDir bool   // PEERS_DIR points at them instead of leaving them to be found
		wantCode int
		wantMsg  string
	}{
		{"shared two levels above the checkout", "work/shared/peers", false, 3, "stub install ran: "},
		{"shared beside the checkout", "work/review/shared/peers", false, 3, "stub install ran: "},
		{"PEERS_DIR", "elsewhere/peers", true, 3, "stub install ran: "},
		{"no peers anywhere", "", false, 1, "peer scripts not found at "},
	} {
		for _, script := range []string{"compare.sh", "randread.sh"} {
			t.Run(c.name+"/"+script, func(t *testing.T) {
				root := t.TempDir()
				repo := checkout(t, root)
				env := []string{"FILES=4", "OUT=" + filepath.Join(root, "out")}
				if c.peers != "" {
					stubPeers(t, filepath.Join(root, c.peers), c.wantCode)
					if c.peersDir {
						env = append(env, "PEERS_DIR="+filepath.Join(root, c.peers))
					}
				}
				cmd := exec.Command("bash", filepath.Join(repo, "bench", script))
				for _, kv := range os.Environ() {
					if !strings.HasPrefix(kv, "PEERS_DIR=") {
						cmd.Env = append(cmd.Env, kv)
					}
				}
				cmd.Env = append(cmd.Env, env...)
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != c.wantCode || !strings.Contains(string(out), c.wantMsg) {
					t.Fatalf("%s: %v, want exit %d saying %q; output:\n%s", script, err, c.wantCode, c.wantMsg, out)
				}
				if c.peers != "" && !strings.Contains(string(out), filepath.Join(root, c.peers)) {
					t.Errorf("%s ran other peer scripts than %s; output:\n%s", script, c.peers, out)
				}
			})
		}
	}
}
