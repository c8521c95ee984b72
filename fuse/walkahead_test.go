package fuse

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// listCounter is a memStore that counts LISTs by prefix and the most in
// flight at once, takes delay for each, and fails those fail says to.
type listCounter struct {
	memStore
	delay time.Duration
	fail  func(prefix string) bool

	mu       sync.Mutex
	lists    map[string]int // guarded by mu
	inflight int            // guarded by mu
	most     int            // guarded by mu
}

func newListCounter(dirs, files int, delay time.Duration) *listCounter {
	objs := map[string][]byte{"other/x/f": []byte("o")}
	for d := range dirs {
		for f := range files {
			objs[fmt.Sprintf("ds/d%02d/f%d", d, f)] = []byte(fmt.Sprintf("%d-%d", d, f))
		}
	}
	return &listCounter{memStore: memStore{objs: objs}, delay: delay, lists: map[string]int{}}
}

func (c *listCounter) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	c.mu.Lock()
	c.lists[prefix]++
	c.inflight++
	c.most = max(c.most, c.inflight)
	c.mu.Unlock()
	defer func() { c.mu.Lock(); c.inflight--; c.mu.Unlock() }()
	time.Sleep(c.delay)
	if c.fail != nil && c.fail(prefix) {
		return errors.New("injected LIST failure")
	}
	return c.memStore.List(ctx, prefix, recursive, fn)
}

func (c *listCounter) counts() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.lists))
	for k, v := range c.lists {
		out[k] = v
	}
	return out, c.most
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// walk lists every directory under root, as find does, and counts files.
func walk(t *testing.T, root string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWalkAhead: a walker's second subdirectory of one directory lists the
// next ones ahead of it, a window of twice the parallelism at first, growing
// as the walk goes on, each directory once; one readdir of a subdirectory
// lists nothing ahead, nor does a walk list other parents' subdirectories;
// with ListAhead 0 the walker lists one directory at a time.
func TestWalkAhead(t *testing.T) {
	const dirs, parallel = 40, 4
	for _, c := range []struct {
		name      string
		listAhead int
	}{{"on", parallel}, {"off", 0}} {
		t.Run(c.name, func(t *testing.T) {
			st := newListCounter(dirs, 2, 10*time.Millisecond)
			m := mountCfg(t, Config{Store: st, ListAhead: c.listAhead})
			w := m.FS.walk
			idle := func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.running == 0 }
			ds := filepath.Join(m.Dir, "ds")
			for _, d := range []string{"d00", "d01"} {
				if _, err := os.ReadDir(filepath.Join(ds, d)); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the workers to stop", idle)
				n, _ := st.counts()
				listed := 0
				for i := 2; i < dirs; i++ {
					listed += n[fmt.Sprintf("ds/d%02d/", i)]
				}
				want := 0
				if d == "d01" && c.listAhead > 0 {
					want = 2 * parallel // the first window: d02 to d09
				}
				if listed != want || want > 0 && n["ds/d09/"] != 1 {
					t.Fatalf("after readdir of %s: %d directories listed ahead (d09: %d), want %d", d, listed, n["ds/d09/"], want)
				}
			}
			if got := walk(t, m.Dir); got != dirs*2+1 {
				t.Errorf("walk found %d files, want %d", got, dirs*2+1)
			}
			n, most := st.counts()
			for d := range dirs {
				if k := fmt.Sprintf("ds/d%02d/", d); n[k] != 1 {
					t.Errorf("%s listed %d times, want once", k, n[k])
				}
			}
			if n["other/"] != 1 || n["other/x/"] != 1 {
				t.Errorf("other/ listed %d times and other/x/ %d: want once each, by the walker", n["other/"], n["other/x/"])
			}
			switch {
			case c.listAhead == 0 && most != 1:
				t.Errorf("off: %d LISTs in flight at once, want 1", most)
			case c.listAhead > 0 && (most < 2 || most > parallel+1):
				t.Errorf("on: %d LISTs in flight at most, want 2..%d (ListAhead and the walker's own)", most, parallel+1)
			}
		})
	}
}

