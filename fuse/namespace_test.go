package fuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
)

// TestSnapshotRefresh: a snapshot holds what was listed (and nothing else),
// restores into a fresh namespace that then lists nothing, and a refresh
// lists each given directory once more, gated, and stops on a gate error.
func TestSnapshotRefresh(t *testing.T) {
	objs := map[string][]byte{
		"data/a/1.jpg": nil, "data/a/2.jpg": nil,
		"data/b/c/3.jpg": nil, "data/b/4.jpg": nil,
		"data/5.jpg": nil, "data/a/../x": nil, // unsafe: skipped
		"other/6.jpg": nil, // outside the prefix
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	st := store.NewCounting(memStore{objs: objs})
	ns := newNamespace(t.Context(), st, time.Hour, discard)
	listed := []string{"data/", "data/a/"} // data/b/ is never read
	for _, d := range listed {
		if _, err := ns.list(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	seq, gen, at := ns.snapshot()
	snap := slices.Collect(seq)
	if len(snap) != len(listed) || gen != uint64(len(listed)) {
		t.Fatalf("snapshot of %d directories at generation %d; want %d and %d", len(snap), gen, len(listed), len(listed))
	}
	if first := ns.held(listed[0]).at; !at.Equal(first) {
		t.Fatalf("snapshot listed at %v; want the oldest listing's LIST start, %v", at, first)
	}
	for i, d := range snap {
		if d.Dir != listed[i] {
			t.Fatalf("snapshot directory %d is %q, want %q (directory order)", i, d.Dir, listed[i])
		}
	}
	// One listing is copied at a time: lookups wait for one directory's
	// copy, never for all of them (a million files held ns.mu for 0.2-1.6 s).
	for range seq {
		if !ns.mu.TryLock() {
			t.Fatal("ns.mu held between the snapshot's directories")
		}
		ns.mu.Unlock()
	}

	st2 := store.NewCounting(memStore{objs: objs})
	ns2 := newNamespace(t.Context(), st2, time.Hour, discard)
	ns2.restore("data/", snap, time.Now().Add(-time.Hour/2))
	for _, tc := range []struct{ dir, name string }{{"data/", "5.jpg"}, {"data/a/", "2.jpg"}, {"data/", "b"}} {
		if _, ok, err := ns2.lookup(ctx, tc.dir, tc.name); err != nil || !ok {
			t.Fatalf("lookup %s%s after restore: %v %v", tc.dir, tc.name, ok, err)
		}
	}
	if n := st2.C.Lists.Load(); n != 0 {
		t.Fatalf("%d LISTs for restored directories; want 0", n)
	}
	if _, ok, _ := ns2.lookup(ctx, "data/b/", "4.jpg"); !ok || st2.C.Lists.Load() != 1 {
		t.Fatalf("a directory the snapshot lacks: found %v with %d LISTs; want it listed on demand", ok, st2.C.Lists.Load())
	}
	// Restoring outside the root, or a bad directory path, installs nothing.
	ns3 := newNamespace(t.Context(), st2, time.Hour, discard)
	ns3.restore("data/", []store.ManifestDir{{Dir: "other/"}, {Dir: "data/../"}, {Dir: "data/x"}}, time.Time{})
	seq3, _, _ := ns3.snapshot()
	if snap3 := slices.Collect(seq3); len(snap3) != 0 {
		t.Fatalf("restore installed %d directories outside the root or with bad paths", len(snap3))
	}

	var gates atomic.Int64
	gate := func(context.Context) error { gates.Add(1); return nil }
	before := st2.C.Lists.Load()
	if err := ns2.refresh(ctx, listed, 2, gate); err != nil {
		t.Fatal(err)
	}
	if n := st2.C.Lists.Load() - before; n != int64(len(listed)) || gates.Load() != int64(len(listed)) {
		t.Fatalf("refresh: %d LISTs, %d gates; want %d each", n, gates.Load(), len(listed))
	}
	stop := errors.New("stop")
	before = st2.C.Lists.Load()
	if err := ns2.refresh(ctx, listed, 2, func(context.Context) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("refresh with a failing gate: %v", err)
	}
	if n := st2.C.Lists.Load() - before; n != 0 {
		t.Fatalf("%d LISTs after the gate refused; want 0", n)
	}
}

// TestSiblingsFromListings: the sweep's view of a directory (its files and
// its subdirectories, in name order) comes from cached listings only; an
// unlisted directory has none, and costs no LIST.
func TestSiblingsFromListings(t *testing.T) {
	objs := map[string][]byte{
		"data/b/1.jpg": nil, "data/a/2.jpg": nil, "data/c/d/3.jpg": nil,
		"data/4.jpg": nil, "data/../5.jpg": nil, // unsafe: skipped
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := store.NewCounting(memStore{objs: objs})
	ns := newNamespace(t.Context(), st, time.Hour, discard)
	if _, err := ns.list(context.Background(), "data/"); err != nil {
		t.Fatal(err)
	}
	if got, want := ns.subdirs("data/"), []string{"data/a/", "data/b/", "data/c/"}; !slices.Equal(got, want) {
		t.Errorf("subdirs of data/: %q, want %q", got, want)
	}
	if got := ns.files("data/"); len(got) != 1 || got[0].Key != "data/4.jpg" {
		t.Errorf("files of data/: %v, want data/4.jpg alone", got)
	}
	lists := st.C.Lists.Load()
	if got := ns.subdirs("data/c/"); got != nil {
		t.Errorf("subdirs of the unlisted data/c/: %q", got)
	}
	if got := ns.files("data/a/"); got != nil {
		t.Errorf("files of the unlisted data/a/: %v", got)
	}
	if n := st.C.Lists.Load() - lists; n != 0 {
		t.Errorf("%d LISTs asking about unlisted directories", n)
	}
}

// heldLister is a memStore whose LISTs are counted, wait while hold is set
// (until release closes), and fail while fail is set.
type heldLister struct {
	memStore
	lists   atomic.Int64
	hold    atomic.Bool
	fail    atomic.Bool
	release chan struct{}
	// failWith, if set, is the error of a failing LIST (else one that
	// sending again may cure).
	failWith atomic.Pointer[error]
}

func (s *heldLister) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	s.lists.Add(1)
	if s.hold.Load() {
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.fail.Load() {
		if e := s.failWith.Load(); e != nil {
			return *e
		}
		return errors.New("injected LIST failure")
	}
	return s.memStore.List(ctx, prefix, recursive, fn)
}

// TestRelistDue: listings in the last quarter of their TTL are listed
// again in the background, and lookups keep the listing in place until
// the new one arrives, however long the LIST takes (a directory of a
// million files takes a minute). Past the TTL a lookup waits for a fresh
// listing as before, and a failed relisting shows there, not earlier.
func TestRelistDue(t *testing.T) {
	st := &heldLister{memStore: memStore{objs: map[string][]byte{"d/a": nil, "e/x": nil}}, release: make(chan struct{})}
	var logs testenv.SyncBuffer
	ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)))
	start := time.Now()
	var clock atomic.Int64 // time since start
	ns.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	found := func(name string) bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a lookup that waits for the held LIST fails
		defer cancel()
		_, ok, err := ns.lookup(ctx, "d/", name)
		if err != nil {
			t.Fatalf("lookup %s: %v", name, err)
		}
		return ok
	}

	if !found("a") || st.lists.Load() != 1 {
		t.Fatalf("first lookup: %d LISTs, want 1", st.lists.Load())
	}
	clock.Store(int64(30 * time.Minute))
	if _, err := ns.list(t.Context(), "e/"); err != nil { // listed 30 minutes after d/
		t.Fatal(err)
	}
	ns.relistDue(t.Context(), false)
	if n := st.lists.Load(); n != 2 {
		t.Fatalf("half d/'s TTL: %d LISTs, want 2 (no relisting yet)", n)
	}

	st.objs["d/b"] = nil // before any relisting reads the map
	st.hold.Store(true)
	clock.Store(int64(50 * time.Minute))
	relisted := make(chan struct{})
	go func() { ns.relistDue(t.Context(), false); close(relisted) }()
	for deadline := time.Now().Add(10 * time.Second); st.lists.Load() != 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d LISTs; want d/ relisted (and e/, 20 minutes old, not)", st.lists.Load())
		}
	}
	for range 100 {
		if !found("a") || found("b") {
			t.Fatal("while d/ is relisted its listing in place must serve (a found, b not yet)")
		}
	}
	// Past the TTL too, while the relisting that started before it runs.
	clock.Store(int64(70 * time.Minute))
	if !found("a") || found("b") || st.lists.Load() != 3 {
		t.Fatalf("past the TTL while d/ is relisted: %d LISTs; want its listing in place to serve", st.lists.Load())
	}
	close(st.release)
	<-relisted
	if !found("b") {
		t.Fatal("b not found after the relisting")
	}
	if n := st.lists.Load(); n != 3 {
		t.Fatalf("%d LISTs, want 3", n)
	}

	// A failed relisting is logged; the listing serves until its TTL, then
	// lookups wait for a fetch and see its error. A listing past its TTL
	// is left to them: e/, 70 minutes old, is not relisted.
	st.fail.Store(true)
	clock.Store(int64(100 * time.Minute)) // d/ 50 minutes old: due
	ns.relistDue(t.Context(), false)
	if !strings.Contains(logs.String(), "failed=1 of=1") {
		t.Fatalf("no warning for the failed relisting of d/ alone: %q", logs.String())
	}
	if !found("b") {
		t.Fatal("the listing in place must serve until its TTL while its relisting fails")
	}
	clock.Store(int64(111 * time.Minute))
	if _, _, err := ns.lookup(t.Context(), "d/", "b"); err == nil {
		t.Fatal("a lookup past the TTL served the old listing while LISTs fail")
	}
	st.fail.Store(false)
	if !found("b") {
		t.Fatal("b lost after the server came back")
	}
}

