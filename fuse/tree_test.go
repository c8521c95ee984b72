package fuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
)

// TestTreeRoots: directories to list are gathered under their nearest
// common ancestors, as high as such ancestors keep sharing one, never
// above the mount's root; a directory that shares none is left alone.
func TestTreeRoots(t *testing.T) {
	for _, tc := range []struct {
		name, root string
		dirs       []string
		want       []string
	}{
		{"one directory", "ds/", []string{"ds/a/"}, nil},
		{"siblings under the root", "ds/", []string{"ds/a/", "ds/b/"}, []string{"ds/"}},
		{"two levels", "", []string{"t/c0/s0/", "t/c0/s1/", "t/c1/s0/", "t/c1/s1/"}, []string{"t/"}},
		{"two trees apart", "", []string{"x/a/", "x/b/", "y/z/c/", "y/z/d/"}, []string{"x/", "y/z/"}},
		{"trees that share the root", "", []string{"x/a/", "x/b/", "y/c/", "y/d/"}, []string{""}},
		{"a directory and one further under it", "", []string{"a/", "a/b/c/"}, nil},
		{"a directory and one right under it", "", []string{"a/", "a/b/"}, []string{"a/"}},
		{"the root itself", "ds/", []string{"ds/", "ds/a/"}, []string{"ds/"}},
		{"alone at each level", "", []string{"a/b/c/"}, nil},
		{"a pair and a stray", "ds/", []string{"ds/x/a/", "ds/x/b/", "ds/y/q/r/"}, []string{"ds/x/"}},
		{"pairs in one branch only", "ds/", []string{"ds/x/a/", "ds/x/b/"}, []string{"ds/x/"}},
		{"a tree under one that climbed higher", "", []string{"a/x/", "a/y/", "a/b/c/d/", "a/b/c/e/"}, []string{"a/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := treeRoots(tc.root, tc.dirs); !slices.Equal(got, tc.want) {
				t.Errorf("treeRoots(%q, %q) = %q, want %q", tc.root, tc.dirs, got, tc.want)
			}
		})
	}
	// Random trees: no tree lies under another (it would be listed twice),
	// and every tree holds two of the directories or more.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var dirs []string
		for range 1 + rng.IntN(8) {
			d := ""
			for range rng.IntN(5) {
				d += string(rune('a'+rng.IntN(3))) + "/"
			}
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		trees := treeRoots("", dirs)
		for _, r := range trees {
			in := 0
			for _, d := range dirs {
				if strings.HasPrefix(d, r) {
					in++
				}
			}
			if in < 2 {
				t.Fatalf("treeRoots(%q) = %q: %q holds %d of them", dirs, trees, r, in)
			}
			for _, s := range trees {
				if r != s && strings.HasPrefix(s, r) {
					t.Fatalf("treeRoots(%q) = %q: %q lies under %q", dirs, trees, s, r)
				}
			}
		}
	}
}

// dump renders a listing as "name/" for directories and "name=key" for files.
func dump(l *listing) string {
	var b strings.Builder
	for _, e := range l.entries {
		if e.dir {
			fmt.Fprintf(&b, "%s/ ", e.name)
		} else {
			fmt.Fprintf(&b, "%s=%s:%d ", e.name, e.obj.Key, e.obj.Size)
		}
	}
	return b.String()
}

