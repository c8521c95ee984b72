package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Progress draws progress bars on w: on a terminal one line redrawn in
// place, otherwise a plain line every few seconds (logs stay readable).
// A nil *Progress draws nothing.
type Progress struct {
	w   io.Writer
	tty bool
	// every is the redraw period.
	every time.Duration
	// cols returns the terminal's width now (0: unknown), asked at each
	// redraw as the terminal may be resized.
	cols func() int
	mu   sync.Mutex // serialises writes to w
}

// defaultCols is the width assumed of a terminal that does not tell.
const defaultCols = 80

// NewProgress returns a Progress writing to w; tty says w is a terminal.
func NewProgress(w io.Writer, tty bool) *Progress {
	every := 5 * time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	return &Progress{w: w, tty: tty, every: every, cols: func() int { return termCols(w) }}
}

// Bar is one running progress bar; a nil *Bar ignores calls.
type Bar struct {
	p           *Progress
	label       string
	total       int64
	n, bytes    atomic.Int64
	start       time.Time
	stop        chan struct{}
	stopped     chan struct{}
	once        sync.Once
	lastPrinted int64
}

// Begin starts a bar for total items.
func (p *Progress) Begin(label string, total int64) *Bar {
	if p == nil || p.w == nil {
		return nil
	}
	b := &Bar{p: p, label: label, total: total, start: time.Now(), stop: make(chan struct{}), stopped: make(chan struct{})}
	go b.loop()
	return b
}

// Add counts n items and their bytes.
func (b *Bar) Add(n, bytes int64) {
	if b == nil {
		return
	}
	b.n.Add(n)
	b.bytes.Add(bytes)
}

// Done stops the bar and prints its final state.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.once.Do(func() {
		close(b.stop)
		<-b.stopped
		b.draw(true)
	})
}

func (b *Bar) loop() {
	defer close(b.stopped)
	t := time.NewTicker(b.p.every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.draw(false)
		}
	}
}

func (b *Bar) draw(final bool) {
	n, total := b.n.Load(), b.total
	el := time.Since(b.start).Seconds()
	mbs := 0.0
	if el > 0 {
		mbs = float64(b.bytes.Load()) / el / 1e6
	}
	frac := 0.0
	if total > 0 {
		frac = min(1, float64(n)/float64(total))
	}
	eta := "-"
	if !final {
		eta = etaString(el, n, total)
	}
	gb := float64(b.bytes.Load()) / 1e9
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	if b.p.tty {
		cols := b.p.cols()
		if cols <= 0 {
			cols = defaultCols
		}
		line := "\r" + ttyLine(cols, b.label, frac, n, total, gb, mbs, el, eta) + "\033[K"
		if final {
			line += "\n"
		}
		io.WriteString(b.p.w, line)
		return
	}
	if !final && n == b.lastPrinted {
		return
	}
	b.lastPrinted = n
	fmt.Fprintf(b.p.w, "%s: %d/%d (%.0f%%) %.2f GB %.1f MB/s %.1fs ETA %s\n", b.label, n, total, frac*100, gb, mbs, el, eta)
}

// etaString is the time left at the rate so far, "-" before the first item
// or after the last. Computed in nanoseconds: whole seconds showed 0.3 s
// left as 0s.
func etaString(el float64, n, total int64) string {
	if n <= 0 || total <= n {
		return "-"
	}
	d := time.Duration(el / float64(n) * float64(total-n) * float64(time.Second))
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// ttyLine lays out the redrawn line within cols columns: a longer line wraps,
// and as \r returns only to the start of its last row, each redraw would
// leave a row behind. The lower-value parts go first: the elapsed time, the
// GB, then the bar's width, the label's end, the bar, the rate and the
// label; a terminal narrower still gets the line cut.
func ttyLine(cols int, label string, frac float64, n, total int64, gb, mbs, el float64, eta string) string {
	type parts struct {
		label             int // most runes of the label shown
		bar               int // the bar's width (0: none)
		rate, gb, elapsed bool
	}
	render := func(p parts) string {
		var b strings.Builder
		if p.label > 0 {
			fmt.Fprintf(&b, "%-12s", cut(label, p.label))
		}
		if p.bar > 0 {
			fill := int(frac * float64(p.bar))
			fmt.Fprintf(&b, " [%s%s]", strings.Repeat("#", fill), strings.Repeat(" ", p.bar-fill))
		}
		fmt.Fprintf(&b, " %3.0f%% %d/%d", frac*100, n, total)
		if p.gb {
			fmt.Fprintf(&b, "  %.2f GB", gb)
		}
		if p.rate {
			fmt.Fprintf(&b, "  %.1f MB/s", mbs)
		}
		if p.elapsed {
			fmt.Fprintf(&b, "  %.1fs", el)
		}
		fmt.Fprintf(&b, "  ETA %s", eta)
		return strings.TrimLeft(b.String(), " ")
	}
	// The last column is left free: a terminal may wrap on writing it.
	room := max(cols-1, 1)
	all := len([]rune(label))
	var line string
	for _, p := range []parts{
		{all, 30, true, true, true},
		{all, 30, true, true, false},
		{all, 30, true, false, false},
		{all, 20, true, false, false},
		{all, 10, true, false, false},
		{16, 10, true, false, false},
		{16, 0, true, false, false},
		{16, 0, false, false, false},
		{8, 0, false, false, false},
		{0, 0, false, false, false},
	} {
		if line = render(p); utf8.RuneCountInString(line) <= room {
			return line
		}
	}
	return cut(line, room)
}

// cut shortens s to at most n runes, its end replaced by "…".
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 1 {
		return string(r[:n])
	}
	return string(r[:n-1]) + "…"
}