// clockLister is a memStore whose LISTs take d of a fake clock.
type clockLister struct {
	memStore
	clock *atomic.Int64
	d     time.Duration
	lists atomic.Int64
}

func (s *clockLister) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	s.lists.Add(1)
	s.clock.Add(int64(s.d))
	return s.memStore.List(ctx, prefix, recursive, fn)
}

// TestRelistDueSlowList: a listing is as old as its LIST's start, and a
// directory whose LIST takes long is listed again early enough to finish
// before the TTL (from twice that time before it), but not in the TTL's
// first half.
func TestRelistDueSlowList(t *testing.T) {
	for _, tc := range []struct {
		took, due time.Duration
	}{
		{time.Minute, 45 * time.Minute},      // the last quarter
		{10 * time.Minute, 40 * time.Minute}, // twice the LIST's time before the TTL
		{20 * time.Minute, 30 * time.Minute}, // not before half the TTL
	} {
		t.Run(tc.took.String(), func(t *testing.T) {
			var clock atomic.Int64
			st := &clockLister{memStore: memStore{objs: map[string][]byte{"d/a": nil}}, clock: &clock, d: tc.took}
			ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.DiscardHandler))
			start := time.Now()
			ns.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
			l, err := ns.list(t.Context(), "d/")
			if err != nil {
				t.Fatal(err)
			}
			if !l.at.Equal(start) || l.took != tc.took {
				t.Fatalf("listing at %v after %v; want its LIST's start and %v", l.at.Sub(start), l.took, tc.took)
			}
			clock.Store(int64(tc.due - time.Minute))
			ns.relistDue(t.Context(), false)
			if n := st.lists.Load(); n != 1 {
				t.Fatalf("%d LISTs a minute before %v, want 1", n, tc.due)
			}
			clock.Store(int64(tc.due))
			ns.relistDue(t.Context(), false)
			if n := st.lists.Load(); n != 2 {
				t.Fatalf("%d LISTs at %v: want d/ relisted", n, tc.due)
			}
		})
	}
}

