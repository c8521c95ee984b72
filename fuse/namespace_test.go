package fuse

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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
	ns := newNamespace(st, time.Hour, discard)
	listed := []string{"data/", "data/a/"} // data/b/ is never read
	for _, d := range listed {
		if _, err := ns.list(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	seq, gen := ns.snapshot()
	snap := slices.Collect(seq)
	if len(snap) != len(listed) || gen != uint64(len(listed)) {
		t.Fatalf("snapshot of %d directories at generation %d; want %d and %d", len(snap), gen, len(listed), len(listed))
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
	ns2 := newNamespace(st2, time.Hour, discard)
	ns2.restore("data/", snap)
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
	ns3 := newNamespace(st2, time.Hour, discard)
	ns3.restore("data/", []store.ManifestDir{{Dir: "other/"}, {Dir: "data/../"}, {Dir: "data/x"}})
	seq3, _ := ns3.snapshot()
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
	ns := newNamespace(st, time.Hour, discard)
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
