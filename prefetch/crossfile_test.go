package prefetch

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// walk opens and reads objs in order, noting the sequence number of each
// open, and pauses between files like a training step.
func walk(t *testing.T, l *Loader, st *fakeStore, objs []store.Object, pause time.Duration) []int64 {
	t.Helper()
	opened := make([]int64, len(objs))
	for i, obj := range objs {
		opened[i] = st.seq.Add(1)
		got, err := readAll(context.Background(), l, obj, 64<<10)
		if err != nil {
			t.Fatalf("read %s: %v", obj.Key, err)
		}
		if !bytes.Equal(got, st.data(obj.Key)) {
			t.Fatalf("read %s: wrong bytes", obj.Key)
		}
		time.Sleep(pause)
	}
	return opened
}

// lateFiles checks that each file of order was fetched exactly once and
// counts, among those counted, the files whose GET came after their open.
func lateFiles(t *testing.T, st *fakeStore, order []store.Object, opened []int64, counted func(i int) bool) int {
	t.Helper()
	late := 0
	for i, obj := range order {
		gets := st.getsOf(obj.Key)
		if len(gets) != 1 {
			t.Errorf("%s: %d GETs, want exactly 1", obj.Key, len(gets))
			continue
		}
		if counted(i) && gets[0].seq > opened[i] {
			late++
		}
	}
	return late
}

func addFiles(st *fakeStore, dir string, n int, size int64) []store.Object {
	objs := make([]store.Object, n)
	for i := range objs {
		objs[i] = st.add(fmt.Sprintf("%s/%05d.jpg", dir, i), size)
	}
	return objs
}

