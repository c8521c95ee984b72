package bench

import (
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strings"
)

// WriteHTML writes a self-contained report: tables and inline SVG charts
// (epoch time per path, per-file latency CDF, AU per epoch), no scripts
// and nothing fetched from the network.
func (r *Result) WriteHTML(w io.Writer) error {
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		return err
	}
	data := struct {
		R                      *Result
		Table                  string
		EpochChart, CDF, AUCht template.HTML
	}{r, table.String(), epochChart(r), cdfChart(r), auChart(r)}
	if err := reportTmpl.Execute(w, data); err != nil {
		return fmt.Errorf("write html: %w", err)
	}
	return nil
}

// pageStyle is the style sheet of every page this package writes.
const pageStyle = `body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:2em}
table{border-collapse:collapse;font-size:.9em} td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
pre{background:#f7f7f7;padding:1em;overflow-x:auto;font-size:.8em}
svg{display:block;margin:1em 0} .note{color:#555;font-size:.9em}
`

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"sec":     fmtSec,
	"au":      fmtAU,
	"profile": ResultConfig.profile,
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dataccel bench report</title>
<style>
` + pageStyle + `</style></head><body>
<h1>dataccel bench report</h1>
<p class="note">Started {{.R.Started.Format "2006-01-02 15:04:05 UTC"}}; profile {{profile .R.Config}},
{{.R.Config.Accelerators}} accelerator(s), {{.R.Config.Workers}} workers each, batch {{.R.Config.Batch}}, {{.R.Config.Epochs}} epoch(s), order {{.R.Config.Order}}.
AU = compute time / wall time from the end of the first step. Bounds: bytes / bandwidth and files x RTT / readers ({{.R.Probe.Source}}).</p>
<h2>Epochs</h2>
<table><tr><th>path</th><th>epoch</th><th>wall</th><th>samples/s</th><th>MB/s</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>first batch</th><th>AU</th></tr>
{{range .R.Paths}}{{$p := .Path}}{{range .Epochs}}<tr><td>{{$p}}</td><td>{{.Epoch}}</td><td>{{sec .WallS}}</td><td>{{printf "%.0f" .SamplesPerS}}</td><td>{{printf "%.1f" .MBPerS}}</td>
<td>{{sec .Latency.P50}}</td><td>{{sec .Latency.P90}}</td><td>{{sec .Latency.P99}}</td><td>{{sec .Latency.P999}}</td><td>{{sec .TimeToFirstBatchS}}</td><td>{{au .AU .Steps}}</td></tr>
{{end}}{{end}}</table>
<h2>Epoch time per path</h2>
{{.EpochChart}}
<h2>Per-file latency CDF</h2>
<p class="note">Solid: cold epoch; dashed: warm epochs. Log time axis.</p>
{{.CDF}}
<h2>Accelerator utilisation per epoch</h2>
<p class="note">Dashed line: 90%, the MLPerf Storage pass mark.</p>
{{.AUCht}}
<h2>Full table</h2>
<pre>{{.Table}}</pre>
</body></html>
`))

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

func color(i int) string { return palette[i%len(palette)] }

const (
	chartW, chartH = 720, 300
	padL, padR     = 70, 190
	padT, padB     = 20, 40
)

type svgBuf struct{ strings.Builder }

func (b *svgBuf) f(format string, args ...any) { fmt.Fprintf(&b.Builder, format, args...) }

// start opens an SVG element of w x h pixels with its title.
func (b *svgBuf) start(w, h int, title string) {
	b.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s" font-family="sans-serif" font-size="11">`,
		w, h, w, h, html.EscapeString(title))
	b.f(`<title>%s</title>`, html.EscapeString(title))
}

// open starts a chart of the standard size, framed.
func (b *svgBuf) open(title string) {
	b.start(chartW, chartH, title)
	b.f(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`, padL, padT, chartW-padL-padR, chartH-padT-padB)
}

func (b *svgBuf) legend(names []string, dashed bool) {
	for i, n := range names {
		y := padT + 10 + i*18
		b.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`, chartW-padR+10, y, chartW-padR+30, y, color(i))
		b.f(`<text x="%d" y="%d">%s</text>`, chartW-padR+35, y+4, html.EscapeString(shortName(n)))
	}
	if dashed {
		y := padT + 10 + len(names)*18
		b.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" stroke-dasharray="4 3" stroke-width="2"/>`, chartW-padR+10, y, chartW-padR+30, y)
		b.f(`<text x="%d" y="%d">warm</text>`, chartW-padR+35, y+4)
	}
}