// TestWalkAheadStopsOnFailure: when LISTs fail, the directories queued
// behind them are not tried one after another; the walker's own readdir
// reports the failure.
func TestWalkAheadStopsOnFailure(t *testing.T) {
	const dirs, parallel = 40, 4
	st := newListCounter(dirs, 1, time.Millisecond)
	st.fail = func(prefix string) bool { return prefix >= "ds/d02/" && prefix < "ds/~" }
	m := mountCfg(t, Config{Store: st, ListAhead: parallel})
	ds := filepath.Join(m.Dir, "ds")
	for _, d := range []string{"d00", "d01"} {
		if _, err := os.ReadDir(filepath.Join(ds, d)); err != nil {
			t.Fatal(err)
		}
	}
	w := m.FS.walk
	waitFor(t, "the workers to stop", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.running == 0
	})
	n, _ := st.counts()
	tried := 0
	for d := 2; d < dirs; d++ {
		tried += n[fmt.Sprintf("ds/d%02d/", d)]
	}
	if tried < 1 || tried > parallel {
		t.Errorf("%d failing directories tried ahead, want 1..%d", tried, parallel)
	}
	if _, err := os.ReadDir(filepath.Join(ds, "d30")); err == nil {
		t.Error("readdir of a directory whose LIST fails: no error")
	}
}

