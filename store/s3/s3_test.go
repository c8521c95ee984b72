package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

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
	if err := st.Check(ctx, ""); err != nil {
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

// TestVirtualHosted reads a bucket the way a mount of s3://bucket on AWS
// reads it: with the bucket in the host name (virtual-hosted requests,
// what path-style "auto" means for AWS endpoints), at the regional host or,
// when asked, the dual-stack one, from a server that takes the bucket from
// that host alone. Dial routes AWS's host names to it; every connection
// after the bucket is made must go to the bucket's host.
func TestVirtualHosted(t *testing.T) {
	for _, tc := range []struct {
		dualStack bool
		domain    string
	}{
		{false, "s3.us-east-1.amazonaws.com"},
		{true, "s3.dualstack.us-east-1.amazonaws.com"},
	} {
		t.Run(tc.domain, func(t *testing.T) { testVirtualHosted(t, tc.dualStack, tc.domain) })
	}
}

func testVirtualHosted(t *testing.T, dualStack bool, domain string) {
	vs, err := testenv.Start("--virtual-domain", domain)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vs.Stop)
	var mu sync.Mutex
	dialed := map[string]int{}
	cfg := vs.Config("vbucket")
	cfg.Endpoint, cfg.PathStyle, cfg.DualStack = "http://s3.amazonaws.com", false, dualStack
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed[addr]++
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, vs.Addr)
	}
	st, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := st.MakeBucket(ctx); err != nil { // minio-go makes it with a path-style request
		t.Fatal(err)
	}
	mu.Lock()
	clear(dialed)
	mu.Unlock()
	keys := []string{"train/a b/ünï.jpg", "train/plain.jpg", "train/q?x#y"}
	objs := map[string]store.Object{}
	for i, k := range keys {
		objs[k] = testenv.Put(t, st, k, bytes.Repeat([]byte{byte('a' + i)}, 1000+i))
	}
	if err := st.Check(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var listed []string
	if err := st.List(ctx, "train/", true, func(o store.Object) error { listed = append(listed, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if sort.Strings(listed); strings.Join(listed, ",") != strings.Join(keys, ",") {
		t.Fatalf("listed %q, want %q", listed, keys)
	}
	for i, k := range keys {
		if got, err := st.Stat(ctx, k); err != nil || got.Size != objs[k].Size {
			t.Fatalf("stat %q: %+v, %v", k, got, err)
		}
		rc, err := st.ReadRange(ctx, objs[k], 10, 100)
		if err != nil {
			t.Fatalf("read %q: %v", k, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{byte('a' + i)}, 100)) {
			t.Fatalf("read %q: %d bytes, %v", k, len(b), err)
		}
	}
	if _, err := os.Stat(filepath.Join(vs.Dir, "vbucket", "train", "plain.jpg")); err != nil {
		t.Errorf("the server did not store the object in bucket vbucket: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for addr := range dialed {
		if !strings.HasPrefix(addr, "vbucket."+domain+":") {
			t.Errorf("dialed %s: want the bucket's own host, vbucket.%s (all dialed: %v)", addr, domain, dialed)
		}
	}
	if len(dialed) == 0 {
		t.Error("nothing dialed")
	}
}

// TestCheckLeavesNoLister: Check reads the listing's first answer only;
// minio-go's lister, cancelled with more answers in hand, sends the
// cancel's error too and waits for a reader for good unless the channel is
// drained. Many Checks at once on a bucket of several objects (so that a
// lister is often ahead of its reader) leave no lister behind.
func TestCheckLeavesNoLister(t *testing.T) {
	st := srv.NewBucket(t)
	for i := range 3 {
		testenv.Put(t, st, fmt.Sprintf("k%d", i), []byte("x"))
	}
	var g errgroup.Group
	g.SetLimit(16)
	for range 200 {
		g.Go(func() error { return st.Check(context.Background(), "") })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	listers := func() int {
		buf := make([]byte, 8<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "minio-go/v7.(*Client).ListObjects.func1(")
	}
	deadline := time.Now().Add(2 * time.Second)
	for listers() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := listers(); n > 0 {
		t.Fatalf("%d listers left behind by Check", n)
	}
}