// yAxis draws ticks for [0, top] and returns the y pixel of a value.
func (b *svgBuf) yAxis(top float64, label func(float64) string) func(float64) float64 {
	h := float64(chartH - padT - padB)
	y := func(v float64) float64 { return float64(chartH-padB) - v/top*h }
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		b.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`, padL, y(v), chartW-padR, y(v))
		b.f(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-5, y(v)+4, html.EscapeString(label(v)))
	}
	return y
}

func niceTop(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func pathNames(r *Result) []string {
	var n []string
	for _, p := range r.Paths {
		n = append(n, p.Path)
	}
	return n
}

// barChart draws grouped bars: one group per epoch, one bar per path; a
// NaN value (nothing measured) draws none, where a 0 would read as one.
func barChart(r *Result, id, title string, value func(EpochResult) float64, top float64, label func(float64) string, mark float64) template.HTML {
	var b svgBuf
	b.open(title)
	b.f(`<g id="%s">`, id)
	y := b.yAxis(top, label)
	epochs := 0
	for _, p := range r.Paths {
		epochs = max(epochs, len(p.Epochs))
	}
	plotW := float64(chartW - padL - padR)
	groupW := plotW / float64(max(epochs, 1))
	barW := groupW * 0.8 / float64(max(len(r.Paths), 1))
	for e := range epochs {
		gx := float64(padL) + groupW*float64(e) + groupW*0.1
		for i, p := range r.Paths {
			if e >= len(p.Epochs) {
				continue
			}
			v := min(value(p.Epochs[e]), top)
			if math.IsNaN(v) {
				continue
			}
			b.f(`<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s epoch %d: %s</title></rect>`,
				gx+barW*float64(i), y(v), barW*0.95, y(0)-y(v), color(i), html.EscapeString(p.Path), e+1, html.EscapeString(label(v)))
		}
		b.f(`<text x="%.1f" y="%d" text-anchor="middle">epoch %d</text>`, gx+groupW*0.4, chartH-padB+15, e+1)
	}
	if mark > 0 {
		b.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/>`, padL, y(mark), chartW-padR, y(mark))
	}
	b.legend(pathNames(r), false)
	b.f(`</g></svg>`)
	return template.HTML(b.String())
}

func epochChart(r *Result) template.HTML {
	top := 0.0
	for _, p := range r.Paths {
		for _, e := range p.Epochs {
			top = max(top, e.WallS)
		}
	}
	return barChart(r, "epoch-time", "Epoch wall time per path", func(e EpochResult) float64 { return e.WallS }, niceTop(top), fmtSec, 0)
}

func auChart(r *Result) template.HTML {
	// AU counts from the end of the first step: an epoch of fewer than 2
	// has none, which the table shows as "-" (fmtAU).
	au := func(e EpochResult) float64 {
		if e.Steps < 2 {
			return math.NaN()
		}
		return e.AU
	}
	return barChart(r, "au", "Accelerator utilisation per epoch", au, 1,
		func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) }, 0.9)
}

// cdfChart plots each path's per-file latency CDF on a log time axis.
func cdfChart(r *Result) template.HTML {
	var b svgBuf
	b.open("Per-file latency CDF")
	b.f(`<g id="latency-cdf">`)
	lo, hi := math.Inf(1), 0.0
	for _, p := range r.Paths {
		for _, pts := range [][][2]float64{p.LatencyCDF.Cold, p.LatencyCDF.Warm} {
			for _, pt := range pts {
				if pt[0] > 0 {
					lo, hi = min(lo, pt[0]), max(hi, pt[0])
				}
			}
		}
	}
	if hi == 0 {
		lo, hi = 1e-4, 1
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	plotW := float64(chartW - padL - padR)
	x := func(v float64) float64 {
		v = max(v, lo)
		return float64(padL) + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotW
	}
	y := b.yAxis(1, func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) })
	for d := lo; d <= hi*1.0001; d *= 10 {
		b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x(d), padT, x(d), chartH-padB)
		b.f(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(d), chartH-padB+15, fmtSec(d))
	}
	for i, p := range r.Paths {
		for j, pts := range [][][2]float64{p.LatencyCDF.Cold, p.LatencyCDF.Warm} {
			if len(pts) == 0 {
				continue
			}
			var path strings.Builder
			for k, pt := range pts {
				cmd := "L"
				if k == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x(pt[0]), y(pt[1]))
			}
			dash := ""
			if j == 1 {
				dash = ` stroke-dasharray="5 3"`
			}
			b.f(`<path class="cdf" d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`, strings.TrimSpace(path.String()), color(i), dash)
		}
	}
	b.legend(pathNames(r), true)
	b.f(`</g></svg>`)
	return template.HTML(b.String())
}
