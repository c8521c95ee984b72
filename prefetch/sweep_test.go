package prefetch

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
			if tc.wantSwept {
				waitFor(t, "sweep of dir a", func() bool { return fetchedFiles(st, a) == len(a) })
			} else {
				time.Sleep(50 * time.Millisecond)
				if n := fetchedFiles(st, a); n > 2 {
					t.Fatalf("%d files of a fetched though the sweep exceeds SweepBytes", n)
				}
			}
			time.Sleep(20 * time.Millisecond)
			if n := fetchedFiles(st, b); n != 0 {
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

// TestSweepFetchesKindsOpened: a job that reads the labels beside the
// images (a.json beside a.jpg) sweeps the labels only, and the images too
// once it opens one, in every directory swept before, as far as
// SweepBytes allows; a name with no extension is a kind of its own. The
// sweep fetched every image for a scan of the labels (a hundred times the
// bytes read).
func TestSweepFetchesKindsOpened(t *testing.T) {
	const imageSize, labelSize, perDir = 50_000, 300, 20
	for _, tc := range []struct {
		name       string
		sweepBytes int64
		wantImages int
	}{
		{"room for all", 1 << 30, 2 * perDir},
		{"room for one directory's images", 2*perDir*labelSize + perDir*imageSize + imageSize, perDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			var objs, images, labels, bare []store.Object
			for dir, ext := range map[string]string{"a": ".JPG", "b": ".jpg"} {
				for i := range perDir {
					img := st.add(fmt.Sprintf("%s/%03d%s", dir, i, ext), imageSize)
					lbl := st.add(fmt.Sprintf("%s/%03d.json", dir, i), labelSize)
					images, labels = append(images, img), append(labels, lbl)
					objs = append(objs, img, lbl)
				}
				b := st.add(dir+"/README", 100)
				bare = append(bare, b)
				objs = append(objs, b)
			}
			slices.SortFunc(objs, func(a, b store.Object) int { return strings.Compare(a.Key, b.Key) })
			l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: tc.sweepBytes, Workers: 8})
			l.SetSiblings(dirSiblings{objs: objs})
			read := func(key string) {
				t.Helper()
				o := st.objs[key]
				if _, err := readAll(context.Background(), l, o, 4096); err != nil {
					t.Fatal(err)
				}
			}
			for _, key := range []string{"a/003.json", "a/007.json", "b/003.json", "b/007.json"} {
				read(key)
			}
			waitFor(t, "the labels swept", func() bool { return fetchedFiles(st, labels) == len(labels) })
			time.Sleep(50 * time.Millisecond)
			if n, m := fetchedFiles(st, images), fetchedFiles(st, bare); n != 0 || m != 0 {
				t.Fatalf("%d images and %d files with no extension fetched for a scan of the labels, want none", n, m)
			}
			read("a/000.JPG") // .JPG and .jpg are one kind
			waitFor(t, "the images swept once one is opened", func() bool { return fetchedFiles(st, images) >= tc.wantImages })
			time.Sleep(50 * time.Millisecond)
			if n, m := fetchedFiles(st, images), fetchedFiles(st, bare); n != tc.wantImages || m != 0 {
				t.Fatalf("%d images and %d files with no extension fetched, want %d and none", n, m, tc.wantImages)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	for key, want := range map[string]string{
		"train/n01/x_1.JPEG":              ".jpeg",
		"train/n01/x_1.json":              ".json",
		"s/train.tfrecord-00000-of-01024": ".tfrecord--of-", // numbered shards are one kind
		"v/frame.000001":                  ".",
		"v/clip.mp4":                      ".mp",
		"a/b.tar.gz":                      ".tar.gz", // compressed: the extension before counts
		"a/labels.JSON.GZ":                ".json.gz",
		"a/doc.gz":                        ".gz",
		"a/shard-0001.tar.zst":            ".tar.zst",
		"a/README":                        "",
		"a/.hidden":                       ".hidden",
		"a.d/file":                        "", // a dot in a directory's name is no extension
	} {
		if got := kindOf(key); got != want {
			t.Errorf("kindOf(%q) = %q, want %q", key, got, want)
		}
	}
}

// Numbered shards (TFRecord's x.tfrecord-00000-of-00020) are one kind of
// file: each counted as its own kind, the sweep fetched two of twenty.
// Past maxKinds kinds opened, the sweep fetches every kind: names whose
// extension is their own would keep it from fetching anything.
func TestSweepKindsOfNumberedShards(t *testing.T) {
	st := newFakeStore()
	var shards []store.Object
	for i := range 20 {
		shards = append(shards, st.add(fmt.Sprintf("s/train.tfrecord-%05d-of-00020", i), 3000))
	}
	l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
	l.SetSiblings(dirSiblings{objs: shards})
	for _, o := range shards[:2] {
		if _, err := readAll(context.Background(), l, o, 4096); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every shard swept", func() bool { return fetchedFiles(st, shards) == len(shards) })

	sw := l.sweep
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for i := 0; len(sw.kinds) < maxKinds; i++ {
		sw.kindOpenedLocked(fmt.Sprintf(".k%c%c", 'a'+i/26, 'a'+i%26))
	}
	if sw.fetchesLocked(".never-opened") {
		t.Fatal("a kind never opened is fetched with maxKinds kinds known")
	}
	sw.kindOpenedLocked(".one-more")
	if !sw.fetchesLocked(".never-opened") {
		t.Fatal("past maxKinds kinds opened, a kind never opened is still not fetched")
	}
}

// One file opened twice is not two files of its directory: the kernel's
// retry of a failed read, or a job's re-read of one file, comes to a new
// reader, and a single failed read swept a whole directory (14,000 GETs).
func TestSweepCountsDistinctFiles(t *testing.T) {
	st := newFakeStore()
	a := addFiles(st, "a", 60, 1000)
	l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
	l.SetSiblings(dirSiblings{objs: a})
	for range 3 {
		if _, err := readAll(context.Background(), l, a[7], 4096); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := fetchedFiles(st, a); n != 1 {
		t.Fatalf("%d files of a fetched after one file was opened three times, want 1: no sweep", n)
	}
	if _, err := readAll(context.Background(), l, a[8], 4096); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sweep after a second file", func() bool { return fetchedFiles(st, a) == len(a) })
}

// TestSweepLargeDirectoryKeepsPace: a directory larger than sweepBase is
// swept sweepBase files at once and sweepLead more for each file read in
// it, so that a job that reads a few of its files gets a bounded number
// fetched (two files read of a directory of 2,000 fetched all 2,000), and
// a shuffled epoch over it gets nearly all of it from the sweep, though
// the files the sweep fetched are read from the page cache it pushed them
// into, with no open reaching the loader (modelled here by not opening
// them).
func TestSweepLargeDirectoryKeepsPace(t *testing.T) {
	const n = 2000
	st := newFakeStore()
	big := addFiles(st, "big", n, 1000)
	l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
	l.SetSiblings(dirSiblings{objs: big})
	misses := 0
	for i, k := range rand.New(rand.NewPCG(3, 4)).Perm(n) {
		if i == 2 { // a job that reads two files of it
			time.Sleep(50 * time.Millisecond)
			if got := fetchedFiles(st, big); got > sweepBase+2 {
				t.Fatalf("%d of %d files fetched after 2 were read; want at most %d", got, n, sweepBase+2)
			}
		}
		o := big[k]
		// A file the sweep fetched (or has in flight) is read from the
		// page cache; the rest reach the loader.
		if len(st.getsOf(o.Key)) > 0 || i > 2 && k < l.sweep.takenIn("big/") {
			continue
		}
		misses++
		if _, err := readAll(context.Background(), l, o, 4096); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every file fetched", func() bool { return fetchedFiles(st, big) == n })
	for _, o := range big {
		if g := len(st.getsOf(o.Key)); g != 1 {
			t.Fatalf("%s: %d GETs, want 1", o.Key, g)
		}
	}
	t.Logf("%d of %d files read before the sweep took them", misses, n)

	// A subset that reads 16 files of a directory gets a bounded part of
	// it, not all of it.
	val := addFiles(st, "val", n, 1000)
	l.SetSiblings(dirSiblings{objs: slices.Concat(big, val)})
	read := 0
	for _, k := range rand.New(rand.NewPCG(5, 6)).Perm(n) {
		if read == 16 {
			break
		}
		if o := val[k]; len(st.getsOf(o.Key)) == 0 && k >= l.sweep.takenIn("val/") {
			read++
			if _, err := readAll(context.Background(), l, o, 4096); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(50 * time.Millisecond)
	if got := fetchedFiles(st, val); got > n/3 {
		t.Fatalf("%d of %d files fetched after %d were read; want at most %d", got, n, read, n/3)
	}
	// Counted by reads, not by the opens that reach the loader, the sweep
	// leaves 76 files to their reads here; counted by opens, sweepLead
	// files an open, it left 125 at 16 and 250 at 8.
	if misses > n/20 {
		t.Fatalf("%d of %d files read before the sweep took them; want at most %d", misses, n, n/20)
	}
}

// TestSweepLargeDirectoryKinds: a large directory swept step by step
// waits once for a kind not opened yet (its labels), not once a step, and
// when one of that kind is opened, drain fetches each of them the sweep
// had taken once; the rest come with the later steps, every file one GET.
func TestSweepLargeDirectoryKinds(t *testing.T) {
	const perKind = 300
	st := newFakeStore()
	var objs, images []store.Object
	for i := range perKind {
		img := st.add(fmt.Sprintf("mix/%03d.jpg", i), 2000)
		objs = append(objs, img, st.add(fmt.Sprintf("mix/%03d.json", i), 100))
		images = append(images, img)
	}
	l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
	l.SetSiblings(dirSiblings{objs: objs})
	index := map[string]int{}
	for i, o := range objs {
		index[o.Key] = i
	}
	read := func(o store.Object) {
		t.Helper()
		if _, err := readAll(context.Background(), l, o, 4096); err != nil {
			t.Fatal(err)
		}
	}
	perm := rand.New(rand.NewPCG(5, 6)).Perm(perKind)
	next := 0
	readImages := func(until func() bool) {
		for ; next < perKind && !until(); next++ {
			if o := images[perm[next]]; len(st.getsOf(o.Key)) == 0 && index[o.Key] >= l.sweep.takenIn("mix/") {
				read(o)
			}
		}
	}
	readImages(func() bool { return l.sweep.takenIn("mix/") >= 3*sweepBase }) // a few steps
	l.sweep.mu.Lock()
	waiting, taken := l.sweep.nWaiting, l.sweep.dirs["mix/"].taken
	l.sweep.mu.Unlock()
	if taken <= sweepBase+sweepBase/2 || taken == len(objs) {
		t.Fatalf("the sweep took %d of %d files; want a few steps, not all", taken, len(objs))
	}
	if waiting != 1 {
		t.Fatalf("%d directories wait for the labels; want the one, once", waiting)
	}
	read(objs[len(objs)-1]) // the last label
	waitFor(t, "the labels the sweep had taken", func() bool {
		for _, o := range objs[:taken] {
			if len(st.getsOf(o.Key)) == 0 {
				return false
			}
		}
		return true
	})
	readImages(func() bool { return false })
	waitFor(t, "every file fetched", func() bool { return fetchedFiles(st, objs) == len(objs) })
	for _, o := range objs {
		if g := len(st.getsOf(o.Key)); g != 1 {
			t.Fatalf("%s: %d GETs, want 1", o.Key, g)
		}
	}
}

// TestSweepSpreads: once reads have spread over spreadAfter directories of
// one parent (two files opened in each), every other directory of that
// parent is swept too, and no directory of another parent; reads over one
// directory fewer sweep only the directories read.
func TestSweepSpreads(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dirsRead  int
		wantAllOf bool
	}{
		{"spread", spreadAfter, true},
		{"not yet", spreadAfter - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			dirs, all := addClasses(st, "ds/", 12)
			other := addFiles(st, "zz/other", 3, 1000)
			all = append(all, other...)
			l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
			l.SetSiblings(dirSiblings{objs: all})
			for _, objs := range dirs[:tc.dirsRead] {
				for _, o := range objs[:2] {
					if _, err := readAll(context.Background(), l, o, 4096); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, objs := range dirs[:tc.dirsRead] {
				waitFor(t, fmt.Sprintf("sweep of class%02d, read", i), func() bool { return fetchedFiles(st, objs) == len(objs) })
			}
			unread := slices.Concat(dirs[tc.dirsRead:]...)
			if tc.wantAllOf {
				waitFor(t, "sweep of the classes not read", func() bool { return fetchedFiles(st, unread) == len(unread) })
			} else {
				time.Sleep(50 * time.Millisecond)
				if n := fetchedFiles(st, unread); n != 0 {
					t.Fatalf("%d files of directories not read fetched before reads spread", n)
				}
			}
			time.Sleep(20 * time.Millisecond)
			if n := fetchedFiles(st, other); n != 0 {
				t.Fatalf("%d files of another parent's directory fetched", n)
			}
			for _, o := range all[:len(all)-len(other)] {
				if g := len(st.getsOf(o.Key)); g > 1 {
					t.Fatalf("%s: %d GETs, want at most 1", o.Key, g)
				}
			}
		})
	}
}

// TestSweepSpreadsOverDeeperTree: in a tree two levels deep, reads that
// have spread over spreadAfter classes (one subdirectory of each, two
// files opened there) sweep every subdirectory of every class, not only
// the ones read; reads over one class fewer sweep only those read.
func TestSweepSpreadsOverDeeperTree(t *testing.T) {
	for _, tc := range []struct {
		name      string
		classes   int
		wantAllOf bool
	}{
		{"spread", spreadAfter, true},
		{"not yet", spreadAfter - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			var classes [][][]store.Object // by class, by subdirectory
			var all []store.Object
			for c := range 8 {
				subs, objs := addClasses(st, fmt.Sprintf("ds/c%d/", c), 3)
				classes = append(classes, subs)
				all = append(all, objs...)
			}
			l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
			l.SetSiblings(dirSiblings{objs: all})
			for _, subs := range classes[:tc.classes] {
				for _, o := range subs[0][:2] {
					if _, err := readAll(context.Background(), l, o, 4096); err != nil {
						t.Fatal(err)
					}
				}
			}
			var unread []store.Object
			for i, subs := range classes {
				for j, objs := range subs {
					if i < tc.classes && j == 0 {
						waitFor(t, fmt.Sprintf("sweep of c%d/class00, read", i), func() bool { return fetchedFiles(st, objs) == len(objs) })
					} else {
						unread = append(unread, objs...)
					}
				}
			}
			if tc.wantAllOf {
				waitFor(t, "sweep of every directory not read", func() bool { return fetchedFiles(st, unread) == len(unread) })
			} else {
				time.Sleep(50 * time.Millisecond)
				if n := fetchedFiles(st, unread); n != 0 {
					t.Fatalf("%d files of directories not read fetched before reads spread over %d classes", n, spreadAfter)
				}
			}
			for _, o := range all {
				if g := len(st.getsOf(o.Key)); g > 1 {
					t.Fatalf("%s: %d GETs, want at most 1", o.Key, g)
				}
			}
		})
	}
}

// partlyListed is dirSiblings where only the directories in listed have a
// listing yet, as in a mount whose job opens files from a list of paths
// (a directory is listed at its first lookup, or by the mount's walk-ahead).
type partlyListed struct {
	dirSiblings
	mu     sync.Mutex
	listed map[string]bool // guarded by mu
}

func (p *partlyListed) list(dirs ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range dirs {
		p.listed[d] = true
	}
}

func (p *partlyListed) Files(dir string) []store.Object {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.listed[dir] {
		return nil
	}
	return p.dirSiblings.Files(dir)
}

// TestSweepSpreadsToDirectoriesListedLater: a spread over directories that
// have no listing yet leaves them for later instead of marking them swept;
// once listed, a later spread (the first open of a further directory)
// queues them, and that directory is swept at its first open.
func TestSweepSpreadsToDirectoriesListedLater(t *testing.T) {
	st := newFakeStore()
	dirs, all := addClasses(st, "ds/", 12)
	l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
	sib := &partlyListed{dirSiblings: dirSiblings{objs: all}, listed: map[string]bool{}}
	l.SetSiblings(sib)
	class := func(i int) string { return fmt.Sprintf("ds/class%02d/", i) }
	read := func(o store.Object) {
		t.Helper()
		if _, err := readAll(context.Background(), l, o, 4096); err != nil {
			t.Fatal(err)
		}
	}
	for i := range spreadAfter { // reads spread over four directories, listed as they are opened
		sib.list(class(i))
		read(dirs[i][0])
		read(dirs[i][1])
	}
	for i := range spreadAfter {
		waitFor(t, "sweep of "+class(i), func() bool { return fetchedFiles(st, dirs[i]) == len(dirs[i]) })
	}
	time.Sleep(50 * time.Millisecond)
	if n := fetchedFiles(st, slices.Concat(dirs[spreadAfter:]...)); n != 0 {
		t.Fatalf("%d files of directories with no listing fetched", n)
	}

	// Four more get listed (the walk-ahead); one further directory is opened once.
	sib.list(class(4), class(5), class(6), class(7), class(8))
	read(dirs[8][0])
	later := slices.Concat(dirs[4:9]...)
	waitFor(t, "sweep of the directories listed later, and of the one opened once", func() bool {
		return fetchedFiles(st, later) == len(later)
	})
	time.Sleep(50 * time.Millisecond)
	if n := fetchedFiles(st, slices.Concat(dirs[9:]...)); n != 0 {
		t.Fatalf("%d files of directories still not listed fetched", n)
	}
	for _, o := range all {
		if g := len(st.getsOf(o.Key)); g > 1 {
			t.Fatalf("%s: %d GETs, want at most 1", o.Key, g)
		}
	}
}

// TestSweepTopLevelDoesNotSpread: files at the bucket's top level lie in
// no directory of a parent, so reading them does not count as one of the
// spreadAfter directories that make the sweep take every directory at the
// top: with them and one directory fewer read, the others stay unswept.
func TestSweepTopLevelDoesNotSpread(t *testing.T) {
	st := newFakeStore()
	dirs, all := addClasses(st, "", 8)
	var top []store.Object
	for i := range 3 {
		top = append(top, st.add(fmt.Sprintf("top%d.jpg", i), 1000))
	}
	all = append(all, top...)
	slices.SortFunc(all, func(a, b store.Object) int { return strings.Compare(a.Key, b.Key) })
	l := newTestLoader(t, st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
	l.SetSiblings(dirSiblings{objs: all})
	read := append([][]store.Object{top}, dirs[:spreadAfter-1]...)
	for _, objs := range read {
		for _, o := range objs[:2] {
			if _, err := readAll(context.Background(), l, o, 4096); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, objs := range read {
		waitFor(t, fmt.Sprintf("sweep of read group %d", i), func() bool { return fetchedFiles(st, objs) == len(objs) })
	}
	time.Sleep(50 * time.Millisecond)
	if n := fetchedFiles(st, slices.Concat(dirs[spreadAfter-1:]...)); n != 0 {
		t.Fatalf("%d files of directories not read fetched: the top level counted as a directory read", n)
	}
}

// addClasses adds n class directories of three files under parent, and
// returns each directory's files and all of them, in key order.
func addClasses(st *fakeStore, parent string, n int) (dirs [][]store.Object, all []store.Object) {
	for i := range n {
		objs := addFiles(st, fmt.Sprintf("%sclass%02d", parent, i), 3, 1000)
		dirs = append(dirs, objs)
		all = append(all, objs...)
	}
	return dirs, all
}

// fetchedFiles counts the objects of objs that st has served a GET of.
// takenIn is how many files of dir's listing its sweep took.
func (s *sweeper) takenIn(dir string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.dirs[dir]; d != nil {
		return d.taken
	}
	return 0
}

func fetchedFiles(st *fakeStore, objs []store.Object) int {
	n := 0
	for _, o := range objs {
		if len(st.getsOf(o.Key)) > 0 {
			n++
		}
	}
	return n
}

// TestSweepFetchesLargeFileInOneGet: the sweep fetches the blocks of a large
// file with one GET (the whole object), up to a block the cache has, and
// every block lands intact; a run that fails leaves nothing behind that a
// later read would trust.
func TestSweepFetchesLargeFileInOneGet(t *testing.T) {
	const block = 64 << 10
	const size = 5*block + 1234
	st := newFakeStore()
	small := addFiles(st, "a", 4, 1000)
	whole := st.add("a/whole.jpg", size)
	holed := st.add("a/holed.jpg", size)   // block 2 is cached already
	failed := st.add("a/failed.jpg", size) // its GET fails
	objs := append(append([]store.Object(nil), small...), whole, holed, failed)
	slices.SortFunc(objs, func(a, b store.Object) int { return strings.Compare(a.Key, b.Key) })
	tier := indexedTier{newMapTier()}
	st.fail = func(obj store.Object) error {
		if obj.Key == failed.Key {
			return fmt.Errorf("injected: %w", store.ErrChanged)
		}
		return nil
	}
	l := newTestLoader(t, st, tier, Options{CrossFile: true, SweepBytes: 1 << 30, BlockSize: block, Workers: 4})
	tier.Put(l.key(holed, 2), content(st.seeds[holed.Key], 2*block, block))
	l.SetSiblings(dirSiblings{objs: objs})
	for _, o := range small[:2] {
		if _, err := readAll(context.Background(), l, o, 4096); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "sweep", func() bool {
		return len(st.getsOf(whole.Key)) >= 1 && len(st.getsOf(holed.Key)) >= 2 && len(st.getsOf(failed.Key)) >= 1 &&
			tier.Contains(l.key(whole, 5)) && tier.Contains(l.key(holed, 5))
	})
	type rng struct{ off, n int64 }
	ranges := func(k string) []rng {
		var out []rng
		for _, e := range st.getsOf(k) {
			out = append(out, rng{e.off, e.n})
		}
		slices.SortFunc(out, func(a, b rng) int { return int(a.off - b.off) })
		return out
	}
	if got, want := ranges(whole.Key), []rng{{0, size}}; !slices.Equal(got, want) {
		t.Errorf("GETs of %s: %v, want %v", whole.Key, got, want)
	}
	if got, want := ranges(holed.Key), []rng{{0, 2 * block}, {3 * block, size - 3*block}}; !slices.Equal(got, want) {
		t.Errorf("GETs of %s: %v, want %v", holed.Key, got, want)
	}
	for b := int64(0); b < 6; b++ {
		if tier.Contains(l.key(failed, b)) {
			t.Errorf("block %d of the failed file was cached", b)
		}
	}
	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	gets := st.gets.Load()
	for _, o := range []store.Object{whole, holed, failed} {
		got, err := readAll(context.Background(), l, o, 100<<10)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, st.data(o.Key)) {
			t.Fatalf("%s: read bytes differ from the object's", o.Key)
		}
	}
	// The failed file is fetched again; the others come from the cache.
	if g := st.gets.Load() - gets; g < 1 || g > 6 {
		t.Errorf("GETs for the reads after the sweep: %d, want the failed file's only (1 to 6)", g)
	}
	for _, k := range []string{whole.Key, holed.Key} {
		if n := len(st.getsOf(k)); n != len(ranges(k)) {
			t.Errorf("%s fetched again", k)
		}
	}
}

// backloggedTier is a mapTier whose disk writes are behind while busy is set.
type backloggedTier struct {
	*mapTier
	busy atomic.Bool
}

func (t *backloggedTier) Backlogged() bool { return t.busy.Load() }

// TestSweepWaitsForDisk: while the cache tier's disk writes are behind, the
// sweep fetches nothing (its blocks would be dropped from the write queue,
// a GET for nothing); once they catch up, it sweeps the directory.
func TestSweepWaitsForDisk(t *testing.T) {
	st := newFakeStore()
	a := addFiles(st, "a", 40, 1000)
	tier := &backloggedTier{mapTier: newMapTier()}
	tier.busy.Store(true)
	l := newTestLoader(t, st, tier, Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 8})
	l.SetSiblings(dirSiblings{objs: a})
	for _, o := range a[:2] {
		if _, err := readAll(context.Background(), l, o, 4096); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := fetchedFiles(st, a); n != 2 {
		t.Fatalf("%d files fetched while the disk was behind, want the 2 read", n)
	}
	tier.busy.Store(false)
	waitFor(t, "sweep of dir a", func() bool { return fetchedFiles(st, a) == len(a) })
}

// TestCloseWhileOpening: files opened while the loader closes (a job still
// reading as the mount stops) start no sweep workers once Close waits for
// them; before, one could, and the WaitGroup's reuse panicked.
func TestCloseWhileOpening(t *testing.T) {
	st := newFakeStore()
	var objs []store.Object
	for d := range 40 {
		objs = append(objs, addFiles(st, fmt.Sprintf("d%02d", d), 3, 100)...)
	}
	for range 200 {
		l := NewLoader(st, newMapTier(), Options{CrossFile: true, SweepBytes: 1 << 30, Workers: 2, Stats: &Stats{}})
		l.SetSiblings(dirSiblings{objs: objs})
		opened := make(chan struct{})
		go func() {
			defer close(opened)
			for _, o := range objs {
				l.Open(o).Close()
			}
		}()
		l.Close()
		<-opened
	}
}

// BenchmarkKindOf: the sweep asks the kind of every file it queues, and
// directory order of each file it schedules.
func BenchmarkKindOf(b *testing.B) {
	for _, key := range []string{"train/c001/img0000001.jpg", "train/n01440764/n01440764_10026.JPEG", "s/train.tfrecord-00001-of-01024", "l/labels.json.gz"} {
		b.Run(key[strings.LastIndexByte(key, '/')+1:], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				kindOf(key)
			}
		})
	}
}
