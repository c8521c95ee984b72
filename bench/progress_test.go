package bench

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestProgressETA: the time left keeps its fraction of a second (0.3 s left
// read "ETA 0s" when cut to whole seconds first) and is rounded for display.
func TestProgressETA(t *testing.T) {
	for _, tc := range []struct {
		el       float64
		n, total int64
		want     string
	}{
		{0.3, 1, 2, "300ms"},
		{2.44, 1, 2, "2.4s"},
		{12.7, 1, 2, "13s"},
		{90, 1, 2, "1m30s"},
		{5, 0, 10, "-"},  // nothing done: no rate yet
		{5, 10, 10, "-"}, // all done
	} {
		if got := etaString(tc.el, tc.n, tc.total); got != tc.want {
			t.Errorf("etaString(%v, %d, %d) = %q, want %q", tc.el, tc.n, tc.total, got, tc.want)
		}
	}
}

// TestProgressLineFits: the redrawn line keeps within the terminal's width
// (a wrapped line leaves a row behind at every redraw), dropping the
// lower-value parts first: the count and the ETA stay down to 40 columns,
// the rate down to 80, and a wide terminal gets every part.
func TestProgressLineFits(t *testing.T) {
	long := "epoch 1/3 " + shortName("/mnt/dataccel/imagenet-1k/train/shards")
	for _, tc := range []struct {
		cols  int
		label string
		want  []string // parts the line must show
	}{
		{200, long, []string{long + " [##############                ]  50% 640000/1281167  70.12 GB  ", " MB/s  ", "s  ETA "}},
		{100, long, []string{" 640000/1281167  ", " MB/s  ETA "}},
		{80, long, []string{" 640000/1281167  ", " MB/s  ETA "}},
		{80, "gen", []string{"gen ", " 640000/1281167  ", " MB/s  ETA "}},
		{60, long, []string{" 640000/1281167  ", "  ETA "}},
		{40, long, []string{" 640000/1281167  ETA "}},
		{20, long, nil},
		{0, long, []string{" 640000/1281167  ", " MB/s  ETA "}}, // width unknown: 80
	} {
		t.Run(fmt.Sprintf("%d %s", tc.cols, tc.label), func(t *testing.T) {
			var out bytes.Buffer
			p := NewProgress(&out, true)
			p.cols = func() int { return tc.cols }
			// A Bar without its loop (Begin's would redraw every 200 ms).
			b := &Bar{p: p, label: tc.label, total: 1281167, start: time.Now().Add(-time.Hour)}
			b.n.Store(640000)
			b.bytes.Store(70_120_000_000)
			b.draw(false)
			line, ok := strings.CutPrefix(out.String(), "\r")
			line, ok2 := strings.CutSuffix(line, "\033[K")
			if !ok || !ok2 {
				t.Fatalf("drew %q: want \\r, the line, and erase to its end", out.String())
			}
			room := tc.cols - 1
			if tc.cols == 0 {
				room = defaultCols - 1
			}
			if n := utf8.RuneCountInString(line); n > room {
				t.Errorf("%d columns: line of %d: %q", tc.cols, n, line)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%d columns: %q lacks %q", tc.cols, line, w)
				}
			}
		})
	}
}