// Directory order fetches ahead only the kinds of file the job opened: a
// walk over the labels of a directory (LABEL000..., no extension) whose
// images follow them in listing order fetched images past the last label.
func TestDirectoryOrderLeavesKindsNotOpened(t *testing.T) {
	st := newFakeStore()
	var labels, images []store.Object
	for i := range 20 {
		labels = append(labels, st.add(fmt.Sprintf("d/LABEL%03d", i), 300))
	}
	for i := range 20 {
		images = append(images, st.add(fmt.Sprintf("d/img%03d.jpg", i), 50_000))
	}
	l := newTestLoader(t, st, nil, Options{CrossFile: true, FileLead: 8, Workers: 4})
	l.SetSiblings(dirSiblings{objs: slices.Concat(labels, images)})
	walk(t, l, st, labels, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if n := fetchedFiles(st, images); n != 0 {
		t.Fatalf("%d images fetched ahead of a walk over the labels, want none", n)
	}
	if n := fetchedFiles(st, labels); n != len(labels) {
		t.Fatalf("%d of %d labels fetched", n, len(labels))
	}
	// Once an image is opened, the walk over them is fetched ahead.
	opened := walk(t, l, st, images, 3*time.Millisecond)
	if late := lateFiles(t, st, images, opened, func(i int) bool { return i >= 3 }); late > 1 {
		t.Errorf("%d images not fetched before the walk opened them", late)
	}
}

// A kind first opened in the middle of a walk is fetched ahead from there,
// the files of it the walk passed over included: a directory of .jpg and
// .png files read in order whose first .png comes third.
func TestDirectoryOrderKindOpenedLate(t *testing.T) {
	st := newFakeStore()
	st.latency = func(string) time.Duration { return time.Millisecond }
	var objs []store.Object
	for i := range 30 {
		ext := ".jpg"
		if i >= 2 && i%2 == 0 {
			ext = ".png"
		}
		objs = append(objs, st.add(fmt.Sprintf("d/f%03d%s", i, ext), 20_000))
	}
	l := newTestLoader(t, st, nil, Options{CrossFile: true, FileLead: 6, Workers: 4})
	l.SetSiblings(dirSiblings{objs: objs})
	opened := walk(t, l, st, objs, 3*time.Millisecond)
	if late := lateFiles(t, st, objs, opened, func(i int) bool { return i >= 4 }); late > 1 {
		t.Errorf("%d files from the fifth on not fetched before the walk opened them", late)
	}
}

func TestDirectoryOrderPrefetch(t *testing.T) {
	const n, lead = 40, 6
	for _, tc := range []struct {
		name      string
		crossFile bool
	}{
		{"on", true},
		{"off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			st.latency = func(string) time.Duration { return time.Millisecond }
			objs := addFiles(st, "train/cls1", n, 110<<10)
			addFiles(st, "train/cls2", 5, 1000) // another directory: never touched
			stats := &Stats{}
			l := newTestLoader(t, st, nil, Options{CrossFile: tc.crossFile, FileLead: lead, Workers: 4, Stats: stats})
			l.SetSiblings(dirSiblings{objs: objs})
			opened := walk(t, l, st, objs, 3*time.Millisecond)

			// From the third file on (two in-order hits), every file was
			// requested before the reader opened it.
			late := 0
			for i := 3; i < n; i++ {
				gets := st.getsOf(objs[i].Key)
				if len(gets) != 1 {
					t.Errorf("%s: %d GETs, want 1", objs[i].Key, len(gets))
					continue
				}
				if gets[0].seq > opened[i] {
					late++
				}
			}
			// After reading file i, files i+1..i+3 were already requested.
			if tc.crossFile {
				for i := 3; i+1 < n; i++ {
					for j := i + 1; j <= min(i+3, n-1); j++ {
						if g := st.getsOf(objs[j].Key); len(g) > 0 && g[0].seq > opened[i+1] {
							t.Errorf("file %d was not requested before the reader finished file %d", j, i)
						}
					}
				}
			}
			// A loaded machine may hold a fetch worker back for a file or
			// two; without prefetch every file is late.
			if tc.crossFile && late > (n-3)/25 {
				t.Errorf("%d of %d files were not fetched before the reader opened them", late, n-3)
			}
			if !tc.crossFile && late != n-3 {
				t.Errorf("prefetch off: %d files fetched early, want 0", n-3-late)
			}
			// The lead is bounded: nothing past the last file + lead, no other dir.
			for k, c := range st.countByKey() {
				if c > 1 {
					t.Errorf("%s fetched %d times", k, c)
				}
			}
			if got := len(st.countByKey()); got != n {
				t.Errorf("%d objects fetched, want %d", got, n)
			}
			t.Logf("prefetch issued %d used %d wasted %d", stats.PrefetchIssued.Load(), stats.PrefetchUsed.Load(), stats.PrefetchWasted.Load())
			if !tc.crossFile {
				return
			}
			// A second walk of the directory (next epoch, no cache tier):
			// prefetch starts over and runs ahead again.
			opened = walk(t, l, st, objs, 3*time.Millisecond)
			for i := 3; i < n; i++ {
				gets := st.getsOf(objs[i].Key)
				if len(gets) != 2 {
					t.Errorf("%s: %d GETs after two walks, want 2", objs[i].Key, len(gets))
				} else if gets[1].seq > opened[i] {
					t.Errorf("second walk: %s was not fetched before it was opened", objs[i].Key)
				}
			}
		})
	}
}

// While the reader walks, the number of files fetched but not yet opened
// stays within FileLead.
// shuffledEpoch is a store of n files of 20 KiB, each GET taking 1 ms, and
// a shuffled order over them: an announced order that is not key order (n
// must not be a multiple of 37).
func shuffledEpoch(n int) (*fakeStore, []store.Object) {
	st := newFakeStore()
	st.latency = func(string) time.Duration { return time.Millisecond }
	objs := addFiles(st, "shuffled", n, 20<<10)
	order := make([]store.Object, n)
	for i := range objs {
		order[(i*37)%n] = objs[i]
	}
	return st, order
}