// TestListSlowerThanTTL: a listing whose LIST took longer than the TTL
// still serves (half a TTL after it arrived), instead of every lookup
// listing the directory again.
func TestListSlowerThanTTL(t *testing.T) {
	var clock atomic.Int64
	st := &clockLister{memStore: memStore{objs: map[string][]byte{"d/a": nil}}, clock: &clock, d: 70 * time.Minute}
	ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.DiscardHandler))
	start := time.Now()
	ns.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	for _, at := range []time.Duration{70 * time.Minute, 99 * time.Minute} {
		clock.Store(int64(at))
		if _, ok, err := ns.lookup(t.Context(), "d/", "a"); err != nil || !ok {
			t.Fatalf("lookup at %v: %v %v", at, ok, err)
		}
		if n := st.lists.Load(); n != 1 {
			t.Fatalf("%d LISTs at %v, want 1: the 70-minute listing serves until 100 minutes", n, at)
		}
	}
}

// TestRestoreTrustsForTTLFromListing: restored listings are as old as
// their LIST, not as the remount. A manifest listed within the TTL spares
// the LIST; one listed longer ago is listed again before a lookup answers
// (its objects may have changed since: a stale name would read another
// version, or fail ESTALE, for a whole TTL); a time to come counts as now.
func TestRestoreTrustsForTTLFromListing(t *testing.T) {
	objs := map[string][]byte{"d/a": nil}
	dirs := []store.ManifestDir{{Dir: "d/", Files: []store.Object{{Key: "d/a"}}}}
	now := time.Now()
	for _, tc := range []struct {
		name   string
		listed time.Time
		lists  int64
	}{
		{"within the ttl", now.Add(-50 * time.Minute), 0},
		{"older than the ttl", now.Add(-61 * time.Minute), 1},
		{"days ago", now.Add(-72 * time.Hour), 1},
		{"unknown", time.Time{}, 0},
		{"to come", now.Add(time.Hour), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewCounting(memStore{objs: objs})
			ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.DiscardHandler))
			ns.now = func() time.Time { return now }
			ns.restore("", dirs, tc.listed)
			// A stale listing is not saved again: it would make the
			// others look as old as itself.
			seq, _, _ := ns.snapshot()
			if n := len(slices.Collect(seq)); n != 1-int(tc.lists) {
				t.Fatalf("snapshot of %d directories, want %d", n, 1-tc.lists)
			}
			if _, ok, err := ns.lookup(t.Context(), "d/", "a"); !ok || err != nil {
				t.Fatalf("lookup: %v %v", ok, err)
			}
			if n := st.C.Lists.Load(); n != tc.lists {
				t.Fatalf("%d LISTs, want %d", n, tc.lists)
			}
		})
	}
}

