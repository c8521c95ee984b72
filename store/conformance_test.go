package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/prefetch"
	"github.com/dataccel/dataccel/store"
	"github.com/dataccel/dataccel/store/s3"
)

// TestStoreConformance runs store.Store's contract against every
// implementation, each over the real server: the S3 store and the
// decorators the mount stacks on it (retries, counting, hedging).
func TestStoreConformance(t *testing.T) {
	for _, impl := range []struct {
		name string
		wrap func(*s3.Store) store.Store
	}{
		{"s3", func(s *s3.Store) store.Store { return s }},
		{"retrying", func(s *s3.Store) store.Store {
			return store.NewRetrying(s, store.RetryOptions{IOTimeout: 30 * time.Second})
		}},
		{"counting", func(s *s3.Store) store.Store { return store.NewCounting(s) }},
		{"hedged", func(s *s3.Store) store.Store {
			return prefetch.NewHedged(s, prefetch.HedgeOptions{InitialDelay: time.Millisecond, Floor: time.Millisecond, Burst: 1000, Ratio: 1})
		}},
	} {
		t.Run(impl.name, func(t *testing.T) { conformance(t, impl.wrap) })
	}
}

func conformance(t *testing.T, wrap func(*s3.Store) store.Store) {
	raw := srv.NewBucket(t)
	st := wrap(raw)
	ctx := t.Context()
	data := map[string][]byte{}
	for i, k := range []string{"p/a", "p/b", "p/d/c", "p/d/e/f", "q/x"} {
		data[k] = bytes.Repeat([]byte{byte('a' + i)}, 1000+i)
		testenv.Put(t, raw, k, data[k])
	}
	t.Run("stat", func(t *testing.T) {
		o, err := st.Stat(ctx, "p/d/c")
		if err != nil || o.Key != "p/d/c" || o.Size != int64(len(data["p/d/c"])) || o.ETag == "" || o.IsPrefix {
			t.Fatalf("%+v, %v", o, err)
		}
		if _, err := st.Stat(ctx, "p/missing"); !errors.Is(err, store.ErrNotExist) {
			t.Fatalf("a missing key: %v, want ErrNotExist", err)
		}
	})
	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			recursive bool
			want      []string
		}{
			{false, []string{"p/a", "p/b", "p/d/ (dir)"}},
			{true, []string{"p/a", "p/b", "p/d/c", "p/d/e/f"}},
		} {
			var got []string
			var inside atomic.Int32
			err := st.List(ctx, "p/", tc.recursive, func(o store.Object) error {
				if inside.Add(1) > 1 {
					t.Error("fn called concurrently")
				}
				defer inside.Add(-1)
				if o.IsPrefix {
					got = append(got, o.Key+" (dir)")
				} else {
					got = append(got, o.Key)
				}
				return nil
			})
			slices.Sort(got)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("recursive %v: %q, %v; want %q", tc.recursive, got, err, tc.want)
			}
		}
		stop := errors.New("stop")
		n := 0
		if err := st.List(ctx, "p/", true, func(store.Object) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
			t.Fatalf("fn's error: %v after %d calls, want it returned after 1", err, n)
		}
	})
	t.Run("read", func(t *testing.T) {
		o, err := st.Stat(ctx, "p/b")
		if err != nil {
			t.Fatal(err)
		}
		want := data["p/b"]
		for _, r := range []struct{ off, n int64 }{{0, -1}, {0, o.Size}, {10, 20}, {10, -1}, {o.Size - 1, 1}} {
			rc, err := st.ReadRange(ctx, o, r.off, r.n)
			if err != nil {
				t.Fatalf("[%d,+%d): %v", r.off, r.n, err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			end := o.Size
			if r.n >= 0 {
				end = r.off + r.n
			}
			if err != nil || !bytes.Equal(b, want[r.off:end]) {
				t.Fatalf("[%d,+%d): %d bytes, %v", r.off, r.n, len(b), err)
			}
		}
	})
	t.Run("changed", func(t *testing.T) {
		o, err := st.Stat(ctx, "p/a")
		if err != nil {
			t.Fatal(err)
		}
		testenv.Put(t, raw, "p/a", bytes.Repeat([]byte("2"), len(data["p/a"])))
		for _, r := range []struct{ off, n int64 }{{0, -1}, {5, 10}} {
			rc, err := st.ReadRange(ctx, o, r.off, r.n)
			if err == nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				t.Fatalf("[%d,+%d) of a changed object read %q", r.off, r.n, b)
			}
			if !errors.Is(err, store.ErrChanged) {
				t.Fatalf("[%d,+%d) of a changed object: %v, want ErrChanged", r.off, r.n, err)
			}
		}
		gone := store.Object{Key: "p/gone", Size: 10, ETag: "e"}
		if _, err := st.ReadRange(ctx, gone, 0, -1); !errors.Is(err, store.ErrNotExist) && !errors.Is(err, store.ErrChanged) {
			t.Fatalf("a deleted object: %v, want ErrNotExist or ErrChanged", err)
		}
	})
	t.Run("missing bucket", func(t *testing.T) {
		cfg := srv.Config(fmt.Sprintf("%s-none", raw.Bucket()))
		other, err := s3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = wrap(other).List(context.Background(), "", false, func(store.Object) error { return nil })
		if !errors.Is(err, store.ErrNoBucket) {
			t.Fatalf("%v, want ErrNoBucket", err)
		}
	})
}
