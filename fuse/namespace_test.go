package fuse

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// TestWalk lists a tree through the listing cache: every safe file once, one
// LIST per directory not already listed, the gate before each LIST, and a
// refresh that lists everything again.
func TestWalk(t *testing.T) {
	objs := map[string][]byte{
		"data/a/1.jpg": nil, "data/a/2.jpg": nil,
		"data/b/c/3.jpg": nil, "data/b/4.jpg": nil,
		"data/5.jpg": nil, "data/a/../x": nil, // unsafe: skipped
		"data/d/":     nil, // a marker object: a directory, not a file
		"other/6.jpg": nil, // outside the prefix
	}
	want := []string{"data/5.jpg", "data/a/1.jpg", "data/a/2.jpg", "data/b/4.jpg", "data/b/c/3.jpg"}
	const dirs = 5 // data/, data/a/, data/b/, data/b/c/, data/d/
	for _, tc := range []struct {
		name       string
		prelisted  []string
		refresh    bool
		wantLists  int64
		gateFails  bool
		wantErrGot bool
	}{
		{name: "cold", wantLists: dirs},
		{name: "a directory already listed is not listed again", prelisted: []string{"data/a/"}, wantLists: dirs},
		{name: "refresh lists everything again", prelisted: []string{"data/a/", "data/b/"}, refresh: true, wantLists: dirs + 2},
		{name: "a gate error stops the walk", gateFails: true, wantErrGot: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewCounting(memStore{objs: objs})
			ns := newNamespace(st, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
			ctx := context.Background()
			for _, d := range tc.prelisted {
				if _, err := ns.list(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			var gates atomic.Int64
			gate := func(context.Context) error {
				gates.Add(1)
				if tc.gateFails {
					return errors.New("stop")
				}
				return nil
			}
			got, err := ns.walk(ctx, "data/", tc.refresh, 2, gate)
			if tc.wantErrGot {
				if err == nil {
					t.Fatal("walk succeeded; want the gate's error")
				}
				if n := st.C.Lists.Load(); n != 0 {
					t.Fatalf("%d LISTs after the gate refused; want 0", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, o := range got {
				keys = append(keys, o.Key)
			}
			sort.Strings(keys)
			if len(keys) != len(want) {
				t.Fatalf("walk found %q; want %q", keys, want)
			}
			for i := range want {
				if keys[i] != want[i] {
					t.Fatalf("walk found %q; want %q", keys, want)
				}
			}
			if n := st.C.Lists.Load(); n != tc.wantLists {
				t.Fatalf("%d LISTs; want %d", n, tc.wantLists)
			}
			if n := gates.Load(); n != dirs {
				t.Fatalf("gate ran %d times; want %d (once per directory)", n, dirs)
			}
			// The walk's listings serve lookups: no further LIST.
			before := st.C.Lists.Load()
			if _, ok, err := ns.lookup(ctx, "data/b/c/", "3.jpg"); err != nil || !ok {
				t.Fatalf("lookup after walk: %v %v", ok, err)
			}
			if n := st.C.Lists.Load(); n != before {
				t.Fatalf("lookup after the walk made %d LISTs; want 0", n-before)
			}
		})
	}
}
