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
	"time"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
	"github.com/dataccel/dataccel/store/s3"
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
	// A range past the end (416) is refused for good: sending it again
	// changes nothing, so the retry layer returns it at once.
	obj2 := testenv.Put(t, st, "short", []byte("ten bytes!"))
	if _, err := st.ReadRange(ctx, obj2, 100, 5); !errors.Is(err, store.ErrRefused) {
		t.Fatalf("read past the end: %v, want ErrRefused", err)
	}
	stats := &store.RetryStats{}
	r := store.NewRetrying(st, store.RetryOptions{IOTimeout: time.Minute, Stats: stats})
	if _, err := r.ReadRange(ctx, obj2, 100, 5); !errors.Is(err, store.ErrRefused) || stats.Retries.Load() != 0 {
		t.Fatalf("read past the end through the retry layer: %v after %d retries, want ErrRefused after none", err, stats.Retries.Load())
	}
}

// TestReadKeys: ranged reads of keys that need encoding in a URL, each
// signed for its path, against the real server.
func TestReadKeys(t *testing.T) {
	st := srv.NewBucket(t)
	ctx := context.Background()
	keys := []string{"plain.jpg", "a b/c d.jpg", "plus+eq=amp&.jpg", "pct%20x", "q?hash#x", "ünï/çødé/日本.png",
		"tilde~star*(x)!", "semi;colon,comma'quote", "a//b"}
	for i, k := range keys {
		data := bytes.Repeat([]byte{byte('a' + i)}, 100+i)
		obj := testenv.Put(t, st, k, data)
		for _, r := range []struct{ off, n int64 }{{0, -1}, {0, 10}, {7, 20}, {50, -1}} {
			rc, err := st.ReadRange(ctx, obj, r.off, r.n)
			if err != nil {
				t.Fatalf("read %q [%d,+%d): %v", k, r.off, r.n, err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			end := int64(len(data))
			if r.n > 0 {
				end = r.off + r.n
			}
			if err != nil || !bytes.Equal(b, data[r.off:end]) {
				t.Fatalf("read %q [%d,+%d): %d bytes, %v", k, r.off, r.n, len(b), err)
			}
		}
	}
}

// failingStore is a store for a bucket that cannot serve, and the sentinel
// error it must give (nil: any error).
type failingStore struct {
	name string
	st   *s3.Store
	want error
}

// failingStores returns stores that cannot serve bucket: a missing bucket,
// wrong keys, no keys, an unreachable endpoint.
func failingStores(t *testing.T, bucket string) []failingStore {
	t.Helper()
	with := func(edit func(*s3.Config)) *s3.Store {
		c := srv.Config(bucket)
		edit(&c)
		s, err := s3.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return []failingStore{
		{"missing bucket", with(func(c *s3.Config) { c.Bucket = "no-such-bucket-here" }), store.ErrNoBucket},
		{"wrong secret", with(func(c *s3.Config) { c.Credentials.SecretKey = "wrong" }), store.ErrAccess},
		{"unknown key id", with(func(c *s3.Config) { c.Credentials.AccessKey = "nobody" }), store.ErrAccess},
		{"anonymous", with(func(c *s3.Config) { c.Credentials = s3.Credentials{} }), store.ErrAccess},
		{"unreachable", with(func(c *s3.Config) { c.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", port) }), nil},
	}
}

// TestReadErrors: a GET that cannot be served says why, as the store's
// sentinel errors, and shows no secret.
func TestReadErrors(t *testing.T) {
	ctx := context.Background()
	st := srv.NewBucket(t)
	obj := testenv.Put(t, st, "d/k", []byte("some bytes"))
	missing := obj
	missing.Key = "d/missing"
	type readCase struct {
		failingStore
		obj store.Object
	}
	cases := []readCase{{failingStore{"missing key", st, store.ErrNotExist}, missing}}
	for _, f := range failingStores(t, st.Bucket()) {
		cases = append(cases, readCase{f, obj})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc, err := c.st.ReadRange(ctx, c.obj, 0, 4)
			if err == nil {
				rc.Close()
			}
			if err == nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if strings.Contains(err.Error(), "wrong") || strings.Contains(err.Error(), srv.Config("").Credentials.SecretKey) {
				t.Fatalf("the error shows a secret: %v", err)
			}
			t.Log(err)
		})
	}
}