// TestListTreeAsDirectoriesList runs on every store: the listings a tree
// listing installs are those each directory's own LIST builds, for every
// directory in the tree (unsafe names, markers and names that are both a
// file and a directory too, where the store can hold them).
func TestListTreeAsDirectoriesList(t *testing.T) {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	tame := []string{"ds/a/1", "ds/a/2", "ds/a/b/3", "ds/a/b/c/4", "ds/d/5", "ds/top", "ds/e/", "ds/e/f/6", "other/7"}
	odd := append(slices.Clone(tame), "ds/a/../x", "ds/a//y", "ds/g/..", "ds/clash", "ds/clash/8", "ds/h/", "ds/bad\x00dir/9",
		"ds/k//z", "ds/m/../z") // k and m: directories whose keys all lie under skipped names
	for _, tc := range []struct {
		name string
		st   func(t *testing.T) store.Store
	}{
		{"memory", func(t *testing.T) store.Store {
			objs := map[string][]byte{}
			for _, k := range odd {
				objs[k] = nil // a directory's marker holds nothing
				if !strings.HasSuffix(k, "/") {
					objs[k] = []byte(k)
				}
			}
			objs["ds/h/"] = []byte("a marker with content")
			return memStore{objs: objs}
		}},
		{"S3", func(t *testing.T) store.Store {
			st := srv.NewBucket(t)
			for _, k := range tame {
				var data []byte // a directory's marker holds nothing
				if !strings.HasSuffix(k, "/") {
					data = []byte(k)
				}
				testenv.Put(t, st, k, data)
			}
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st(t)
			tree := newNamespace(context.Background(), st, time.Hour, discard)
			n, err := tree.listTree(context.Background(), "ds/", func(string) bool { return true })
			if err != nil {
				t.Fatal(err)
			}
			own := newNamespace(context.Background(), st, time.Hour, discard)
			// Every directory reachable from ds/ by its own listings.
			dirs := []string{"ds/"}
			for i := 0; i < len(dirs); i++ {
				dir := dirs[i]
				want, err := own.list(context.Background(), dir)
				if err != nil {
					t.Fatal(err)
				}
				got := tree.held(dir)
				if got == nil {
					t.Errorf("%s: not installed by the tree listing", dir)
					continue
				}
				if dump(got) != dump(want) {
					t.Errorf("%s: tree listing\n  %s\nits own LIST\n  %s", dir, dump(got), dump(want))
				}
				for _, i := range want.dirs {
					dirs = append(dirs, dir+want.entries[i].name+"/")
				}
			}
			if n != len(dirs) {
				t.Errorf("the tree listing installed %d directories, its own LISTs reach %d: %q", n, len(dirs), dirs)
			}
			if tree.held("other/") != nil || tree.held("") != nil {
				t.Error("the tree listing installed a directory outside its root")
			}
		})
	}
}

