package bench

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// TestHTMLAUAndProfile: the page shows an epoch's AU as the table does, "-"
// and no bar for an epoch of fewer than 2 steps (AU counts from the end of
// the first), and names the compute profile as the table does, a custom
// --compute-per-sample by its time per sample.
func TestHTMLAUAndProfile(t *testing.T) {
	for _, tc := range []struct {
		name, profile, want string
	}{
		{"custom", "", "UTC; profile custom (1ms/sample),"},
		{"named", "resnet50-a100", "UTC; profile resnet50-a100 (1ms/sample),"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Result{Config: ResultConfig{Profile: tc.profile, ComputePerSampleS: 1e-3, Accelerators: 1, Workers: 1, Batch: 4, Epochs: 3, Order: "shuffle"},
				Paths: []PathResult{{Path: "/data", Kind: "dir", Epochs: []EpochResult{
					{Epoch: 1, Steps: 1, WallS: 1}, {Epoch: 2, Steps: 0, WallS: 1}, {Epoch: 3, Steps: 5, WallS: 1, AU: 0.5}}}}}
			var b bytes.Buffer
			if err := r.WriteHTML(&b); err != nil {
				t.Fatal(err)
			}
			page := b.String()
			if !strings.Contains(page, tc.want) {
				t.Errorf("page lacks %q in its note (the full table says it too)", tc.want)
			}
			root, err := html.Parse(&b)
			if err != nil {
				t.Fatal(err)
			}
			var au []string // the AU cell of each epoch row, in order
			bars := 0       // bars of the AU chart
			for n := range root.Descendants() {
				switch {
				case n.Type != html.ElementNode:
				case n.Data == "tr" && n.LastChild != nil && n.LastChild.Data == "td":
					au = append(au, n.LastChild.FirstChild.Data)
				case n.Data == "g" && len(n.Attr) > 0 && n.Attr[0].Val == "au":
					for c := range n.Descendants() {
						if c.Type == html.ElementNode && c.Data == "rect" {
							bars++
						}
					}
				}
			}
			if want := []string{"-", "-", "50.0%"}; strings.Join(au, " ") != strings.Join(want, " ") {
				t.Errorf("AU cells %q, want %q", au, want)
			}
			if bars != 1 {
				t.Errorf("AU chart: %d bars, want 1 (none for an epoch of fewer than 2 steps)", bars)
			}
		})
	}
}
