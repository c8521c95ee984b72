package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress draws progress bars on w: on a terminal one line redrawn in
// place, otherwise a plain line every few seconds (logs stay readable).
// A nil *Progress draws nothing.
type Progress struct {
	w   io.Writer
	tty bool
	// every is the redraw period.
	every time.Duration
	mu    sync.Mutex // serialises writes to w
}

// NewProgress returns a Progress writing to w; tty says w is a terminal.
func NewProgress(w io.Writer, tty bool) *Progress {
	every := 5 * time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	return &Progress{w: w, tty: tty, every: every}
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
	if n > 0 && total > n && !final {
		eta = (time.Duration(el/float64(n)*float64(total-n)) * time.Second).Round(time.Second).String()
	}
	gb := float64(b.bytes.Load()) / 1e9
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	if b.p.tty {
		const width = 30
		fill := int(frac * width)
		line := fmt.Sprintf("\r%-12s [%s%s] %3.0f%% %d/%d  %.2f GB  %.1f MB/s  %.1fs  ETA %s\033[K",
			b.label, strings.Repeat("#", fill), strings.Repeat(" ", width-fill), frac*100, n, total, gb, mbs, el, eta)
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