// TestWalkAheadOnLookups: a job that opens files from a list of paths
// never lists a directory with readdir, but each directory's first lookup
// lists it: two of one parent list the next ones ahead too, and the
// lookups there need no LIST of their own.
func TestWalkAheadOnLookups(t *testing.T) {
	const dirs, parallel = 30, 4
	st := newListCounter(dirs, 2, 10*time.Millisecond)
	m := mountCfg(t, Config{Store: st, ListAhead: parallel})
	w := m.FS.walk
	for _, d := range []string{"d00", "d01"} {
		if _, err := os.Stat(filepath.Join(m.Dir, "ds", d, "f1")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workers to stop", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.running == 0 })
	n, _ := st.counts()
	for i := 2; i < dirs; i++ {
		if k, want := fmt.Sprintf("ds/d%02d/", i), btoi(i < 2+2*parallel); n[k] != want {
			t.Errorf("%s listed %d times ahead of the lookups, want %d", k, n[k], want)
		}
	}
	for i := range dirs {
		b, err := os.ReadFile(filepath.Join(m.Dir, "ds", fmt.Sprintf("d%02d", i), "f0"))
		if want := fmt.Sprintf("%d-0", i); err != nil || string(b) != want {
			t.Fatalf("d%02d/f0: %q, %v; want %q", i, b, err, want)
		}
	}
	n, _ = st.counts()
	for i := range dirs {
		if k := fmt.Sprintf("ds/d%02d/", i); n[k] != 1 {
			t.Errorf("%s listed %d times, want once", k, n[k])
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestWalkAheadTwoLevels: in a tree two levels deep, the subdirectories of
// a directory the walker enters in a walk are listed at once, before it
// lists any of them; not those of one it entered before the walk was seen,
// nor those of directories only listed ahead.
func TestWalkAheadTwoLevels(t *testing.T) {
	const classes, subs = 10, 3
	objs := map[string][]byte{}
	for c := range classes {
		for s := range subs {
			objs[fmt.Sprintf("ds/c%02d/s%d/f", c, s)] = []byte(fmt.Sprintf("%d/%d", c, s))
		}
	}
	st := &listCounter{memStore: memStore{objs: objs}, delay: 5 * time.Millisecond, lists: map[string]int{}}
	m := mountCfg(t, Config{Store: st, ListAhead: 4})
	w := m.FS.walk
	idle := func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.running == 0 }
	subsListed := func(c int) int {
		n, _ := st.counts()
		total := 0
		for s := range subs {
			total += n[fmt.Sprintf("ds/c%02d/s%d/", c, s)]
		}
		return total
	}
	for _, c := range []string{"c00", "c01"} {
		if _, err := os.ReadDir(filepath.Join(m.Dir, "ds", c)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workers to stop", idle)
	if got := [3]int{subsListed(0), subsListed(1), subsListed(2)}; got != [3]int{0, subs, 0} {
		t.Fatalf("subdirectories of c00, c01, c02 listed %v times; want 0 (entered before the walk), %d (entered in it), 0 (only listed ahead)", got, subs)
	}
	if _, err := os.ReadDir(filepath.Join(m.Dir, "ds", "c02")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the subdirectories of c02 listed ahead", func() bool { return subsListed(2) == subs })
	if got := walk(t, m.Dir); got != classes*subs {
		t.Errorf("walk found %d files, want %d", got, classes*subs)
	}
	n, _ := st.counts()
	for k, v := range n {
		if v != 1 {
			t.Errorf("%s listed %d times, want once", k, v)
		}
	}
}

// TestWalkAheadDeepTree: once the walker has gone down into two
// directories of one parent, the directories listed ahead beside them are
// listed as many levels down as it went (here two), so that it finds
// every directory it enters listed; after one, an ls of the next lists
// nothing below the window (it is as likely as a walk). Each directory is
// listed once.
func TestWalkAheadDeepTree(t *testing.T) {
	const classes, subs, leaves, parallel = 12, 2, 2, 4
	objs := map[string][]byte{}
	for c := range classes {
		for s := range subs {
			for l := range leaves {
				objs[fmt.Sprintf("ds/c%02d/s%d/t%d/f", c, s, l)] = []byte(fmt.Sprintf("%d/%d/%d", c, s, l))
			}
		}
	}
	st := &listCounter{memStore: memStore{objs: objs}, delay: 5 * time.Millisecond, lists: map[string]int{}}
	m := mountCfg(t, Config{Store: st, ListAhead: parallel})
	w := m.FS.walk
	idle := func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.running == 0 }
	below := func(c int) [2]int { // subdirectories of class c listed, and directories below them
		n, _ := st.counts()
		var got [2]int
		for s := range subs {
			got[0] += n[fmt.Sprintf("ds/c%02d/s%d/", c, s)]
			for l := range leaves {
				got[1] += n[fmt.Sprintf("ds/c%02d/s%d/t%d/", c, s, l)]
			}
		}
		return got
	}
	check := func(when string, want func(c int) [2]int) {
		t.Helper()
		waitFor(t, "the workers to stop", idle)
		for c := 1; c < classes; c++ {
			if got := below(c); got != want(c) {
				t.Errorf("%s: c%02d: %d subdirectories and %d below them listed, want %d and %d", when, c, got[0], got[1], want(c)[0], want(c)[1])
			}
		}
	}
	inWindow := func(c int) bool { return c <= 1+2*parallel } // c01, entered, and the first window after it

	if got := walk(t, filepath.Join(m.Dir, "ds", "c00")); got != subs*leaves {
		t.Fatalf("walk of c00 found %d files, want %d", got, subs*leaves)
	}
	if _, err := os.ReadDir(filepath.Join(m.Dir, "ds", "c01")); err != nil {
		t.Fatal(err)
	}
	check("after a walk of c00 and an ls of c01", func(c int) [2]int {
		if c == 1 {
			return [2]int{subs, 0} // entered
		}
		return [2]int{}
	})
	if _, err := os.ReadDir(filepath.Join(m.Dir, "ds", "c01", "s0")); err != nil {
		t.Fatal(err)
	}
	check("after the walker went down into c01 too", func(c int) [2]int {
		switch {
		case c == 1:
			return [2]int{subs, leaves} // entered, and s0 entered
		case inWindow(c):
			return [2]int{subs, subs * leaves}
		}
		return [2]int{}
	})
	if got := walk(t, m.Dir); got != classes*subs*leaves {
		t.Errorf("walk found %d files, want %d", got, classes*subs*leaves)
	}
	n, _ := st.counts()
	for k, v := range n {
		if v != 1 {
			t.Errorf("%s listed %d times, want once", k, v)
		}
	}
}

// BenchmarkWalkAheadListed: what a walker's readdir costs the walk-ahead in
// a directory of 10,000 subdirectories, all listed already (no LIST is
// queued): a lookup in the parent's listing, not a pass over its entries.
func BenchmarkWalkAheadListed(b *testing.B) {
	const n = 10000
	ns := newNamespace(b.Context(), memStore{}, time.Hour, slog.New(slog.DiscardHandler))
	top := store.ManifestDir{Dir: "ds/"}
	listings := []store.ManifestDir{top}
	dirs := make([]string, n)
	for i := range n {
		name := fmt.Sprintf("d%05d", i)
		dirs[i] = "ds/" + name + "/"
		listings[0].Subdirs = append(listings[0].Subdirs, name)
		listings = append(listings, store.ManifestDir{Dir: dirs[i], Files: []store.Object{{Key: dirs[i] + "f", Size: 1, ETag: "e"}}})
	}
	ns.restore("", listings, time.Time{})
	w := newWalkAhead(context.Background(), ns, 32, slog.New(slog.DiscardHandler))
	b.ResetTimer()
	for i := range b.N {
		w.listed(dirs[i%n])
	}
}

// TestWalkAheadPastMaxParents: a mount that has walked more parent
// directories than it tracks still lists ahead in the next one it walks.
func TestWalkAheadPastMaxParents(t *testing.T) {
	const parents, subs, maxParents = 12, 8, 4
	objs := map[string][]byte{}
	top := store.ManifestDir{Dir: "ds/"}
	listings := []store.ManifestDir{top}
	for p := range parents {
		dir := store.ManifestDir{Dir: fmt.Sprintf("ds/p%02d/", p)}
		listings[0].Subdirs = append(listings[0].Subdirs, fmt.Sprintf("p%02d", p))
		for s := range subs {
			dir.Subdirs = append(dir.Subdirs, fmt.Sprintf("d%d", s))
			objs[fmt.Sprintf("ds/p%02d/d%d/f", p, s)] = []byte("x")
		}
		listings = append(listings, dir)
	}
	st := &listCounter{memStore: memStore{objs: objs}, lists: map[string]int{}}
	ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.DiscardHandler))
	ns.restore("", listings, time.Time{}) // the parents are listed; their subdirectories are not
	w := newWalkAhead(t.Context(), ns, 4, slog.New(slog.DiscardHandler))
	w.maxParents = maxParents
	idle := func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.running == 0 }
	for p := range parents {
		// The walker lists the first two subdirectories itself.
		for s := range 2 {
			dir := fmt.Sprintf("ds/p%02d/d%d/", p, s)
			if _, err := ns.list(t.Context(), dir); err != nil {
				t.Fatal(err)
			}
			w.listed(dir)
		}
		waitFor(t, "the workers to stop", idle)
		n, _ := st.counts()
		for s := 2; s < subs; s++ {
			if dir := fmt.Sprintf("ds/p%02d/d%d/", p, s); n[dir] != 1 {
				t.Fatalf("parent %d of %d (tracking at most %d): %s listed ahead %d times, want once", p+1, parents, maxParents, dir, n[dir])
			}
		}
	}
	if w.mu.Lock(); len(w.parents) > maxParents {
		t.Errorf("%d parents tracked, want at most %d", len(w.parents), maxParents)
	}
	w.mu.Unlock()
}

// Walkers listing the same directories at once (the data-loader workers
// of one job): run under -race, it caught advance reading a walked
// directory's depth after letting go of the lock another walker writes it
// under (found by TestWarmThroughMount in CI).
func TestWalkAheadConcurrentWalkers(t *testing.T) {
	const n = 64
	ns := newNamespace(t.Context(), memStore{}, time.Hour, slog.New(slog.DiscardHandler))
	listings := []store.ManifestDir{{Dir: "ds/"}}
	dirs := make([]string, n)
	for i := range n {
		name := fmt.Sprintf("d%03d", i)
		dirs[i] = "ds/" + name + "/"
		listings[0].Subdirs = append(listings[0].Subdirs, name)
		listings = append(listings, store.ManifestDir{Dir: dirs[i], Subdirs: []string{"s"}, Files: []store.Object{{Key: dirs[i] + "f", Size: 1, ETag: "e"}}})
		listings = append(listings, store.ManifestDir{Dir: dirs[i] + "s/", Files: []store.Object{{Key: dirs[i] + "s/f", Size: 1, ETag: "e"}}})
	}
	ns.restore("", listings, time.Time{})
	w := newWalkAhead(t.Context(), ns, 4, slog.New(slog.DiscardHandler))
	var g sync.WaitGroup
	for range 8 {
		g.Go(func() {
			for range 20 {
				for _, d := range dirs {
					w.listed(d)
					w.listed(d + "s/")
				}
			}
		})
	}
	g.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.parents["ds/"]; p == nil || !p.entered && p.listed < walkAfter {
		t.Fatalf("ds/ not walked after every subdirectory was listed: %+v", p)
	}
}