// TestListTreeStopsWhenSparse: a tree whose keys lie mostly in directories
// nobody asked for is not listed whole: the listing stops once sparseSlack
// keys past what was asked for came (within a first page) and installs
// nothing, and an announced list over it lists its own directories instead.
func TestListTreeStopsWhenSparse(t *testing.T) {
	objs := map[string][]byte{"ds/want/1": nil, "ds/want/2": nil, "ds/also/3": nil}
	for i := range 3 * sparseSlack {
		objs[fmt.Sprintf("ds/other%d/%05d", i%3, i)] = nil
	}
	st := store.NewCounting(memStore{objs: objs})
	var seen atomic.Int64
	counted := countingFn{Store: st, seen: &seen}
	ns := newNamespace(context.Background(), counted, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err := ns.listTree(context.Background(), "ds/", func(dir string) bool { return dir == "ds/want/" })
	if !errors.Is(err, errSparseTree) {
		t.Fatalf("listTree of a sparse tree: %v, want errSparseTree", err)
	}
	if seen.Load() > sparseSlack+3 {
		t.Errorf("the listing went on for %d keys, want it stopped after %d", seen.Load(), sparseSlack+1)
	}
	if ns.held("ds/") != nil || ns.held("ds/want/") != nil {
		t.Error("a stopped tree listing installed listings")
	}

	fsys := newFS(Config{Store: st, Prefix: "ds/", MetadataTTL: time.Hour, OutageGrace: 15 * time.Minute, // the mount's default
		Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(fsys.stop)
	lists := st.C.Lists.Load()
	order, err := fsys.resolve(context.Background(), []byte("want/2\nalso/3\nwant/1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(order); got != "ds/want/2 ds/also/3 ds/want/1" {
		t.Errorf("resolved %s", got)
	}
	if n := st.C.Lists.Load() - lists; n != 3 {
		t.Errorf("%d listings, want 3: the tree's, stopped, and each directory's", n)
	}
}

// TestListTreeWeighsWhatItSkips: keys under names the mount skips (here an
// empty path segment, as a careless join of a prefix and a name makes)
// weigh against the tree like any other key not asked for, or a tree of
// them would be listed to its end.
func TestListTreeWeighsWhatItSkips(t *testing.T) {
	objs := map[string][]byte{"ds/want/1": nil, "ds/want/2": nil}
	for i := range 20 * sparseSlack {
		objs[fmt.Sprintf("ds//junk/%06d", i)] = nil
	}
	var seen atomic.Int64
	ns := newNamespace(context.Background(), countingFn{Store: memStore{objs: objs}, seen: &seen}, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err := ns.listTree(context.Background(), "ds/", func(dir string) bool { return dir == "ds/want/" })
	if !errors.Is(err, errSparseTree) || seen.Load() > sparseSlack+3 {
		t.Errorf("listTree: err %v after %d keys, want errSparseTree after about %d", err, seen.Load(), sparseSlack)
	}
}

// TestResolveWeighsListedDirectories: a directory that the list names but
// that is listed already counts as not asked for in a tree listing, or its
// keys would let the tree list it again and as many keys elsewhere.
func TestResolveWeighsListedDirectories(t *testing.T) {
	objs := map[string][]byte{"ds/a/1": nil, "ds/b/1": nil}
	for i := range 20 * sparseSlack {
		objs[fmt.Sprintf("ds/big/%06d", i)] = nil
	}
	var seen atomic.Int64
	fsys := newFS(Config{Store: countingFn{Store: memStore{objs: objs}, seen: &seen}, Prefix: "ds/", MetadataTTL: time.Hour,
		Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(fsys.stop)
	if _, err := fsys.ns.list(context.Background(), "ds/big/"); err != nil {
		t.Fatal(err)
	}
	seen.Store(0)
	order, err := fsys.resolve(context.Background(), []byte("big/000001\na/1\nb/1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(order); got != "ds/big/000001 ds/a/1 ds/b/1" {
		t.Errorf("resolved %s", got)
	}
	if seen.Load() > sparseSlack+5 {
		t.Errorf("resolving two unlisted directories of one file read %d keys, want at most about %d", seen.Load(), sparseSlack)
	}
}

// TestInstallKeepsTheNewer: a listing whose LIST began earlier never
// replaces one that began later, even when both are installed at once and
// the older one is still being compared with what was held (a tree
// listing and a directory's own LIST overlap).
func TestInstallKeepsTheNewer(t *testing.T) {
	const dir = "ds/"
	b := newDirBuilder()
	for i := range 300000 {
		b.files[fmt.Sprintf("f%07d", i)] = store.Object{Key: fmt.Sprintf("ds/f%07d", i)}
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	t0 := time.Now()
	older := newNamespace(context.Background(), nil, time.Hour, discard).build(b, t0.Add(time.Second))
	for range 5 {
		ns := newNamespace(context.Background(), nil, time.Hour, discard)
		ns.install(dir, &listing{at: t0}) // small, held
		newer := &listing{at: t0.Add(2 * time.Second)}
		done := make(chan struct{})
		go func() { ns.install(dir, older); close(done) }() // compares 300,000 names with the held listing
		time.Sleep(2 * time.Millisecond)
		ns.install(dir, newer)
		<-done
		if ns.held(dir) != newer {
			t.Fatal("the listing begun earlier replaced the one begun later")
		}
	}
}

// TestResolveInAnOutage: when a tree's listing fails as the store fails
// in an outage, the directories under it with no listing to ride it out
// fail the list at once, without a LIST each that would fail again.
func TestResolveInAnOutage(t *testing.T) {
	objs := map[string][]byte{"ds/a/1": nil, "ds/b/1": nil, "ds/c/1": nil}
	st := &prefixFailLister{memStore: memStore{objs: objs}, failing: "ds/"}
	st.fail.Store(true)
	fsys := newFS(Config{Store: st, Prefix: "ds/", MetadataTTL: time.Hour, OutageGrace: 15 * time.Minute,
		Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(fsys.stop)
	if _, err := fsys.resolve(context.Background(), []byte("a/1\nb/1\nc/1\n")); err == nil {
		t.Fatal("resolved a list while the store fails LISTs")
	}
	lists := 0
	st.lists.Range(func(prefix, n any) bool {
		lists += int(n.(*atomic.Int64).Load())
		return true
	})
	if lists != 1 {
		t.Errorf("%d LISTs, want 1: the tree's", lists)
	}
	if !fsys.ns.failing() {
		t.Error("the failed tree listing did not mark the outage")
	}
}

// TestResolveInAnOutageStopsTheOthers: a tree that fails in an outage
// fails the list without waiting for the LISTs of directories outside any
// tree, which would fail too, each after its retries.
func TestResolveInAnOutageStopsTheOthers(t *testing.T) {
	objs := map[string][]byte{"x/a/1": nil, "x/b/1": nil, "y/z/q/1": nil}
	st := &outageLister{memStore: memStore{objs: objs}, failing: "x/", hanging: "y/z/q/"}
	fsys := newFS(Config{Store: st, MetadataTTL: time.Hour, OutageGrace: 15 * time.Minute,
		Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(fsys.stop)
	done := make(chan error, 1)
	go func() {
		_, err := fsys.resolve(context.Background(), []byte("x/a/1\ny/z/q/1\nx/b/1\n"))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("resolved a list while the store fails LISTs")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the list waits for a LIST outside the failed tree")
	}
}

// outageLister is a memStore whose LISTs of one prefix fail as in an
// outage and whose LISTs of another hang until their context ends.
type outageLister struct {
	memStore
	failing, hanging string
}

func (s *outageLister) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	switch prefix {
	case s.failing:
		return errors.New("injected 503")
	case s.hanging:
		<-ctx.Done()
		return ctx.Err()
	}
	return s.memStore.List(ctx, prefix, recursive, fn)
}

// TestResolveListsDenseSubtrees: a list that names whole subtrees, but
// fewer files than their common parent holds, lists those subtrees whole
// once the parent's tree stops as too sparse, not each directory on its own.
func TestResolveListsDenseSubtrees(t *testing.T) {
	objs := map[string][]byte{}
	var list strings.Builder
	for a := range 10 {
		for d := range 10 {
			for f := range 15 {
				key := fmt.Sprintf("m/a%d/d%d/f%02d", a, d, f)
				objs[key] = nil
				if a >= 1 && a <= 3 {
					fmt.Fprintf(&list, "%s\n", strings.TrimPrefix(key, "m/"))
				}
			}
		}
	}
	st := &splitCounting{Store: memStore{objs: objs}}
	fsys := newFS(Config{Store: st, Prefix: "m/", MetadataTTL: time.Hour, Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(fsys.stop)
	order, err := fsys.resolve(context.Background(), []byte(list.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 450 {
		t.Fatalf("resolved %d files, want 450", len(order))
	}
	if trees, dirs := st.trees.Load(), st.dirs.Load(); trees != 4 || dirs != 0 {
		t.Errorf("%d tree listings and %d directory LISTs, want 4 (m/, stopped, then a1/, a2/, a3/) and 0", trees, dirs)
	}
}

// TestResolveListsLargeDirectoriesAlone: directories the list names many
// files of are listed on their own, as many at a time, not as one tree
// whose pages come a few at a time.
func TestResolveListsLargeDirectoriesAlone(t *testing.T) {
	objs := map[string][]byte{}
	var list strings.Builder
	for d := range 3 {
		for f := range treeDirLines + 1 {
			key := fmt.Sprintf("big/d%d/f%04d", d, f)
			objs[key] = nil
			fmt.Fprintf(&list, "%s\n", key)
		}
	}
	st := &splitCounting{Store: memStore{objs: objs}}
	fsys := newFS(Config{Store: st, MetadataTTL: time.Hour, Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(fsys.stop)
	if _, err := fsys.resolve(context.Background(), []byte(list.String())); err != nil {
		t.Fatal(err)
	}
	if trees, dirs := st.trees.Load(), st.dirs.Load(); trees != 0 || dirs != 3 {
		t.Errorf("%d tree listings and %d directory LISTs, want 0 and 3", trees, dirs)
	}
}

// TestResolveKeepsTreesOffLargeDirectories: small directories that share a
// parent with large ones are not listed as that parent's tree (it would
// list the large ones too, a few pages at a time): the large ones are
// listed on their own, and the small ones by the trees below the parent.
func TestResolveKeepsTreesOffLargeDirectories(t *testing.T) {
	objs := map[string][]byte{}
	var list strings.Builder
	add := func(key string) {
		objs[key] = nil
		fmt.Fprintf(&list, "%s\n", key)
	}
	for d := range 2 {
		for f := range treeDirLines + 1 {
			add(fmt.Sprintf("p/big%d/f%04d", d, f))
		}
	}
	for s := range 3 {
		for f := range 5 {
			add(fmt.Sprintf("p/s%d/f%d", s, f))
		}
	}
	for s := range 2 {
		for f := range 5 {
			add(fmt.Sprintf("p/t/u%d/f%d", s, f))
		}
	}
	st := &splitCounting{Store: memStore{objs: objs}}
	fsys := newFS(Config{Store: st, MetadataTTL: time.Hour, Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(fsys.stop)
	order, err := fsys.resolve(context.Background(), []byte(list.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 2*(treeDirLines+1)+25 {
		t.Fatalf("resolved %d files", len(order))
	}
	if trees, dirs := st.trees.Load(), st.dirs.Load(); trees != 1 || dirs != 5 {
		t.Errorf("%d tree listings and %d directory LISTs, want 1 (p/t/) and 5 (the large ones and p/s0-2/)", trees, dirs)
	}
}

// splitCounting counts recursive listings and one-level ones apart.
type splitCounting struct {
	store.Store
	trees, dirs atomic.Int64
}

func (s *splitCounting) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	if recursive {
		s.trees.Add(1)
	} else {
		s.dirs.Add(1)
	}
	return s.Store.List(ctx, prefix, recursive, fn)
}

// countingFn counts the entries a listing hands to its caller.
type countingFn struct {
	store.Store
	seen *atomic.Int64
}

func (c countingFn) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	return c.Store.List(ctx, prefix, recursive, func(o store.Object) error {
		c.seen.Add(1)
		return fn(o)
	})
}

// TestAnnounceListsTrees: an announced list over a tree of directories
// that nobody listed yet lists the tree with one recursive LIST, not one a
// directory, and resolves as before (TestListTreeStopsWhenSparse has a
// list that names a few directories of a larger tree).
func TestAnnounceListsTrees(t *testing.T) {
	st := srv.NewBucket(t)
	var list strings.Builder
	var want []string
	for c := range 4 {
		for s := range 3 {
			for i := range 2 {
				key := fmt.Sprintf("ds/c%d/s%d/f%d", c, s, i)
				testenv.Put(t, st, key, []byte(key))
				fmt.Fprintf(&list, "c%d/s%d/f%d\n", (c+s)%4, s, i)
				want = append(want, fmt.Sprintf("ds/c%d/s%d/f%d", (c+s)%4, s, i))
			}
		}
	}
	counting := store.NewCounting(st)
	fsys := newFS(Config{Store: counting, Prefix: "ds/", MetadataTTL: time.Hour, Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(fsys.stop)
	order, err := fsys.resolve(context.Background(), []byte(list.String()))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(order))
	for i, o := range order {
		got[i] = o.Key
		if o.Size != int64(len(o.Key)) || o.ETag == "" {
			t.Errorf("%s: resolved without its metadata: %+v", o.Key, o)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("resolved %q, want %q", got, want)
	}
	if n := counting.C.Lists.Load(); n != 1 {
		t.Errorf("%d listings for 12 directories in one tree, want 1", n)
	}
	// Listed now: the files' lookups need no LIST.
	if _, err := fsys.resolve(context.Background(), []byte("c3/s2/f1\nc0/s0/f0\n")); err != nil {
		t.Fatal(err)
	}
	if n := counting.C.Lists.Load(); n != 1 {
		t.Errorf("%d listings after a second list of listed directories, want still 1", n)
	}
}