func TestAnnouncedOrder(t *testing.T) {
	const n, lead = 150, 8
	st, order := shuffledEpoch(n)
	stats := &Stats{}
	l := newTestLoader(t, st, nil, Options{CrossFile: true, FileLead: lead, Workers: 8, Stats: stats})
	l.Announce(order)

	maxAhead := 0
	opened := make([]int64, n)
	for i, obj := range order {
		// Files fetched, minus files opened, before this open.
		ahead := len(st.countByKey()) - i
		maxAhead = max(maxAhead, ahead)
		opened[i] = st.seq.Add(1)
		got, err := readAll(context.Background(), l, obj, 64<<10)
		if err != nil || !bytes.Equal(got, st.data(obj.Key)) {
			t.Fatalf("read %s: err %v", obj.Key, err)
		}
		time.Sleep(500 * time.Microsecond)
	}
	late := lateFiles(t, st, order, opened, func(i int) bool { return i > 0 })
	if late > (n-1)/25 { // a loaded machine may hold a worker back for a file or two
		t.Errorf("%d of %d files were not fetched ahead of the reader", late, n-1)
	}
	if maxAhead > lead {
		t.Errorf("lead reached %d files, want <= %d", maxAhead, lead)
	}
	if w := stats.PrefetchWasted.Load(); w != 0 {
		t.Errorf("%d prefetched files wasted", w)
	}
	t.Logf("max lead %d files; prefetch issued %d used %d", maxAhead, stats.PrefetchIssued.Load(), stats.PrefetchUsed.Load())
}

func TestAnnouncedOrderFollowsSkipAndNewEpoch(t *testing.T) {
	const n, lead = 100, 5
	st := newFakeStore()
	objs := addFiles(st, "e", n, 1000)
	l := newTestLoader(t, st, nil, Options{CrossFile: true, FileLead: lead, Workers: 2})
	l.Announce(objs)
	ctx := context.Background()
	read := func(i int) {
		t.Helper()
		if _, err := readAll(ctx, l, objs[i], 4096); err != nil {
			t.Fatal(err)
		}
	}
	fetched := func(i int) bool { return len(st.getsOf(objs[i].Key)) > 0 }

	read(0)
	waitFor(t, "lead after file 0", func() bool { return fetched(lead) })
	// Skip ahead: the lead follows the reader; files in between are left alone.
	read(50)
	waitFor(t, "lead after skip to 50", func() bool { return fetched(50 + lead) })
	time.Sleep(20 * time.Millisecond)
	for i := lead + 1; i < 50; i++ {
		if fetched(i) {
			t.Errorf("file %d (skipped over) was fetched", i)
		}
	}
	if fetched(50 + lead + 1) {
		t.Errorf("file %d past the lead was fetched", 50+lead+1)
	}

	// A new epoch in reverse order replaces the old one.
	rev := make([]store.Object, n)
	for i := range objs {
		rev[i] = objs[n-1-i]
	}
	l.Announce(rev)
	if _, err := readAll(ctx, l, rev[0], 4096); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lead of the new epoch", func() bool { return fetched(n - 1 - lead) })
	for k, c := range st.countByKey() {
		if c > 1 {
			t.Errorf("%s fetched %d times", k, c)
		}
	}
}

// With a cache tier, a second epoch over the same files fetches nothing:
// the prefetcher finds every file in the cache.
func TestAnnouncedSecondEpochIsServedFromCache(t *testing.T) {
	const n = 60
	st := newFakeStore()
	objs := addFiles(st, "w", n, 5000)
	tier := newMapTier()
	l := newTestLoader(t, st, tier, Options{CrossFile: true, FileLead: 10, Workers: 4})
	for epoch := range 2 {
		l.Announce(objs)
		walk(t, l, st, objs, 0)
		if got := st.gets.Load(); got != n {
			t.Errorf("after epoch %d: %d GETs, want %d", epoch, got, n)
		}
	}
}