// TestRelistDueOnlyUsed: a listing nobody asked for since it was made (a
// relisting, one restored from a manifest) is not listed again: a
// directory the job left costs one LIST more, not one a TTL.
func TestRelistDueOnlyUsed(t *testing.T) {
	var clock atomic.Int64
	st := &clockLister{memStore: memStore{objs: map[string][]byte{"d/a": nil, "r/b": nil}}, clock: &clock}
	ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.DiscardHandler))
	start := time.Now()
	ns.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	ns.restore("", []store.ManifestDir{{Dir: "r/", Files: []store.Object{{Key: "r/b"}}}}, time.Time{})
	if _, err := ns.list(t.Context(), "d/"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{2, 2} { // d/ once more (it was used), r/ never
		clock.Store(int64(time.Duration(i+1) * 50 * time.Minute))
		ns.relistDue(t.Context(), false)
		if n := st.lists.Load(); n != want {
			t.Fatalf("round %d: %d LISTs, want %d", i, n, want)
		}
	}
	if _, ok, err := ns.lookup(t.Context(), "d/", "a"); err != nil || !ok { // used again
		t.Fatalf("lookup: %v %v", ok, err)
	}
	clock.Store(int64(105 * time.Minute)) // its relisting of 50 minutes is due
	ns.relistDue(t.Context(), false)
	if n := st.lists.Load(); n != 3 {
		t.Fatalf("%d LISTs after d/ was used again, want 3", n)
	}
}

// TestDropIdle: a listing that serves no more and that no lookup asked
// for in two TTLs is dropped (a mount that walked a large bucket once does
// not hold it for its life); one in use, or whose kernel entries may live
// on, is kept, through its relistings too; a dropped directory is listed
// again at its next lookup.
func TestDropIdle(t *testing.T) {
	var clock atomic.Int64
	st := &clockLister{memStore: memStore{objs: map[string][]byte{"d/a": nil, "r/b": nil, "u/c": nil, "k/e": nil}}, clock: &clock}
	ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.DiscardHandler))
	start := time.Now()
	ns.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	at := func(d time.Duration) {
		t.Helper()
		clock.Store(int64(d))
		ns.relistDue(t.Context(), false)
		ns.dropIdle()
	}
	held := func(want map[string]bool) {
		t.Helper()
		for dir, w := range want {
			if got := ns.held(dir) != nil; got != w {
				t.Errorf("at %v: %s held %v, want %v", time.Duration(clock.Load()), dir, got, w)
			}
		}
	}
	ns.restore("", []store.ManifestDir{{Dir: "r/", Files: []store.Object{{Key: "r/b"}}}}, time.Time{})
	if _, err := ns.list(t.Context(), "d/"); err != nil { // used
		t.Fatal(err)
	}
	if r := <-ns.fetchShared("u/", nil, time.Time{}); r.Err != nil { // a listing no lookup asked for
		t.Fatal(r.Err)
	}
	if _, err := ns.list(t.Context(), "k/"); err != nil {
		t.Fatal(err)
	}

	at(50 * time.Minute) // d/ and k/ relisted (used); nothing past its TTL
	held(map[string]bool{"d/": true, "r/": true, "u/": true, "k/": true})
	if _, err := ns.list(t.Context(), "k/"); err != nil { // k/ used again, through its relisting
		t.Fatal(err)
	}
	at(65 * time.Minute) // r/ and u/ expired, never asked for: dropped
	held(map[string]bool{"d/": true, "r/": false, "u/": false, "k/": true})
	lists := st.lists.Load()
	// d/'s relisting of 50 minutes expired at 110 and is not relisted (not
	// used since), but the kernel may hold entries answered at 0 until 60:
	// kept for two TTLs from that use; k/, used at 50, until 170.
	at(115 * time.Minute)
	held(map[string]bool{"d/": true, "k/": true})
	at(121 * time.Minute)
	held(map[string]bool{"d/": false, "k/": true})
	at(171 * time.Minute)
	held(map[string]bool{"k/": false})
	if n := st.lists.Load(); n != lists {
		t.Fatalf("%d LISTs while dropping, want %d (none)", n, lists)
	}
	if _, ok, err := ns.lookup(t.Context(), "d/", "a"); err != nil || !ok {
		t.Fatalf("lookup in a dropped directory: %v %v", ok, err)
	}
	if n := st.lists.Load(); n != lists+1 {
		t.Fatalf("%d LISTs, want %d: the dropped directory listed again", n, lists+1)
	}
}

