package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// CompareSummary is the summary.json that bench/compare.sh writes: each
// phase's median time per path over the runs, every run, and the targets
// of the comparison. Paths are keyed by role: dataccel, s3fs, rclone,
// direct (direct GETs) and local (a copy on local disk).
type CompareSummary struct {
	Command string `json:"command"` // the variables that reproduce the run, before `make compare`
	Dataset struct {
		Prefix  string  `json:"prefix"`
		Order   string  `json:"order"`
		Files   int     `json:"files"`
		Bytes   int64   `json:"bytes"`
		RTTMs   float64 `json:"rtt_ms"`
		Readers int     `json:"readers"`
		Batch   int     `json:"batch"`
		Repeats int     `json:"repeats"`
	} `json:"dataset"`
	ColdS           map[string]float64 `json:"cold_s"`
	WarmS           map[string]float64 `json:"warm_s"`
	AnnouncedColdS  map[string]float64 `json:"announced_cold_s"`
	AloneWarmS      map[string]float64 `json:"alone_warm_s"`
	PythonOpenWarmS map[string]float64 `json:"python_open_warm_s"`
	AfterWarmS      map[string]float64 `json:"after_warm_s"` // warm (the `dataccel warm` run), epoch, direct
	List10kS        map[string]float64 `json:"list_10k_s"`
	// WalkS: the bench's own walk of the dataset (every directory listed,
	// every file's size) before phase A's first epoch, cold, by path.
	WalkS map[string]float64 `json:"walk_s"`
	// RunsS holds every run behind a median: phase (the keys above without
	// _s) -> path -> seconds.
	RunsS         map[string]map[string][]float64 `json:"runs_s"`
	PrefetchModes map[string]float64              `json:"prefetch_modes_4_readers_s"` // off, dir_order, announced
	PeakRSSMiB    float64                         `json:"dataccel_peak_rss_mib"`
	// RAMFileMiB: the memory of the RAM cache's memory file at unmount
	// (the largest over the mounts), which RSS does not show; absent
	// from summaries before it.
	RAMFileMiB  float64            `json:"dataccel_ram_file_mib"`
	RAMCacheMiB float64            `json:"ram_cache_mib"`
	FreshMemory map[string]float64 `json:"host_fresh_memory_s_per_gib"` // start, before_b, end
	// DAMONPageout: the host pages out page cache it finds idle (DAMON),
	// which leaves holes for the warm re-reads to refill.
	DAMONPageout bool `json:"host_damon_pageout"`
	// PageReporting: the VM hands freed memory back to its host (free page
	// reporting), so a first touch of it costs a host fault.
	PageReporting bool `json:"host_page_reporting"`
	// Loader is phase G, absent from summaries older than it.
	Loader  *LoaderPhase `json:"loader,omitempty"`
	Targets []Target     `json:"targets"`
}

// LoaderPhase is phase G of compare.sh: a training job's loader (workers
// that each load whole batches, as PyTorch's DataLoader workers do) with
// the compute of a profile between steps, one cold epoch then one warm,
// one run per path.
type LoaderPhase struct {
	Workers  int     `json:"workers"`
	Batch    int     `json:"batch"`
	Profile  string  `json:"profile"`
	ComputeS float64 `json:"compute_s"` // an epoch's compute, which no loader can beat
	// Epochs: path (dataccel, dataccel_announced, rclone, direct) -> "cold"
	// and "warm".
	Epochs map[string]map[string]LoaderEpoch `json:"epochs"`
}

// LoaderEpoch is one epoch of phase G.
type LoaderEpoch struct {
	WallS float64 `json:"wall_s"`
	// AU is the accelerator utilisation after the first step (MLPerf
	// Storage's); FirstBatchS is the wait before that step.
	AU          float64 `json:"au"`
	FirstBatchS float64 `json:"first_batch_s"`
}

// loaderPaths are phase G's paths in the order shown, with their names.
var loaderPaths = []struct{ key, name string }{
	{"dataccel", "dataccel"}, {"dataccel_announced", "dataccel announced"}, {"rclone", "rclone"}, {"direct", "direct GETs"},
}

