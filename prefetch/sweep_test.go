package prefetch

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// TestSweep: once two files of a directory are opened (in a shuffled
// order nobody announced), the rest of that directory is fetched into the
// cache, each file once; an untouched directory is not; a sweep that would
// exceed SweepBytes does not start.
func TestSweep(t *testing.T) {
	tests := []struct {
		name       string
		sweepBytes int64
		wantSwept  bool
	}{
		{"fits", 1 << 30, true},
		{"too big for the cache", 10 << 10, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			a := addFiles(st, "a", 60, 1000)
			b := addFiles(st, "b", 60, 1000)
			tier := newMapTier()
			l := newTestLoader(t, st, tier, Options{CrossFile: true, SweepBytes: tc.sweepBytes, Workers: 8})
			l.SetSiblings(dirSiblings{objs: append(append([]store.Object(nil), a...), b...)})
			r := rand.New(rand.NewPCG(1, 2))
			perm := r.Perm(len(a))
			for _, i := range perm[:2] {
				if _, err := readAll(context.Background(), l, a[perm[i]], 4096); err != nil {
					t.Fatal(err)
				}
			}
			fetched := func(objs []store.Object) int {
				n := 0
				for _, o := range objs {
					if len(st.getsOf(o.Key)) > 0 {
						n++
					}
				}
				return n
			}
			if tc.wantSwept {
				waitFor(t, "sweep of dir a", func() bool { return fetched(a) == len(a) })
			} else {
				time.Sleep(50 * time.Millisecond)
				if n := fetched(a); n > 2 {
					t.Fatalf("%d files of a fetched though the sweep exceeds SweepBytes", n)
				}
			}
			time.Sleep(20 * time.Millisecond)
			if n := fetched(b); n != 0 {
				t.Fatalf("%d files of the untouched directory fetched", n)
			}
			// Every file of a read after the sweep costs no GET.
			for _, o := range a {
				if _, err := readAll(context.Background(), l, o, 4096); err != nil {
					t.Fatal(err)
				}
				if g := len(st.getsOf(o.Key)); g != 1 {
					t.Fatalf("%s: %d GETs, want 1", o.Key, g)
				}
			}
		})
	}
}