// outageNamespace returns a namespace over st with ttl, a 15-minute
// outage grace, its log and the fake clock it reads (time since now).
func outageNamespace(t *testing.T, st store.Store, ttl time.Duration) (*namespace, *testenv.SyncBuffer, *atomic.Int64) {
	logs := new(testenv.SyncBuffer)
	ns := newNamespace(t.Context(), st, ttl, slog.New(slog.NewTextHandler(logs, nil)))
	ns.grace = 15 * time.Minute
	start := time.Now()
	clock := new(atomic.Int64)
	ns.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	return ns, logs, clock
}

// TestRideOutOutage: while the store fails LISTs on errors that sending
// again may cure, an expired listing serves for the grace past its ttl
// instead of failing lookups (a job whose files are cached reads on); one
// that expires during the outage serves at once while it is listed in the
// background. A listing riding it out is tried again once a lookup asked
// for it since its last failure, one directory a round; the outage is
// logged as it begins and as it ends, and the first LIST that succeeds
// replaces the listing. Past the grace, or after an answer that no retry
// changes (access denied), lookups fail as before, outage or not.
func TestRideOutOutage(t *testing.T) {
	st := &heldLister{memStore: memStore{objs: map[string][]byte{"d/a": nil, "e/x": nil}}, release: make(chan struct{})}
	ns, logs, clock := outageNamespace(t, st, time.Hour)
	at := func(d time.Duration) { t.Helper(); clock.Store(int64(d)) }
	lookupIn := func(dir, name string) (bool, error) {
		t.Helper()
		_, ok, err := ns.lookup(t.Context(), dir, name)
		ns.bgLists.Wait() // a LIST it started in the background
		return ok, err
	}
	lookup := func(name string) (bool, error) { t.Helper(); return lookupIn("d/", name) }
	lists := func(want int64) {
		t.Helper()
		if n := st.lists.Load(); n != want {
			t.Fatalf("at %v: %d LISTs, want %d", time.Duration(clock.Load()), n, want)
		}
	}
	warnings := func(want int) {
		t.Helper()
		if n := strings.Count(logs.String(), "the store fails LISTs"); n != want {
			t.Fatalf("at %v: %d outage warnings, want %d: %q", time.Duration(clock.Load()), n, want, logs.String())
		}
	}
	if ok, err := lookup("a"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := lookupIn("e/", "x"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	st.fail.Store(true)
	at(61 * time.Minute) // expired, never relisted (no tick ran): the lookup lists, fails, and rides out
	if ok, err := lookup("a"); !ok || err != nil {
		t.Fatalf("lookup past the ttl in an outage: %v %v, want the held listing", ok, err)
	}
	lists(3)
	warnings(1)
	if ok, err := lookupIn("e/", "x"); !ok || err != nil {
		t.Fatalf("another expired listing in the outage: %v %v", ok, err)
	}
	lists(4) // served at once, listed in the background (and failed)
	for range 3 {
		if ok, err := lookupIn("e/", "x"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := lookup("a"); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	lists(4) // riding out: no LIST per lookup
	at(62 * time.Minute)
	ns.relistDue(t.Context(), true) // both asked for since they began to ride: one LIST probes the store, fails, and ends the round
	lists(5)
	at(63 * time.Minute)
	ns.relistDue(t.Context(), true) // the other one, still due; the first not asked for since its LIST failed
	lists(6)
	at(64 * time.Minute)
	ns.relistDue(t.Context(), false) // neither asked for since
	lists(6)
	warnings(1)
	if strings.Contains(logs.String(), "relisting directories ahead") {
		t.Fatalf("an outage ridden out logs as it begins alone: %q", logs.String())
	}

	st.fail.Store(false)
	st.objs["d/b"] = nil
	if ok, err := lookup("b"); ok || err != nil {
		t.Fatalf("b before the store answers again: %v %v", ok, err)
	}
	lists(6)
	at(65 * time.Minute)
	ns.relistDue(t.Context(), true)
	lists(7)
	if ok, err := lookup("b"); !ok || err != nil {
		t.Fatalf("b after the store answered: %v %v", ok, err)
	}
	if !strings.Contains(logs.String(), "the store answers LISTs again") {
		t.Fatalf("the outage's end not logged: %q", logs.String())
	}

	// Listed at 65: expires at 125, rides out until 140.
	st.fail.Store(true)
	at(139 * time.Minute)
	if ok, err := lookup("b"); !ok || err != nil {
		t.Fatalf("within the grace: %v %v", ok, err)
	}
	warnings(2) // a second outage
	at(141 * time.Minute)
	if _, err := lookup("b"); err == nil {
		t.Fatal("a lookup past the grace served the listing")
	}

	// An answer no retry changes ends the listing at its ttl.
	st.fail.Store(false)
	at(142 * time.Minute)
	if ok, err := lookup("b"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	denied := fmt.Errorf("list: %w", store.ErrAccess)
	st.failWith.Store(&denied)
	st.fail.Store(true)
	at(203 * time.Minute)
	if _, err := lookup("b"); !errors.Is(err, store.ErrAccess) {
		t.Fatalf("lookup past the ttl with access denied: %v, want the error", err)
	}

	// Access denied in an outage ends it at the next LIST, and a later
	// outage does not bring the denied listing back.
	st.fail.Store(false)
	at(204 * time.Minute)
	if ok, err := lookup("b"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	st.failWith.Store(nil)
	st.fail.Store(true)
	at(265 * time.Minute)
	if _, err := lookupIn("e/", "x"); err == nil { // listed at 0: past its grace, but it starts an outage
		t.Fatal("e/ past its grace served")
	}
	if ok, err := lookup("b"); !ok || err != nil {
		t.Fatalf("d/ expired in an outage: %v %v, want it to ride it out", ok, err)
	}
	st.failWith.Store(&denied)
	ns.relistDue(t.Context(), true)
	if _, err := lookup("b"); !errors.Is(err, store.ErrAccess) {
		t.Fatalf("lookup once a LIST was denied in an outage: %v, want the error", err)
	}
	if !strings.Contains(logs.String(), "with an error no retry changes") {
		t.Fatalf("the outage's end by an answer not logged: %q", logs.String())
	}
	st.failWith.Store(nil)
	if _, err := lookupIn("e/", "x"); err == nil {
		t.Fatal("e/ past its grace served")
	}
	if _, err := lookup("b"); err == nil {
		t.Fatal("a later outage brought back a listing the store denied")
	}
}

// TestOutageKeepsIdleListings: with a grace longer than the ttl, a
// listing idle for two ttls is kept while it may still ride out an outage:
// the lookup that meets the outage serves it once its LIST fails (it was
// dropped while that LIST ran, and the cached files failed their opens).
// Past the grace it is dropped.
func TestOutageKeepsIdleListings(t *testing.T) {
	st := &heldLister{memStore: memStore{objs: map[string][]byte{"d/a": nil}}, release: make(chan struct{})}
	ns, _, clock := outageNamespace(t, st, time.Minute)
	if _, ok, err := ns.lookup(t.Context(), "d/", "a"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	st.fail.Store(true)
	clock.Store(int64(3 * time.Minute)) // idle for three ttls
	ns.dropIdle()
	if _, ok, err := ns.lookup(t.Context(), "d/", "a"); !ok || err != nil {
		t.Fatalf("lookup in an outage of a directory idle for three ttls: %v %v, want its listing", ok, err)
	}
	clock.Store(int64(20 * time.Minute))
	ns.dropIdle()
	if ns.held("d/") != nil {
		t.Fatal("a listing past its grace, idle, kept")
	}
}

// prefixFailLister is a memStore whose LISTs of one prefix fail (with an
// error that sending again may cure) while fail is set.
type prefixFailLister struct {
	memStore
	failing string
	fail    atomic.Bool
	lists   sync.Map // prefix -> *atomic.Int64
}

func (s *prefixFailLister) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	n, _ := s.lists.LoadOrStore(prefix, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	if s.fail.Load() && prefix == s.failing {
		return errors.New("injected 500 on one prefix")
	}
	return s.memStore.List(ctx, prefix, recursive, fn)
}

// TestOutageOfOnePrefix: one prefix whose LISTs keep failing beside
// healthy ones neither keeps the healthy listings stale (an expired one is
// listed in the background at its first lookup, and a failing directory
// never stands first in a round of relistings) nor logs a warning a round.
func TestOutageOfOnePrefix(t *testing.T) {
	st := &prefixFailLister{memStore: memStore{objs: map[string][]byte{"a/1": nil, "b/1": nil, "c/1": nil}}, failing: "a/"}
	ns, logs, clock := outageNamespace(t, st, time.Hour)
	found := func(dir, name string) bool {
		t.Helper()
		_, ok, err := ns.lookup(t.Context(), dir, name)
		ns.bgLists.Wait()
		if err != nil {
			t.Fatalf("lookup %s%s: %v", dir, name, err)
		}
		return ok
	}
	for _, dir := range []string{"a/", "b/", "c/"} {
		found(dir, "1")
	}
	st.fail.Store(true)
	st.objs["b/2"], st.objs["c/2"] = nil, nil
	for m := 61; m <= 70; m++ {
		clock.Store(int64(time.Duration(m) * time.Minute))
		if !found("a/", "1") {
			t.Fatalf("at %d min: a/ lost its listing", m)
		}
		found("b/", "1") // the first lookup after its expiry gets the listing held, and lists it again
		if m >= 62 && !found("b/", "2") {
			t.Fatalf("at %d min: b/2 unseen: the healthy directory stayed stale beside the failing one", m)
		}
		found("c/", "1")
		if m >= 62 && !found("c/", "2") {
			t.Fatalf("at %d min: c/2 unseen", m)
		}
		ns.relistDue(t.Context(), true)
	}
	// The healthy directories' LISTs end the outage twice (at 61 and 62)
	// and the failing one's start it again: one warning.
	if n := strings.Count(logs.String(), "the store fails LISTs"); n != 1 {
		t.Fatalf("%d outage warnings over 10 minutes of one failing prefix, want 1: %q", n, logs.String())
	}
}

// TestRelistUnchanged: a relisting that finds the directory as it was
// leaves the generation alone (the manifest is not saved again for it);
// one that finds a change moves it.
func TestRelistUnchanged(t *testing.T) {
	objs := map[string][]byte{"d/a": []byte("1")}
	st := store.NewCounting(memStore{objs: objs})
	ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.DiscardHandler))
	if _, err := ns.list(t.Context(), "d/"); err != nil {
		t.Fatal(err)
	}
	gen := ns.generation()
	relist := func() {
		t.Helper()
		if err := ns.refresh(t.Context(), []string{"d/"}, 1, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	relist()
	if g := ns.generation(); g != gen || st.C.Lists.Load() != 2 {
		t.Fatalf("generation %d after an unchanged relisting (%d LISTs), want %d", g, st.C.Lists.Load(), gen)
	}
	objs["d/a"] = []byte("22") // another size: another version
	relist()
	if g := ns.generation(); g == gen {
		t.Fatal("generation unchanged after a relisting that found a new version")
	}
	gen = ns.generation()
	objs["d/b"] = nil
	relist()
	if g := ns.generation(); g == gen {
		t.Fatal("generation unchanged after a relisting that found a new file")
	}
}

// TestLookUp finds every entry of a listing, files and directories, by
// string and by bytes, and no name that falls before, between or after
// them, nor a prefix of one; a name in bytes makes no string.
func TestLookUp(t *testing.T) {
	b := newDirBuilder()
	for _, name := range []string{"b.jpg", "d", "b.jpg.txt", "a b", "é.jpg", "Z.jpg"} {
		b.files[name] = store.Object{Key: "train/" + name, Size: int64(len(name))}
	}
	b.dirs["c"] = true
	b.dirs["d"] = true // a file of the same name gives way to the directory
	ns := newNamespace(t.Context(), nil, time.Hour, slog.New(slog.DiscardHandler))
	l := ns.build(b, time.Time{})
	want := map[string]bool{"Z.jpg": false, "a b": false, "b.jpg": false, "b.jpg.txt": false, "c": true, "d": true, "é.jpg": false}
	if len(l.entries) != len(want) {
		t.Fatalf("%d entries, want %d", len(l.entries), len(want))
	}
	for name, dir := range want {
		for _, found := range []func() (entry, bool){
			func() (entry, bool) { return lookUp(l, name) },
			func() (entry, bool) { return lookUp(l, []byte(name)) },
		} {
			e, ok := found()
			if !ok || e.name != name || e.dir != dir || !dir && e.obj.Key != "train/"+name {
				t.Errorf("lookUp(%q) = %+v, %v", name, e, ok)
			}
		}
	}
	for _, name := range []string{"", "A", "b", "b.jp", "b.jpg.", "ca", "e", "zz", "\xff"} {
		if e, ok := lookUp(l, name); ok {
			t.Errorf("lookUp(%q) found %+v", name, e)
		}
		if e, ok := lookUp(l, []byte(name)); ok {
			t.Errorf("lookUp(%q in bytes) found %+v", name, e)
		}
	}
	name := []byte("b.jpg.txt")
	if n := testing.AllocsPerRun(100, func() { lookUp(l, name) }); n != 0 {
		t.Errorf("a lookup by bytes allocates %v times", n)
	}
}

// TestChangedNames: the names whose kernel entries a relisting must drop
// are those added, removed, or listed as another kind or version; an
// unchanged name is not among them.
func TestChangedNames(t *testing.T) {
	ns := newNamespace(t.Context(), nil, time.Hour, slog.New(slog.DiscardHandler))
	listingOf := func(files map[string]string, dirs ...string) *listing {
		b := newDirBuilder()
		for name, etag := range files {
			b.files[name] = store.Object{Key: "d/" + name, ETag: etag, Size: 1}
		}
		for _, name := range dirs {
			b.dirs[name] = true
		}
		return ns.build(b, time.Time{})
	}
	old := listingOf(map[string]string{"same": "1", "changed": "1", "gone": "1", "becomes-dir": "1"}, "sub", "sub-gone")
	now := listingOf(map[string]string{"same": "1", "changed": "2", "added": "1"}, "sub", "becomes-dir", "sub-added")
	got := changedNames(old, now)
	slices.Sort(got)
	if want := []string{"added", "becomes-dir", "changed", "gone", "sub-added", "sub-gone"}; !slices.Equal(got, want) {
		t.Errorf("changedNames = %v, want %v", got, want)
	}
	if got := changedNames(old, old); len(got) != 0 {
		t.Errorf("a listing against itself: %v, want none", got)
	}
}

// TestConcurrentListsShareOne: callers that find no listing at the same
// moment share one LIST, also when the LIST ends between one caller's look
// for a listing and its join of the fetch (that caller used to list again).
func TestConcurrentListsShareOne(t *testing.T) {
	objs := map[string][]byte{"d/a": nil, "d/b": nil}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	const rounds, callers = 2000, 8
	extra := 0
	for range rounds {
		st := store.NewCounting(memStore{objs: objs})
		ns := newNamespace(t.Context(), st, time.Hour, discard)
		start := make(chan struct{})
		errs := make(chan error, callers)
		for range callers {
			go func() {
				<-start
				_, err := ns.list(t.Context(), "d/")
				errs <- err
			}()
		}
		close(start)
		for range callers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		extra += int(st.C.Lists.Load()) - 1
	}
	if extra != 0 {
		t.Fatalf("%d LISTs beyond one per directory in %d rounds of %d concurrent callers", extra, rounds, callers)
	}
}

// TestRelistStopsAtExpiry: a used listing whose relisting fails is tried
// again at each tick while it serves, and no more once it expired: a LIST
// that fails for good (a prefix the keys lost, a long outage) was tried and
// logged every tick for the mount's life, the job long gone.
func TestRelistStopsAtExpiry(t *testing.T) {
	st := &heldLister{memStore: memStore{objs: map[string][]byte{"d/a": nil}}, release: make(chan struct{})}
	var logs testenv.SyncBuffer
	ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)))
	start := time.Now()
	var clock atomic.Int64
	ns.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	if _, err := ns.list(t.Context(), "d/"); err != nil {
		t.Fatal(err)
	}
	st.fail.Store(true)
	for _, at := range []time.Duration{50 * time.Minute, 55 * time.Minute} { // the last quarter: tried
		clock.Store(int64(at))
		ns.relistDue(t.Context(), false)
	}
	if n := st.lists.Load(); n != 3 {
		t.Fatalf("%d LISTs by the end of the ttl, want the first and one a tick in its last quarter", n)
	}
	for i := range 10 { // past it, nobody looking: no more
		clock.Store(int64(time.Hour + time.Duration(i)*time.Hour/8))
		ns.relistDue(t.Context(), false)
	}
	if n := st.lists.Load(); n != 3 {
		t.Fatalf("%d LISTs after the listing expired unused, want none more than 3", n)
	}
	if n := strings.Count(logs.String(), "relisting directories ahead"); n != 2 {
		t.Fatalf("%d warnings of failed relistings, want 2", n)
	}
}

// TestRefreshWaitsPastJoinedList: a refresh (listAt with notBefore) that
// joins a LIST begun before it waits for one more: it replaces listings
// made before the call, as it says, not with one that began before it too.
func TestRefreshWaitsPastJoinedList(t *testing.T) {
	st := &heldLister{memStore: memStore{objs: map[string][]byte{"d/a": nil}}, release: make(chan struct{})}
	ns := newNamespace(t.Context(), st, time.Hour, slog.New(slog.DiscardHandler))
	st.hold.Store(true)
	first := make(chan error, 1)
	go func() { _, err := ns.list(t.Context(), "d/"); first <- err }()
	for st.lists.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	called := time.Now()
	refreshed := make(chan error, 1)
	go func() {
		refreshed <- ns.refresh(t.Context(), []string{"d/"}, 1, func(context.Context) error { return nil })
	}()
	time.Sleep(20 * time.Millisecond) // the refresh joins the LIST in flight
	st.hold.Store(false)
	close(st.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
	if l := ns.held("d/"); l.at.Before(called) || st.lists.Load() != 2 {
		t.Fatalf("after the refresh: a listing made %v before it was called, %d LISTs; want one made since, 2 LISTs", called.Sub(l.at), st.lists.Load())
	}
}