// TestAnnouncedPrefetchFromTiers: cross-file prefetch of files the cache
// tiers hold fetches none of them again. A file only on disk (as after
// `dataccel warm`) goes to the page cache without a promotion to RAM (which
// would evict another block, to be written to disk); a file in RAM stays
// there and is not pushed: the mount fetched or read it, so the kernel has
// seen it, and a warm epoch whose pages the kernel holds probes every file.
func TestAnnouncedPrefetchFromTiers(t *testing.T) {
	const n, inRAM = 40, 10
	st := newFakeStore()
	objs := addFiles(st, "w", n, 5000)
	ram, err := cache.NewRAM(64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ram.Close)
	disk, err := cache.NewDisk(cache.DefaultDiskOptions(t.TempDir(), 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	for i, o := range objs {
		k, b := cache.Key{Object: o.Key, ETag: o.ETag}, st.data(o.Key) // block 0: at offset 0
		disk.Put(k, b)
		if i < inRAM {
			ram.Put(k, b)
		}
	}
	disk.Flush()
	ram.Flush()
	tiers := cache.NewTiered(ram, disk)
	stats := &Stats{}
	l := newTestLoader(t, st, tiers, Options{CrossFile: true, FileLead: 2 * n, Workers: 4, Stats: stats})
	pc := newFakePageCache()
	l.SetPageCache(pc)
	l.Announce(objs)
	for deadline := time.Now().Add(10 * time.Second); stats.Pushed.Load() < n-inRAM; {
		if time.Now().After(deadline) {
			t.Fatalf("%d files pushed from the disk tier, want %d", stats.Pushed.Load(), n-inRAM)
		}
		time.Sleep(time.Millisecond)
	}
	for i, o := range objs {
		held := pc.held(o)
		switch {
		case i < inRAM && held != 0:
			t.Errorf("%s: in RAM, and %d bytes pushed; want none", o.Key, held)
		case i >= inRAM && held == 0:
			t.Errorf("%s: on disk only, and not pushed", o.Key)
		case i >= inRAM && !bytes.Equal(st.data(o.Key)[:held], pc.bytesOf(o)):
			t.Errorf("%s: wrong bytes pushed", o.Key)
		case i >= inRAM && ram.Contains(l.key(o, 0)):
			t.Errorf("%s: promoted to RAM", o.Key)
		}
	}
	if g := st.gets.Load(); g != 0 {
		t.Errorf("prefetch of cached files cost %d GETs, want 0", g)
	}
}

// Four data-loader workers sharing one directory open its files slightly out
// of order; directory prefetch still fetches every file exactly once. The
// loader has a cache tier, as a mount always has unless told otherwise: an
// open behind the walk (workers starting out of order, or one stalled on a
// loaded machine) starts a new walk, which finds what was read in the tier.
func TestDirectoryOrderInterleavedReaders(t *testing.T) {
	const n, readers = 200, 4
	st := newFakeStore()
	st.latency = func(string) time.Duration { return time.Millisecond }
	objs := addFiles(st, "d", n, 30<<10)
	stats := &Stats{}
	l := newTestLoader(t, st, indexedTier{newMapTier()}, Options{CrossFile: true, FileLead: 16, Workers: 8, Stats: stats})
	l.SetSiblings(dirSiblings{objs: objs})
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			for i := r; i < n; i += readers {
				got, err := readAll(context.Background(), l, objs[i], 64<<10)
				if err != nil || !bytes.Equal(got, st.data(objs[i].Key)) {
					t.Errorf("read %s: err %v or wrong bytes", objs[i].Key, err)
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	for k, c := range st.countByKey() {
		if c != 1 {
			t.Errorf("%s fetched %d times, want 1", k, c)
		}
	}
	if stats.PrefetchUsed.Load() < n/2 {
		t.Errorf("only %d of %d files came from prefetch", stats.PrefetchUsed.Load(), n)
	}
	t.Logf("prefetch issued %d used %d wasted %d", stats.PrefetchIssued.Load(), stats.PrefetchUsed.Load(), stats.PrefetchWasted.Load())
}

// TestAnnouncedOrderServesEachReader: data-loader workers each read their
// own batch of the announced order. When batches lie further apart than the
// lead (and started in any order), a jump ahead is another reader, not a
// skip: the next file of every reader must still be fetched ahead of it.
// Within the lead, the order is fetched front to back (TestAnnouncedOrder).
func TestAnnouncedOrderServesEachReader(t *testing.T) {
	for _, c := range []struct {
		name                 string
		readers, batch, lead int
		reverseStart         bool
	}{
		{"batches far apart, started in order", 4, 40, 8, false},
		{"batches far apart, the last started first", 6, 50, 8, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newFakeStore()
			st.latency = func(string) time.Duration { return 2 * time.Millisecond }
			order := addFiles(st, "batches", c.readers*c.batch, 20<<10)
			l := newTestLoader(t, st, nil, Options{CrossFile: true, FileLead: c.lead, Workers: 4})
			l.Announce(order)
			opened := make([]int64, len(order))
			var wg sync.WaitGroup
			for r := range c.readers {
				wg.Go(func() {
					if c.reverseStart {
						time.Sleep(time.Duration(c.readers-r) * time.Millisecond)
					}
					for i := r * c.batch; i < (r+1)*c.batch; i++ {
						opened[i] = st.seq.Add(1)
						got, err := readAll(context.Background(), l, order[i], 64<<10)
						if err != nil || !bytes.Equal(got, st.data(order[i].Key)) {
							t.Errorf("read %s: err %v", order[i].Key, err)
							return
						}
						time.Sleep(3 * time.Millisecond) // a training step
					}
				})
			}
			wg.Wait()
			// A reader's first file is its own to fetch.
			late := lateFiles(t, st, order, opened, func(i int) bool { return i%c.batch != 0 })
			// A reader may outrun the fetch workers now and then (more so
			// on a loaded machine); most files must be ready. Taking the
			// jump for a skip leaves about 80% late.
			if late > len(order)/4 {
				t.Errorf("%d of %d files were not fetched ahead of their reader", late, len(order)-c.readers)
			}
			t.Logf("%d of %d files late", late, len(order)-c.readers)
		})
	}
}

// TestPrefetchBytesInFlight: prefetch GETs in flight stop at PrefetchBytes
// (at least one), so that with large files the next one needed arrives
// first instead of all of them arriving late together.
func TestPrefetchBytesInFlight(t *testing.T) {
	st := newFakeStore()
	st.gate = make(chan struct{})
	order := addFiles(st, "large", 20, 1<<20)
	l := newTestLoader(t, st, nil, Options{CrossFile: true, FileLead: 20, Workers: 8, PrefetchBytes: 3 << 20})
	l.Announce(order)
	waitFor(t, "prefetch GETs at the gate", func() bool { return st.waiting.Load() == 3 })
	time.Sleep(20 * time.Millisecond)
	if n := st.waiting.Load(); n != 3 {
		t.Fatalf("%d prefetch GETs of 1 MiB in flight with PrefetchBytes 3 MiB; want 3", n)
	}
	close(st.gate)
	for _, obj := range order {
		got, err := readAll(context.Background(), l, obj, 64<<10)
		if err != nil || !bytes.Equal(got, st.data(obj.Key)) {
			t.Fatalf("read %s: err %v", obj.Key, err)
		}
	}
	if peak := st.peak.Load(); peak > 4 { // 3 prefetches and at most one reader's GET
		t.Errorf("peak %d GETs in flight; want <= 4", peak)
	}
}

// TestOrderIndex: a key's first index in the order, for every caller at
// once (the first builds the index, the others wait for it).
func TestOrderIndex(t *testing.T) {
	keys := []string{"a", "b", "a", "c", "b"}
	order := make([]store.Object, len(keys))
	for i, k := range keys {
		order[i] = store.Object{Key: k}
	}
	want := map[string]int{"a": 0, "b": 1, "c": 3}
	x := newOrderIndex(order)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k, w := range want {
				if i, ok := x.find(k); !ok || i != w {
					t.Errorf("find(%q) = %d, %v; want %d", k, i, ok, w)
				}
			}
			if i, ok := x.find("d"); ok {
				t.Errorf("find(d) = %d, true; want not found", i)
			}
		})
	}
	wg.Wait()
}
