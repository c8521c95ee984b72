package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints a result as aligned text tables for a terminal.
func (r *Result) WriteTable(w io.Writer) error {
	c := r.Config
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "protocol: profile %s, %d accelerator(s) x %d workers (s3: %d GETs), batch %d, %d epoch(s), order %s\n",
		c.profile(), c.Accelerators, c.Workers, c.Concurrency, c.Batch, c.Epochs, c.Order)
	p := r.Probe
	fmt.Fprintf(ew, "store limits (%s): rtt %s, bandwidth %s, request rate %s\n\n", p.Source,
		orDash(p.RTTS, fmtSec), orDash(p.BandwidthBps, fmtRate), orDash(p.RequestRate, func(v float64) string { return fmt.Sprintf("%.0f/s", v) }))

	pw := 4
	for _, pr := range r.Paths {
		pw = max(pw, len([]rune(shortName(pr.Path))))
	}
	name := func(s string) string { return fmt.Sprintf("%-*s", pw, shortName(s)) }
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, name("path")+"\tepoch\twall\tsamples/s\tMB/s\tp50\tp90\tp99\tp99.9\tfirst batch\tAU\tio time\tGETs\tfetched/read\t")
	for _, pr := range r.Paths {
		for _, e := range pr.Epochs {
			l := e.Latency
			gets, fetched := "-", "-" // a path that does not tell
			if f := e.Fetched; f != nil {
				gets, fetched = strconv.FormatInt(f.Gets, 10), fmt.Sprintf("%.2f", f.BytesPerRead)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name(pr.Path), e.Epoch, fmtSec(e.WallS),
				e.SamplesPerS, e.MBPerS, fmtSec(l.P50), fmtSec(l.P90), fmtSec(l.P99), fmtSec(l.P999),
				fmtSec(e.TimeToFirstBatchS), fmtAU(e.AU, e.Steps), fmtSec(e.IOTimeS), gets, fetched)
		}
	}
	tw.Flush()

	fmt.Fprintln(ew)
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, name("path")+"\tfiles\tGB\tT_cold\tT_warm\tT_compute\tF_io\tbw bound\tlatency bound\tbinding\tmeasured/bound\t")
	for _, pr := range r.Paths {
		if len(pr.Epochs) == 0 { // the run failed before its first epoch: a 0 s would read as fastest
			fmt.Fprintf(tw, "%s\t%d\t%.2f\tno epoch\t-\t-\t-\t-\t-\t-\t-\t\n", name(pr.Path), pr.Files, float64(pr.Bytes)/1e9)
			continue
		}
		s, b := pr.Summary, pr.Bounds
		binding, ratio := "-", "-"
		if b.Binding != "" {
			binding, ratio = b.Binding, fmt.Sprintf("%.2fx", b.Ratio)
		}
		warm := "none" // one epoch: no warm one to show
		if s.WarmEpochs > 0 {
			warm = fmtSec(s.TWarmS)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\t\n", name(pr.Path), pr.Files, float64(pr.Bytes)/1e9,
			fmtSec(s.TColdS), warm, fmtSec(s.TComputeS), s.IOFactor,
			orDash(b.BandwidthS, fmtSec), orDash(b.LatencyS, fmtSec), binding, ratio)
	}
	tw.Flush()

	if len(r.Ratios) > 0 {
		fmt.Fprintln(ew, "\nepoch time relative to", r.Ratios[0].Baseline+":")
		for _, q := range r.Ratios {
			warm := "no warm epoch"
			if q.WarmRatio > 0 {
				warm = fmt.Sprintf("warm %.2fx", q.WarmRatio)
			}
			fmt.Fprintf(ew, "  %s: cold %.2fx, %s\n", q.Path, q.ColdRatio, warm)
		}
	}
	for _, pr := range r.Paths {
		m := pr.MaxAccelerators
		if m == nil {
			continue
		}
		var trials []string
		for _, t := range m.Trials {
			trials = append(trials, fmt.Sprintf("%d:%.2f", t.Accelerators, t.AU))
		}
		atLeast := ""
		if m.Limit != "" {
			atLeast = "at least " // no count failed: the true maximum is higher
		}
		state := "on the caches they left"
		if m.PageCacheDropped {
			state = "page cache dropped before each"
		}
		found := atLeast + strconv.Itoa(m.Max)
		if len(m.Trials) == 0 {
			found = "none measured"
		}
		fmt.Fprintf(ew, "\nmax accelerators with AU >= %.0f%% on %s: %s (trials accelerators:AU %s; run after %d epochs, %s)",
			m.TargetAU*100, pr.Path, found, strings.Join(trials, " "), m.AfterEpochs, state)
		if m.Limit != "" {
			fmt.Fprintf(ew, "; %s", m.Limit)
		}
		fmt.Fprintln(ew)
	}
	return ew.err
}

// profile names the compute profile with its time per sample: a custom
// --compute-per-sample has no name of its own.
func (c ResultConfig) profile() string {
	name := c.Profile
	if name == "" {
		name = "custom"
	}
	return fmt.Sprintf("%s (%s/sample)", name, fmtSec(c.ComputePerSampleS))
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = fmt.Errorf("write table: %w", err)
	}
	return n, err
}

func fmtAU(au float64, steps int) string {
	if steps < 2 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", au*100)
}

func orDash(v float64, f func(float64) string) string {
	if v <= 0 {
		return "-"
	}
	return f(v)
}

// fmtSec prints seconds with a unit that keeps three significant digits.
func fmtSec(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1e-3:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3gms", s*1e3)
	case s < 120:
		return fmt.Sprintf("%.3gs", s)
	default:
		return fmt.Sprintf("%.1fmin", s/60)
	}
}

func fmtRate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2f GB/s", bps/1e9)
	default:
		return fmt.Sprintf("%.1f MB/s", bps/1e6)
	}
}