// Target is one measure of a comparison and, when it has one, its bound:
// Min for a ratio that must reach it, Max for a figure that must stay
// under it.
type Target struct {
	Name  string   `json:"name"`
	Value float64  `json:"value"`
	Min   *float64 `json:"min,omitempty"`
	Max   *float64 `json:"max,omitempty"`
}

// Bounded reports whether t has a bound to meet.
func (t Target) Bounded() bool { return t.Min != nil || t.Max != nil }

// Met reports whether t's value is within its bound (true when it has none).
func (t Target) Met() bool {
	switch {
	case t.Min != nil:
		return t.Value >= *t.Min
	case t.Max != nil:
		return t.Value <= *t.Max
	}
	return true
}

// Bound is t's bound as text (">= 3", "<= 300"), "" when it has none.
func (t Target) Bound() string {
	switch {
	case t.Min != nil:
		return ">= " + trimFloat(*t.Min)
	case t.Max != nil:
		return "<= " + trimFloat(*t.Max)
	}
	return ""
}

// ValueText is t's value with two decimals, or as many more as it takes
// not to round it onto the other side of its bound (0.6663 against >= 0.67).
func (t Target) ValueText() string {
	for d := 2; d <= 6; d++ {
		text := round(t.Value, d)
		v, err := strconv.ParseFloat(text, 64)
		if err == nil && (Target{Value: v, Min: t.Min, Max: t.Max}).Met() == t.Met() {
			return text
		}
	}
	return trimFloat(t.Value)
}

// margin is how far t is from its bound, as a factor: >= 1 when met. A
// Max bound on a figure that can be negative (RSS under the RAM cache)
// compares bound minus value against the bound.
func (t Target) margin() float64 {
	switch {
	case t.Min != nil && *t.Min > 0:
		return t.Value / *t.Min
	case t.Max != nil && *t.Max > 0:
		return 1 + (*t.Max-t.Value) / *t.Max
	}
	return math.NaN()
}

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// ReadCompareSummary decodes a summary.json.
func ReadCompareSummary(r io.Reader) (*CompareSummary, error) {
	var s CompareSummary
	dec := json.NewDecoder(r)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("read comparison summary: %w", err)
	}
	if s.Dataset.Files <= 0 || len(s.ColdS) == 0 {
		return nil, errors.New("read comparison summary: no dataset or no cold epochs: not a compare.sh summary.json")
	}
	return &s, nil
}

// The paths of a comparison, in the order tables and charts show them.
var compareRoles = []string{"dataccel", "s3fs", "rclone", "direct", "local"}

func roleName(role string) string {
	switch role {
	case "direct":
		return "direct GETs"
	case "local":
		return "local disk"
	}
	return role
}

// rangeText is " [min-max]" of a phase's runs of one path, when there
// are several.
func (s *CompareSummary) rangeText(phase, role string, f func(float64) string) string {
	runs := s.RunsS[phase][role]
	if len(runs) < 2 {
		return ""
	}
	return fmt.Sprintf(" [%s-%s]", f(slices.Min(runs)), f(slices.Max(runs)))
}

// round formats v with at most d decimals and no trailing zeros.
func round(v float64, d int) string {
	p := math.Pow(10, float64(d))
	return strconv.FormatFloat(math.Round(v*p)/p, 'f', -1, 64)
}

func sec2(v float64) string { return round(v, 2) }
func sec3(v float64) string { return round(v, 3) }
func msec(v float64) string { return round(v*1000, 0) }

