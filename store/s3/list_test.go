package s3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
	"github.com/dataccel/dataccel/store/s3"
)

// listCounter is a reverse proxy in front of the server that counts LIST
// requests and the entries (keys and common prefixes) their answers hold.
func listCounter(t *testing.T) (endpoint string, lists, entries *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	lists, entries = new(atomic.Int64), new(atomic.Int64)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if !resp.Request.URL.Query().Has("list-type") {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		resp.Body.Close()
		entries.Add(int64(bytes.Count(body, []byte("<Key>")) + bytes.Count(body, []byte("<CommonPrefixes>"))))
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return nil
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Query().Has("list-type") {
			lists.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, lists, entries
}

// TestSplitListing lists directories named in several styles with small
// pages, page after page and split into parallel ranges, and wants the same
// entries, each once, from both, and a bounded number of extra requests.
func TestSplitListing(t *testing.T) {
	hexName := func(i int) string { return fmt.Sprintf("%x.bin", sha256.Sum256([]byte{byte(i), byte(i >> 8)}))[:16] }
	cases := []struct {
		name string
		key  func(i int) string // under the listed directory
		n    int
	}{
		{"decimal", func(i int) string { return fmt.Sprintf("n01440764_%d.JPEG", i) }, 400},
		{"zero-padded", func(i int) string { return fmt.Sprintf("img_%06d.jpg", i) }, 400},
		{"hex", hexName, 300},
		{"upper-case", func(i int) string { return fmt.Sprintf("%c%c-%d", 'A'+i%26, 'A'+i/26%26, i) }, 300},
		// objects and sub-directories side by side: common prefixes come
		// after a page's objects, past a range's bound or not
		{"objects and prefixes", func(i int) string {
			if i%3 == 0 {
				return fmt.Sprintf("s%03d/x", i)
			}
			return fmt.Sprintf("s%03d", i)
		}, 300},
		{"a few", func(i int) string { return fmt.Sprintf("f%d", i) }, 15},
	}
	ctx := context.Background()
	base := srv.NewBucket(t)
	var g errgroup.Group
	g.SetLimit(16)
	for _, c := range cases {
		for i := range c.n {
			g.Go(func() error {
				_, err := testenv.PutBytes(ctx, base, "d-"+c.name+"/"+c.key(i), []byte("x"))
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	endpoint, lists, sent := listCounter(t)
	open := func(parallel int) *s3.Store {
		cfg := srv.Config(base.Bucket())
		cfg.Endpoint, cfg.ListPage, cfg.ListParallel = endpoint, 10, parallel
		st, err := s3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	list := func(st *s3.Store, prefix string, recursive bool) (got []string, reqs, entries int64) {
		t.Helper()
		reqs, entries = lists.Load(), sent.Load()
		got = listed(t, st, prefix, recursive)
		return got, lists.Load() - reqs, sent.Load() - entries
	}
	serial, parallel := open(1), open(8)
	for _, c := range cases {
		for _, recursive := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/recursive=%v", c.name, recursive), func(t *testing.T) {
				prefix := "d-" + c.name + "/"
				want, pages, _ := list(serial, prefix, recursive)
				got, reqs, entries := list(parallel, prefix, recursive)
				if len(want) == 0 {
					t.Fatal("the serial listing is empty")
				}
				if !slices.Equal(got, want) {
					t.Fatalf("split listing: %d entries, serial %d\nonly split: %v\nonly serial: %v",
						len(got), len(want), minus(got, want), minus(want, got))
				}
				// Each of at most 32 ranges needs its pages plus at
				// most two: a partly filled first and last page (or one
				// empty page), never a page past its bound.
				if limit := pages + 2*32; reqs > limit {
					t.Errorf("split listing took %d LIST requests, serial %d: want at most %d", reqs, pages, limit)
				}
				t.Logf("%d entries: %d requests split (%d entries sent), %d serial", len(got), reqs, entries, pages)
			})
		}
	}
}

// TestSplitListingOfALargeDirectory lists 3,000 keys in pages of 10, as a
// directory of 300,000 is listed in pages of 1,000. With numbered names,
// the first page's cut left its last range everything past f0000090:
// listed page after page, 210 of them in a row once 32 ranges had been
// started, short ones included (hex names 170, ImageNet's 112). The pages
// in a row (those of one start-after) must stay few, and the requests
// about the pages.
func TestSplitListingOfALargeDirectory(t *testing.T) {
	base := srv.NewBucket(t)
	const n = 3000
	for _, c := range []struct {
		name string
		key  func(i int) string
	}{
		{"numbered", func(i int) string { return fmt.Sprintf("f%07d.jpg", i) }},
		{"hex", func(i int) string { return fmt.Sprintf("%x", sha256.Sum256([]byte{byte(i), byte(i >> 8)}))[:20] }},
		{"imagenet", func(i int) string { return fmt.Sprintf("n01440764_%d.JPEG", i) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.name + "/"
			want := putNamed(t, base, n, func(i int) string { return dir + c.key(i) })
			u, err := url.Parse(srv.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			pages := map[string]int{} // LIST requests by start-after: one range's pages
			rp := httputil.NewSingleHostReverseProxy(u)
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if q := r.URL.Query(); r.Method == http.MethodGet && q.Has("list-type") {
					mu.Lock()
					pages[q.Get("start-after")]++
					mu.Unlock()
				}
				rp.ServeHTTP(w, r)
			}))
			t.Cleanup(ts.Close)
			cfg := srv.Config(base.Bucket())
			cfg.Endpoint, cfg.ListPage, cfg.ListParallel = ts.URL, 10, 8
			st, err := s3.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got := listed(t, st, dir, false)
			took := time.Since(start)
			if !slices.Equal(got, want) {
				t.Fatalf("listed %d keys, want %d\nmissing: %v\nextra: %v", len(got), len(want), minus(want, got), minus(got, want))
			}
			mu.Lock()
			defer mu.Unlock()
			longest, reqs := "", 0
			for after, k := range pages {
				reqs += k
				if k > pages[longest] {
					longest = after
				}
			}
			t.Logf("%d ranges, %d LIST requests for %d pages in %v; the longest, after %q, %d pages", len(pages), reqs, n/10, took, longest, pages[longest])
			if pages[longest] > 30 {
				t.Errorf("the range after %q took %d pages in a row, want at most 30", longest, pages[longest])
			}
			if limit := n/10*8/5 + 2*32; reqs > limit {
				t.Errorf("%d LIST requests for %d pages, want at most %d", reqs, n/10, limit)
			}
		})
	}
}

// TestSplitListingEmptyTruncatedPage: a server may answer a range's first
// page with no key, truncated, and a continuation token. The range must
// list on from the token, not cut itself by guessing from no keys (a
// division by the page's length crashed the mount).
func TestSplitListingEmptyTruncatedPage(t *testing.T) {
	base := srv.NewBucket(t)
	want := putImageNetNames(t, base, 400)
	contents := regexp.MustCompile(`(?s)<Contents>.*?</Contents>`)
	var emptied atomic.Int64
	st := firstPagesRewritten(t, base, 10, func(body []byte) []byte {
		if !bytes.Contains(body, []byte("<IsTruncated>true</IsTruncated>")) {
			return body
		}
		emptied.Add(1)
		return contents.ReplaceAll(body, nil)
	})
	got := listed(t, st, "d/", false)
	if emptied.Load() == 0 {
		t.Fatal("no range's first page was truncated: the test proves nothing")
	}
	// The emptied pages' keys are gone (the server said so); nothing else.
	if extra := minus(got, want); len(extra) > 0 || len(got) < len(want)-10*int(emptied.Load()) {
		t.Fatalf("listed %d of %d keys with %d pages emptied; extra: %v", len(got), len(want), emptied.Load(), extra)
	}
}

// firstPagesRewritten returns a store (pages of page keys, 8 LISTs in
// flight) whose LISTs go through a proxy that hands the body of each
// range's first page (one with a start-after and no continuation token)
// to rewrite and sends on what it returns.
func firstPagesRewritten(t *testing.T, base *s3.Store, page int, rewrite func(body []byte) []byte) *s3.Store {
	t.Helper()
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		q := resp.Request.URL.Query()
		if !q.Has("list-type") || q.Get("start-after") == "" || q.Get("continuation-token") != "" {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		body = rewrite(body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Del("Content-Length")
		return nil
	}
	ts := httptest.NewServer(rp)
	t.Cleanup(ts.Close)
	cfg := srv.Config(base.Bucket())
	cfg.Endpoint, cfg.ListPage, cfg.ListParallel = ts.URL, page, 8
	st, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSplitListingStopsNearBounds lists 1,000 keys named as ImageNet's
// (n01440764_0 to _999, not zero-padded) in pages of 100, as a directory of
// 10,000 such files is listed in pages of 1,000. The split cuts it into 8
// ranges of 111 keys; a range's second page used to be full, 11 keys in the
// range and 89 past it, which a server reads for nothing (versitygw reads
// each key's file metadata). It asks for about the 11 now.
func TestSplitListingStopsNearBounds(t *testing.T) {
	base := srv.NewBucket(t)
	const n = 1000
	want := putImageNetNames(t, base, n)
	endpoint, lists, sent := listCounter(t)
	cfg := srv.Config(base.Bucket())
	cfg.Endpoint, cfg.ListPage, cfg.ListParallel = endpoint, 100, 8
	st, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := listed(t, st, "d/", false)
	if !slices.Equal(got, want) {
		t.Fatalf("listed %d keys, want %d\nmissing: %v\nextra: %v", len(got), len(want), minus(want, got), minus(got, want))
	}
	if limit := int64(n + n/4); sent.Load() > limit {
		t.Errorf("the server sent %d keys in %d pages to list %d: want at most %d", sent.Load(), lists.Load(), n, limit)
	}
	t.Logf("%d keys: the server sent %d in %d pages", n, sent.Load(), lists.Load())
}

// TestListStartAfterIgnored: a server that answers a range's first page
// with keys at or before its start-after (one that ignores it) does not
// make a split listing hand a key on twice: the range drops them.
func TestListStartAfterIgnored(t *testing.T) {
	base := srv.NewBucket(t)
	want := putImageNetNames(t, base, 1000) // a listing that splits
	var injected atomic.Int64
	st := firstPagesRewritten(t, base, 100, func(body []byte) []byte {
		// The page's first entry again, as the listing's first key: one at
		// or before every range's start-after.
		i, j := bytes.Index(body, []byte("<Contents>")), bytes.Index(body, []byte("</Contents>"))
		if i < 0 || j < i {
			return body
		}
		entry := body[i : j+len("</Contents>")]
		k0, k1 := bytes.Index(entry, []byte("<Key>")), bytes.Index(entry, []byte("</Key>"))
		early := slices.Concat(entry[:k0], []byte("<Key>"+want[0]), entry[k1:])
		injected.Add(1)
		return slices.Concat(body[:i], early, body[i:])
	})
	got := listed(t, st, "d/", false)
	if injected.Load() == 0 {
		t.Fatal("no range's page had a key to add: the listing was not split")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %d keys, want %d once each (%d pages given an early key)", len(got), len(want), injected.Load())
	}
}

// putImageNetNames puts n one-byte objects under d/ named as ImageNet's
// files (n01440764_0.JPEG on, not zero-padded) and returns their keys
// sorted.
func putImageNetNames(t *testing.T, base *s3.Store, n int) []string {
	t.Helper()
	return putNamed(t, base, n, func(i int) string { return fmt.Sprintf("d/n01440764_%d.JPEG", i) })
}

// putNamed uploads n one-byte objects, object i under key(i), 16 at a
// time, and returns their keys sorted.
func putNamed(t *testing.T, base *s3.Store, n int, key func(i int) string) []string {
	t.Helper()
	var want []string
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		k := key(i)
		want = append(want, k)
		g.Go(func() error {
			_, err := testenv.PutBytes(context.Background(), base, k, []byte("x"))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	return want
}

// listed lists prefix and returns the keys sorted, common prefixes marked
// " (dir)".
func listed(t *testing.T, st *s3.Store, prefix string, recursive bool) []string {
	t.Helper()
	var got []string
	err := st.List(context.Background(), prefix, recursive, func(o store.Object) error {
		if o.IsPrefix {
			got = append(got, o.Key+" (dir)")
		} else {
			got = append(got, o.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if _, found := slices.BinarySearch(b, s); !found {
			out = append(out, s)
		}
	}
	return out
}

// TestListErrors: a listing that cannot be read says why, as the store's
// sentinel errors.
func TestListErrors(t *testing.T) {
	ctx := context.Background()
	st := srv.NewBucket(t)
	testenv.Put(t, st, "d/k", []byte("x"))
	for _, c := range failingStores(t, st.Bucket()) {
		t.Run(c.name, func(t *testing.T) {
			err := c.st.List(ctx, "d/", false, func(store.Object) error { return nil })
			if err == nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if strings.Contains(err.Error(), "X-Amz-") {
				t.Fatalf("the error shows the signed query: %v", err)
			}
			t.Log(err)
		})
	}
}
