package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
)

var srv *testenv.Server

func TestMain(m *testing.M) { os.Exit(testenv.Run(m, &srv)) }

func TestStatListRead(t *testing.T) {
	st := srv.NewBucket(t)
	ctx := context.Background()
	want := map[string]string{}
	for d := range 5 {
		for i := range 30 {
			k := fmt.Sprintf("p/d%d/s%d/f%03d", d, i%3, i)
			want[k] = fmt.Sprintf("content of %s", k)
			testenv.Put(t, st, k, []byte(want[k]))
		}
	}
	testenv.Put(t, st, "p/top", []byte("top"))
	want["p/top"] = "top"

	// one level: files and common prefixes
	level := listed(t, st, "p/", false)
	if strings.Join(level, ",") != "p/d0/ (dir),p/d1/ (dir),p/d2/ (dir),p/d3/ (dir),p/d4/ (dir),p/top" {
		t.Fatalf("level listing: %v", level)
	}

	// parallel flat listing equals the recursive one
	var all []string
	if err := store.ListAll(ctx, st, "p/", 4, func(o store.Object) error { all = append(all, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(all)
	var rec []string
	st.List(ctx, "p/", true, func(o store.Object) error { rec = append(rec, o.Key); return nil })
	if len(all) != len(want) || fmt.Sprint(all) != fmt.Sprint(rec) {
		t.Fatalf("ListAll gave %d keys, recursive List %d, want %d", len(all), len(rec), len(want))
	}

	obj, err := st.Stat(ctx, "p/d1/s1/f001")
	if err != nil || obj.Size != int64(len(want["p/d1/s1/f001"])) || obj.ETag == "" {
		t.Fatalf("stat: %+v %v", obj, err)
	}
	tests := []struct {
		off, n int64
		want   string
	}{
		{0, -1, want[obj.Key]},
		{3, 4, want[obj.Key][3:7]},
		{5, -1, want[obj.Key][5:]},
		{0, 0, ""},
	}
	for _, tc := range tests {
		rc, err := st.ReadRange(ctx, obj, tc.off, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != tc.want {
			t.Errorf("ReadRange(%d,%d) = %q, want %q", tc.off, tc.n, b, tc.want)
		}
	}
}

func TestErrors(t *testing.T) {
	st := srv.NewBucket(t)
	ctx := context.Background()
	if _, err := st.Stat(ctx, "missing"); !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("stat missing: %v", err)
	}
	obj := testenv.Put(t, st, "k", []byte("version one"))
	testenv.Put(t, st, "k", bytes.Repeat([]byte("2"), 30))
	if _, err := st.ReadRange(ctx, obj, 0, 5); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("read of a changed object: %v, want ErrChanged", err)
	}
	if err := st.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