// WriteText writes the summary as compare.sh prints it: the times with
// their ranges, then each target with "met" or "MISSED".
func (s *CompareSummary) WriteText(w io.Writer) error {
	var b strings.Builder
	d := s.Dataset
	files := float64(d.Files)
	// A time the summary lacks prints as "-", never as 0 or a rate of +Inf.
	val := func(m map[string]float64, k string, f func(float64) string) string {
		if v, ok := m[k]; ok {
			return f(v)
		}
		return "-"
	}
	rateOf := func(v float64) string {
		if v <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", files/v)
	}
	rate := func(m map[string]float64, k string) string { return val(m, k, rateOf) }
	fmt.Fprintf(&b, "%s: files %d, %d MB, order %s, %s ms round trip, %d readers, batch %d\n",
		d.Prefix, d.Files, d.Bytes/1e6, d.Order, trimFloat(d.RTTMs), d.Readers, d.Batch)
	if s.Command != "" {
		fmt.Fprintf(&b, "command: %s\n", s.Command)
	}
	fmt.Fprintf(&b, "A, B, C, F: median of %d runs [range]\n\n", d.Repeats)
	b.WriteString("seconds (files/s)      cold                      warm\n")
	for _, k := range compareRoles {
		c, ok := s.ColdS[k]
		if !ok {
			continue
		}
		cold := fmt.Sprintf("%s (%s)%s", sec2(c), rateOf(c), s.rangeText("cold", k, sec2))
		warm := "-"
		if v, ok := s.WarmS[k]; ok {
			warm = fmt.Sprintf("%s (%s)%s", sec2(v), rateOf(v), s.rangeText("warm", k, sec2))
		}
		fmt.Fprintf(&b, "%-14s %-25s %s\n", k, cold, warm)
	}
	if a := s.AnnouncedColdS; len(a) > 0 {
		fmt.Fprintf(&b, "dataccel announced     %s (%s)%s; direct GETs beside it %s%s\n", val(a, "dataccel", sec2), rate(a, "dataccel"),
			s.rangeText("announced_cold", "dataccel", sec2), val(a, "direct", sec2), s.rangeText("announced_cold", "direct", sec2))
	}
	if a := s.AfterWarmS; len(a) > 0 {
		fmt.Fprintf(&b, "after warm             warm %s s%s, then epoch %s (%s)%s; direct GETs beside it %s%s\n",
			val(a, "warm", sec2), s.rangeText("after_warm", "warm", sec2), val(a, "epoch", sec2), rate(a, "epoch"),
			s.rangeText("after_warm", "epoch", sec2), val(a, "direct", sec2), s.rangeText("after_warm", "direct", sec2))
	}
	if a := s.AloneWarmS; len(a) > 0 {
		fmt.Fprintf(&b, "warm, peers unmounted  dataccel %s ms%s, local disk %s ms%s\n", val(a, "dataccel", msec),
			s.rangeText("alone_warm", "dataccel", msec), val(a, "local", msec), s.rangeText("alone_warm", "local", msec))
	}
	if a := s.PythonOpenWarmS; len(a) > 0 {
		fmt.Fprintf(&b, "warm, Python open()   dataccel %s ms%s, local disk %s ms%s\n", val(a, "dataccel", msec),
			s.rangeText("python_open_warm", "dataccel", msec), val(a, "local", msec), s.rangeText("python_open_warm", "local", msec))
	}
	if a := s.List10kS; len(a) > 0 {
		fmt.Fprintf(&b, "list 10k dir           dataccel %s%s  s3fs %s  rclone %s%s\n", val(a, "dataccel", sec3),
			s.rangeText("list_10k", "dataccel", sec3), val(a, "s3fs", sec3), val(a, "rclone", sec3), s.rangeText("list_10k", "rclone", sec3))
	}
	if a := s.WalkS; len(a) > 0 {
		b.WriteString("walk the dataset      ")
		for _, k := range compareRoles {
			if v, ok := a[k]; ok {
				fmt.Fprintf(&b, " %s %s%s", k, sec3(v), s.rangeText("walk", k, sec3))
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "dataccel peak RSS      %.0f MiB, and %.0f MiB in the RAM cache's memory file (RAM cache %.0f MiB)\n", s.PeakRSSMiB, s.RAMFileMiB, s.RAMCacheMiB)
	if f := s.FreshMemory; len(f) > 0 {
		fmt.Fprintf(&b, "host, fresh memory     %s s per GiB at the start, %s before B, %s at the end (mounts pay it for their page cache and RAM cache; direct GETs do not)\n",
			val(f, "start", sec2), val(f, "before_b", sec2), val(f, "end", sec2))
	}
	if s.PageReporting {
		b.WriteString("host, free memory      the VM hands freed memory back to its host within a second (free page reporting): a cold epoch pays a host fault for each page it fills, a mount for its page cache and RAM cache\n")
	}
	if s.DAMONPageout {
		b.WriteString("host, page cache       DAMON pages out page cache it finds idle: the warm re-reads refill its holes (a mount through a request each, the local disk from the disk)\n")
	}
	if m := s.PrefetchModes; len(m) > 0 {
		fmt.Fprintf(&b, "4 readers, cold        prefetch off %s (%s)  dir order %s (%s)  announced %s (%s)\n",
			val(m, "off", sec2), rate(m, "off"), val(m, "dir_order", sec2), rate(m, "dir_order"), val(m, "announced", sec2), rate(m, "announced"))
	}
	if g := s.Loader; g != nil {
		fmt.Fprintf(&b, "training loader        %d workers x batches of %d, %s (%s s of compute an epoch), one run: epoch time, AU after the first step, first batch\n",
			g.Workers, g.Batch, g.Profile, sec2(g.ComputeS))
		epoch := func(e LoaderEpoch) string {
			return fmt.Sprintf("%s s, AU %.0f%%, first %s", sec2(e.WallS), 100*e.AU, fmtSec(e.FirstBatchS))
		}
		for _, p := range loaderPaths {
			if e, ok := g.Epochs[p.key]; ok {
				fmt.Fprintf(&b, "  %-20s cold %-32s warm %s\n", p.name, epoch(e["cold"]), epoch(e["warm"]))
			}
		}
	}
	b.WriteString("\n")
	for _, t := range s.Targets {
		switch {
		case !t.Bounded():
			fmt.Fprintf(&b, "%s: %s\n", t.Name, t.ValueText())
		case t.Met():
			fmt.Fprintf(&b, "%s (%s): %s  met\n", t.Name, t.Bound(), t.ValueText())
		default:
			fmt.Fprintf(&b, "%s (%s): %s  MISSED\n", t.Name, t.Bound(), t.ValueText())
		}
	}
	met, bounded := s.targetsMet()
	fmt.Fprintf(&b, "targets met: %d of %d\n", met, bounded)
	_, err := io.WriteString(w, b.String())
	return err
}

// targetsMet counts the targets with a bound, and those of them met.
func (s *CompareSummary) targetsMet() (met, bounded int) {
	for _, t := range s.Targets {
		if t.Bounded() {
			bounded++
			if t.Met() {
				met++
			}
		}
	}
	return met, bounded
}

// hbar is one row of a horizontal bar chart.
type hbar struct {
	group, label string
	value        float64
	lo, hi       float64 // the range over the runs; 0, 0 when there is none
	color        string
	tip          string
	text         string // beside the bar; "" for the value's label
}

// hbarChart draws labelled horizontal bars, grouped under headings, on a
// log value axis (the times of one comparison span milliseconds to a
// minute), with an optional vertical mark.
func hbarChart(id, title string, rows []hbar, mark float64, label func(float64) string) template.HTML {
	const (
		plotW, rightW     = 440.0, 150
		rowH, groupH, top = 18, 22, 10
		axisH             = 30
	)
	labelW := 120
	for _, r := range rows {
		labelW = max(labelW, 6*len(r.label)+12) // about 6 px a character at 11 px
	}
	w := labelW + int(plotW) + rightW
	h := top + axisH
	groups := 0
	for i, r := range rows {
		if i == 0 || r.group != rows[i-1].group {
			groups++
		}
		h += rowH
	}
	h += groups * groupH
	lo, hi := math.Inf(1), 0.0
	for _, r := range rows {
		for _, v := range []float64{r.value, r.lo, r.hi} {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if mark > 0 { // the mark mid-axis: bars just over it must still show
		lo, hi = min(lo, mark/10), max(hi, mark*10)
	}
	if hi == 0 {
		lo, hi = 0.1, 1
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	x := func(v float64) float64 {
		v = min(max(v, lo), hi)
		return float64(labelW) + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotW
	}
	var ticks []float64
	for t := lo; t <= hi*1.0001; t *= 10 {
		ticks = append(ticks, t)
	}
	var b svgBuf
	b.start(w, h, title)
	b.f(`<g id="%s">`, id)
	axisY := h - axisH + 5
	for _, t := range ticks {
		b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x(t), top, x(t), axisY)
		b.f(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(t), axisY+14, html.EscapeString(label(t)))
	}
	y := top
	for i, r := range rows {
		if i == 0 || r.group != rows[i-1].group {
			b.f(`<text x="4" y="%d" font-weight="bold">%s</text>`, y+15, html.EscapeString(r.group))
			y += groupH
		}
		b.f(`<text x="%d" y="%d" text-anchor="end">%s</text>`, labelW-6, y+rowH-5, html.EscapeString(r.label))
		x0 := float64(labelW)
		b.f(`<rect class="bar" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`,
			x0, y+2, max(x(r.value)-x0, 1), rowH-4, r.color, html.EscapeString(r.tip))
		if r.hi > r.lo {
			cy := y + rowH/2
			b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`, x(r.lo), cy, x(r.hi), cy)
			b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`, x(r.lo), cy-4, x(r.lo), cy+4)
			b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`, x(r.hi), cy-4, x(r.hi), cy+4)
		}
		text := r.text
		if text == "" {
			text = label(r.value)
		}
		b.f(`<text x="%.1f" y="%d">%s</text>`, x(max(r.value, r.hi))+4, y+rowH-5, html.EscapeString(text))
		y += rowH
	}
	if mark > 0 {
		b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555" stroke-dasharray="4 3"/>`, x(mark), top, x(mark), axisY)
	}
	b.f(`</g></svg>`)
	return template.HTML(b.String())
}

// roleColor is a path's colour in every chart; dataccel's own phases
// (warm, epoch) take dataccel's.
func roleColor(role string) string {
	switch role {
	case "s3fs":
		return color(1)
	case "rclone":
		return color(3)
	case "direct":
		return color(2)
	case "local":
		return color(4)
	}
	return color(0)
}

// timeRows are the bars of the times chart: each phase's median per path,
// with its range over the runs.
func (s *CompareSummary) timeRows() []hbar {
	var rows []hbar
	add := func(group, phase string, m map[string]float64, keys []string, names map[string]string) {
		for _, k := range keys {
			v, ok := m[k]
			if !ok || v <= 0 {
				continue
			}
			name := names[k]
			if name == "" {
				name = roleName(k)
			}
			r := hbar{group: group, label: name, value: v, color: roleColor(k)}
			if runs := s.RunsS[phase][k]; len(runs) > 1 {
				r.lo, r.hi = slices.Min(runs), slices.Max(runs)
			}
			r.tip = fmt.Sprintf("%s, %s: %s s (median of %d)", group, name, sec3(v), max(len(s.RunsS[phase][k]), 1))
			rows = append(rows, r)
		}
	}
	add("cold epoch, no announcement", "cold", s.ColdS, compareRoles, nil)
	add("warm re-read, right after", "warm", s.WarmS, compareRoles, nil)
	add("cold epoch, order announced", "announced_cold", s.AnnouncedColdS, []string{"dataccel", "direct"}, map[string]string{"direct": "direct GETs beside it"})
	add("after `dataccel warm`", "after_warm", s.AfterWarmS, []string{"warm", "epoch", "direct"},
		map[string]string{"warm": "dataccel warm", "epoch": "dataccel epoch", "direct": "direct GETs beside it"})
	add("warm re-read, peers unmounted", "alone_warm", s.AloneWarmS, []string{"dataccel", "local"}, nil)
	add("warm re-read, Python open()", "python_open_warm", s.PythonOpenWarmS, []string{"dataccel", "local"}, nil)
	add("listing a 10,000-file directory", "list_10k", s.List10kS, []string{"dataccel", "s3fs", "rclone"}, nil)
	add("walking the dataset", "walk", s.WalkS, compareRoles, nil)
	if g := s.Loader; g != nil {
		for _, which := range []string{"cold", "warm"} {
			group := fmt.Sprintf("training loader, %s epoch (%s s of compute)", which, sec2(g.ComputeS))
			for _, p := range loaderPaths {
				e, ok := g.Epochs[p.key][which]
				if !ok || e.WallS <= 0 {
					continue
				}
				text := fmt.Sprintf("%s, AU %.0f%%", fmtSec(e.WallS), 100*e.AU)
				rows = append(rows, hbar{group: group, label: p.name, value: e.WallS, color: roleColor(strings.TrimSuffix(p.key, "_announced")),
					tip:  fmt.Sprintf("%s, %s: %s s, AU %.1f%%, first batch %s", group, p.name, sec3(e.WallS), 100*e.AU, fmtSec(e.FirstBatchS)),
					text: text})
			}
		}
	}
	return rows
}

// targetRows are the bars of the targets chart: each bounded target's
// value as a factor of its bound (1 = just met).
func (s *CompareSummary) targetRows() []hbar {
	var rows []hbar
	for _, t := range s.Targets {
		if !t.Bounded() {
			continue
		}
		m := t.margin()
		if math.IsNaN(m) {
			continue
		}
		c, verdict := color(2), "met" // green
		if !t.Met() {
			c, verdict = color(1), "missed" // red
		}
		rows = append(rows, hbar{group: "measured / target", label: t.Name, value: max(m, 0.001), color: c,
			tip:  fmt.Sprintf("%s: %s (target %s), %s", t.Name, t.ValueText(), t.Bound(), verdict),
			text: fmt.Sprintf("%s (%s) %s", t.ValueText(), t.Bound(), verdict)})
	}
	return rows
}

// WriteHTML writes the summary as a self-contained page: the targets
// (table and a chart of each against its bound), then every time as bars
// with the range over the runs. No scripts, nothing fetched.
func (s *CompareSummary) WriteHTML(w io.Writer) error {
	var text strings.Builder
	if err := s.WriteText(&text); err != nil {
		return err
	}
	data := struct {
		S             *CompareSummary
		MB            int64
		Met, Bounded  int
		Targets, Time template.HTML
		Text          string
	}{S: s, MB: s.Dataset.Bytes / 1e6, Text: text.String()}
	data.Met, data.Bounded = s.targetsMet()
	data.Targets = hbarChart("targets", "Each target: measured / target (1 = just met)", s.targetRows(), 1,
		func(v float64) string { return trimFloat(v) + "x" })
	data.Time = hbarChart("times", "Seconds per phase (log scale; whiskers: range over the runs)", s.timeRows(), 0, fmtSec)
	if err := compareTmpl.Execute(w, data); err != nil {
		return fmt.Errorf("write html: %w", err)
	}
	return nil
}

var compareTmpl = template.Must(template.New("compare").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dataccel beside s3fs and rclone</title>
<style>
` + pageStyle + `td.met{color:#1a7f1a} td.missed{color:#c00;font-weight:bold}
</style></head><body>
<h1>dataccel beside s3fs and rclone</h1>
<p class="note">{{.S.Dataset.Prefix}}: {{.S.Dataset.Files}} files, {{.MB}} MB, order {{.S.Dataset.Order}},
{{.S.Dataset.RTTMs}} ms round trip, {{.S.Dataset.Readers}} readers, batch {{.S.Dataset.Batch}};
each time is the median of {{.S.Dataset.Repeats}} run(s).{{if .S.Command}} Command: <code>{{.S.Command}}</code>.{{end}}{{with .S.FreshMemory}} A fresh-memory touch of 1 GiB took
{{index . "start"}} s at the start, {{index . "before_b"}} s before phase B and
{{index . "end"}} s at the end: mounts pay it for their page cache and RAM cache, direct GETs do not.{{end}}{{if .S.PageReporting}}
The VM hands freed memory back to its host within a second (free page reporting): a cold epoch pays a host fault for
each page it fills, a mount for its page cache and RAM cache.{{end}}{{if .S.DAMONPageout}}
DAMON on this host pages out page cache it finds idle: the warm re-reads refill its holes, a mount through a request
each, the local disk from the disk.{{end}}</p>
<h2>Targets: {{.Met}} of {{.Bounded}} met</h2>
<table><tr><th>measure</th><th>measured</th><th>target</th><th>met</th></tr>
{{range .S.Targets}}<tr><td>{{.Name}}</td><td>{{.ValueText}}</td><td>{{.Bound}}</td>{{if .Bounded}}{{if .Met}}<td class="met">met</td>{{else}}<td class="missed">missed</td>{{end}}{{else}}<td></td>{{end}}</tr>
{{end}}</table>
{{.Targets}}
<h2>Times</h2>
{{.Time}}
<h2>As printed</h2>
<pre>{{.Text}}</pre>
</body></html>
`))
