package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/dataccel/dataccel/store"
)

// TestSignExample: the GET Object example of the SigV4 documentation
// (header-based authentication, first 10 bytes of examplebucket/test.txt,
// empty payload hash).
func TestSignExample(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "https://examplebucket.s3.amazonaws.com/test.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	v := credentials.Value{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
	const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	g := new(getter)
	for range 2 { // the second time with the cached signing key
		g.sign(req, v, "us-east-1", "/test.txt", "", "bytes=0-9", emptyHash, time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC))
		auth := req.Header.Get("Authorization")
		for _, want := range []string{
			"Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request",
			"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date",
			"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
		} {
			if !strings.Contains(auth, want) {
				t.Fatalf("Authorization %q lacks %q", auth, want)
			}
		}
	}
}

// TestGetAnswers: a server that ignores Range (a 200 with the whole object
// for a read past offset 0) or If-Match (another ETag) never hands out
// wrong bytes; a 200 for a read from offset 0 is the object's start.
func TestGetAnswers(t *testing.T) {
	const object = "0123456789"
	var etag atomic.Value // the handler runs on the server's goroutines
	etag.Store("e1")
	st := storeAt(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" || r.URL.Path != "/bkt/k" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.Header().Set("ETag", `"`+etag.Load().(string)+`"`)
		io.WriteString(w, object) // 200, Range ignored
	})
	ctx := context.Background()
	obj := store.Object{Key: "k", Size: int64(len(object)), ETag: "e1"}
	// Refused for good: the same request would get the same answer, and
	// the retry layer would send it until --io-timeout.
	if rc, err := st.ReadRange(ctx, obj, 3, 4); !errors.Is(err, store.ErrRefused) {
		if err == nil {
			rc.Close()
		}
		t.Fatalf("a 200 answer to a read at offset 3: %v, want ErrRefused", err)
	}
	rc, err := st.ReadRange(ctx, obj, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, err = io.ReadFull(rc, b)
	rc.Close()
	if err != nil || string(b) != object[:4] {
		t.Fatalf("read from 0: %q, %v", b, err)
	}
	etag.Store("e2")
	if rc, err := st.ReadRange(ctx, obj, 0, 4); !errors.Is(err, store.ErrChanged) {
		if err == nil {
			rc.Close()
		}
		t.Fatalf("another ETag: %v, want ErrChanged", err)
	}
}

// TestWholeObjectGetHasNoRange: a read of a whole object is a plain GET
// (servers may send those with sendfile and copy any range), a read of a
// part carries its Range.
func TestWholeObjectGetHasNoRange(t *testing.T) {
	const object = "0123456789"
	ranges := make(chan string, 8)
	st := storeAt(t, func(w http.ResponseWriter, r *http.Request) {
		ranges <- r.Header.Get("Range")
		w.Header().Set("ETag", `"e1"`)
		http.ServeContent(w, r, "k", time.Time{}, strings.NewReader(object))
	})
	obj := store.Object{Key: "k", Size: int64(len(object)), ETag: "e1"}
	for _, tc := range []struct {
		off, n    int64
		wantRange string
	}{
		{0, 10, ""},
		{0, 4, "bytes=0-3"},
		{3, 7, "bytes=3-9"},
		{3, -1, "bytes=3-"},
	} {
		rc, err := st.ReadRange(context.Background(), obj, tc.off, tc.n)
		if err != nil {
			t.Fatalf("ReadRange(%d, %d): %v", tc.off, tc.n, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		end := int64(len(object))
		if tc.n >= 0 {
			end = tc.off + tc.n
		}
		if err != nil || string(b) != object[tc.off:end] {
			t.Errorf("ReadRange(%d, %d) = %q, %v; want %q", tc.off, tc.n, b, err, object[tc.off:end])
		}
		if got := <-ranges; got != tc.wantRange {
			t.Errorf("ReadRange(%d, %d) sent Range %q, want %q", tc.off, tc.n, got, tc.wantRange)
		}
	}
}

// TestEncodePath: encodePath encodes every path as s3utils.EncodePath does.
func TestEncodePath(t *testing.T) {
	for _, p := range []string{
		"/bkt/train/n01440764/n01440764_10026.JPEG", "/", "", "/bkt/a b", "/bkt/a+b", "/bkt/50%",
		"/bkt/ä/ß", "/bkt/x:y", "/bkt/q?x=1", "/bkt/h#1", "/bkt/~user/.hidden_-", "/bkt/日本", "/bkt/\xff",
	} {
		if got, want := encodePath(p), s3utils.EncodePath(p); got != want {
			t.Errorf("encodePath(%q) = %q, want %q", p, got, want)
		}
	}
}

// TestGetChecksContentRange: a 206 answer is taken only with the range
// asked for in its Content-Range; a proxy answering another range (or none)
// is an error, never other bytes of the object read as these.
func TestGetChecksContentRange(t *testing.T) {
	const object = "0123456789"
	var answer atomic.Value // the Content-Range the server sends; "" for the true one
	st := storeAt(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"e1"`)
		cr, _ := answer.Load().(string)
		if cr == "" {
			http.ServeContent(w, r, "k", time.Time{}, strings.NewReader(object))
			return
		}
		if cr != "none" {
			w.Header().Set("Content-Range", cr)
		}
		w.WriteHeader(http.StatusPartialContent)
		io.WriteString(w, object[:4])
	})
	obj := store.Object{Key: "k", Size: int64(len(object)), ETag: "e1"}
	for _, tc := range []struct {
		answer  string
		off, n  int64
		wantErr bool
	}{
		{"", 3, 4, false},  // the true range
		{"", 6, -1, false}, // to the end
		{"", 6, 10, false}, // past the end: up to its last byte
		{"bytes 0-3/10", 3, 4, true},
		{"bytes 3-7/10", 3, 4, true},
		{"none", 3, 4, true},
		{"bytes 3-x/10", 3, 4, true},
	} {
		answer.Store(tc.answer)
		rc, err := st.ReadRange(context.Background(), obj, tc.off, tc.n)
		if err == nil {
			rc.Close()
		}
		if (err != nil) != tc.wantErr {
			t.Errorf("answer %q to [%d,+%d): err %v, want an error: %v", tc.answer, tc.off, tc.n, err, tc.wantErr)
		}
	}
}

// TestGetWithoutETag: an object listed without an ETag is read pinned to
// its time (If-Unmodified-Since the second after it) and size: a later version, or one of another size, is ErrChanged, never its
// bytes; an ETag the GET answer carries is not taken for a change.
func TestGetWithoutETag(t *testing.T) {
	listed := time.Date(2026, 12, 3, 12, 0, 0, 300e6, time.UTC)
	type version struct {
		body string
		mod  time.Time
		etag string
	}
	var cur atomic.Value
	st := storeAt(t, func(w http.ResponseWriter, r *http.Request) {
		v := cur.Load().(version)
		if v.etag != "" {
			w.Header().Set("ETag", `"`+v.etag+`"`)
		}
		http.ServeContent(w, r, "k", v.mod, strings.NewReader(v.body)) // honours If-Unmodified-Since
	})
	obj := object("k", 10, "", listed)
	if !store.IsMadeETag(obj.ETag) {
		t.Fatalf("object listed without an ETag got %q", obj.ETag)
	}
	for _, tc := range []struct {
		name    string
		v       version
		changed bool
	}{
		{"as listed", version{"0123456789", listed, ""}, false},
		{"as listed, with an ETag on the GET", version{"0123456789", listed, "e1"}, false},
		{"written later", version{"abcdefghij", listed.Add(2 * time.Second), ""}, true},
		{"another size", version{"0123", listed, ""}, true},
	} {
		cur.Store(tc.v)
		for _, r := range []struct{ off, n int64 }{{0, 10}, {2, 4}} {
			rc, err := st.ReadRange(context.Background(), obj, r.off, r.n)
			var b []byte
			if err == nil {
				b, err = io.ReadAll(rc)
				rc.Close()
			}
			switch {
			case tc.changed && !errors.Is(err, store.ErrChanged):
				t.Errorf("%s [%d,+%d): %q, %v; want ErrChanged", tc.name, r.off, r.n, b, err)
			case !tc.changed && (err != nil || string(b) != tc.v.body[r.off:r.off+r.n]):
				t.Errorf("%s [%d,+%d): %q, %v", tc.name, r.off, r.n, b, err)
			}
		}
	}
}

// storeAt returns a store (path style, signed requests) of the bucket
// "bkt" at a test server that answers with h.
func storeAt(t *testing.T, h http.HandlerFunc) *Store {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	st, err := New(Config{Endpoint: srv.URL, Bucket: "bkt", Region: "us-east-1", PathStyle: true,
		Credentials: Credentials{AccessKey: "id", SecretKey: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGetErrorAnswers: an S3 error answer becomes the store's sentinel
// error, and throttling or a timeout on the server's side stays retryable
// whatever its status (S3 sends RequestTimeout as a 400).
func TestGetErrorAnswers(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		want   error // nil: retryable
	}{
		{http.StatusNotFound, "NoSuchKey", store.ErrNotExist},
		{http.StatusForbidden, "AccessDenied", store.ErrAccess},
		{http.StatusPreconditionFailed, "PreconditionFailed", store.ErrChanged},
		{http.StatusBadRequest, "InvalidArgument", store.ErrRefused},
		{http.StatusBadRequest, "RequestTimeout", nil},
		{http.StatusBadRequest, "Throttling", nil},
		{http.StatusBadRequest, "ThrottlingException", nil},
		{http.StatusTooManyRequests, "RequestThrottled", nil},
		{http.StatusServiceUnavailable, "SlowDown", nil},
		{http.StatusInternalServerError, "InternalError", nil},
	} {
		t.Run(tc.code, func(t *testing.T) {
			st := storeAt(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>m</Message></Error>`, tc.code)
			})
			_, err := st.ReadRange(t.Context(), store.Object{Key: "k", Size: 10, ETag: "e"}, 0, 4)
			switch {
			case err == nil:
				t.Fatal("no error")
			case tc.want == nil && !store.Retryable(err):
				t.Fatalf("%v: not retryable", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

// TestGetCancelledMidBody: a read of a body the caller cancels fails with
// the cancel (context.Canceled), directly and through the retry layer,
// which then gives up at once, not with the "i/o timeout" of the deadline
// that cut the connection.
func TestGetCancelledMidBody(t *testing.T) {
	st := storeAt(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"e1"`)
		w.Header().Set("Content-Length", "20")
		io.WriteString(w, "0123456789")
		w.(http.Flusher).Flush()
		select { // the rest never comes while the test runs
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	})
	for _, s := range []store.Store{st, store.NewRetrying(st, store.RetryOptions{IOTimeout: time.Minute})} {
		ctx, cancel := context.WithCancel(t.Context())
		rc, err := s.ReadRange(ctx, store.Object{Key: "k", Size: 20, ETag: "e1"}, 0, 20)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err = io.ReadAll(rc)
		rc.Close()
		if !errors.Is(err, context.Canceled) || time.Since(start) > 30*time.Second {
			t.Fatalf("%T: %v after %v, want context.Canceled", s, err, time.Since(start))
		}
	}
}

// lastingKeys hands out keys that say they last an hour, counting fetches.
type lastingKeys struct{ fetches atomic.Int64 }

func (k *lastingKeys) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	k.fetches.Add(1)
	return credentials.Value{AccessKeyID: "id", SecretAccessKey: "secret", SessionToken: "t", Expiration: time.Now().Add(time.Hour)}, nil
}
func (k *lastingKeys) Retrieve() (credentials.Value, error) { return k.RetrieveWithCredContext(nil) }
func (k *lastingKeys) IsExpired() bool                      { return false }

// TestExpiredTokenRenews: a store answered "ExpiredToken" while its keys'
// provider says they last (clock skew, a session ended early) drops them:
// the retry fetches new keys and the read succeeds. Keys that cannot be
// renewed (static keys, or a provider that hands out the dropped keys
// again) fail with ErrAccess at once, or after one renewal.
func TestExpiredTokenRenews(t *testing.T) {
	var gets, expiring atomic.Int64
	expiring.Store(1)
	h := func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) <= expiring.Load() {
			writeExpiredToken(w)
			return
		}
		w.Header().Set("ETag", `"e"`)
		io.WriteString(w, "0123456789")
	}
	obj := store.Object{Key: "k", Size: 10, ETag: "e"}

	srv := httptest.NewServer(http.HandlerFunc(h))
	t.Cleanup(srv.Close)
	renewing := func(keys *lastingKeys) store.Store {
		st, err := New(Config{Endpoint: srv.URL, Bucket: "bkt", Region: "us-east-1", PathStyle: true, Provider: keys})
		if err != nil {
			t.Fatal(err)
		}
		return store.NewRetrying(st, store.RetryOptions{IOTimeout: 30 * time.Second, BaseDelay: time.Millisecond})
	}
	keys := &lastingKeys{}
	rc, err := renewing(keys).ReadRange(t.Context(), obj, 0, -1)
	if err != nil {
		t.Fatalf("read after an ExpiredToken answer: %v", err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "0123456789" || keys.fetches.Load() != 2 {
		t.Fatalf("read %q with %d fetches of keys; want the object and 2", b, keys.fetches.Load())
	}

	gets.Store(0)
	expiring.Store(1 << 30) // the same keys stay expired
	if _, err := renewing(&lastingKeys{}).ReadRange(t.Context(), obj, 0, -1); !errors.Is(err, store.ErrAccess) || gets.Load() != 2 {
		t.Fatalf("keys the provider cannot renew: %v after %d GETs, want ErrAccess after 2", err, gets.Load())
	}

	gets.Store(0)
	static := storeAt(t, h)
	if _, err := store.NewRetrying(static, store.RetryOptions{IOTimeout: 30 * time.Second}).ReadRange(t.Context(), obj, 0, -1); !errors.Is(err, store.ErrAccess) || gets.Load() != 1 {
		t.Fatalf("static keys: %v after %d GETs, want ErrAccess after 1", err, gets.Load())
	}
}

// twoKeys hands out K1 at its first fetch and K2 at every later one.
type twoKeys struct{ fetches atomic.Int64 }

func (k *twoKeys) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	id := "K2"
	if k.fetches.Add(1) == 1 {
		id = "K1"
	}
	return credentials.Value{AccessKeyID: id, SecretAccessKey: "secret-" + id, SessionToken: "t-" + id, Expiration: time.Now().Add(time.Hour)}, nil
}
func (k *twoKeys) Retrieve() (credentials.Value, error) { return k.RetrieveWithCredContext(nil) }
func (k *twoKeys) IsExpired() bool                      { return false }

// TestExpiredTokenLateAnswers: answers "ExpiredToken" to requests signed
// with keys already replaced drop nothing and stay retryable, however late
// they come. (A slow answer to the old keys dropped the new ones, which
// worked; when the provider handed those out again, the next late answer
// failed for good with access denied.)
func TestExpiredTokenLateAnswers(t *testing.T) {
	arrived := make(chan struct{}, 3)
	all := make(chan struct{})
	var once sync.Once
	h := func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Authorization"), "Credential=K1/") {
			w.Header().Set("ETag", `"e"`)
			io.WriteString(w, "x")
			return
		}
		// The three reads were all signed with K1: answer one at once,
		// the others past the second the first drop is trusted for.
		arrived <- struct{}{}
		if len(arrived) == 3 {
			once.Do(func() { close(all) })
		}
		<-all
		switch {
		case strings.HasSuffix(r.URL.Path, "/slow1"):
			time.Sleep(1200 * time.Millisecond)
		case strings.HasSuffix(r.URL.Path, "/slow2"):
			time.Sleep(2400 * time.Millisecond)
		}
		writeExpiredToken(w)
	}
	srv := httptest.NewServer(http.HandlerFunc(h))
	t.Cleanup(srv.Close)
	keys := &twoKeys{}
	st, err := New(Config{Endpoint: srv.URL, Bucket: "bkt", Region: "us-east-1", PathStyle: true, Provider: keys})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, key := range []string{"fast", "slow1", "slow2"} {
		wg.Go(func() {
			rc, err := st.ReadRange(t.Context(), store.Object{Key: key, Size: 1, ETag: "e"}, 0, 1)
			if err == nil {
				rc.Close()
			}
			mu.Lock()
			errs[key] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for key, err := range errs {
		if err == nil || !store.Retryable(err) || errors.Is(err, store.ErrAccess) {
			t.Errorf("%s, signed with the replaced keys: %v; want a retryable error", key, err)
		}
	}
	if n := keys.fetches.Load(); n != 2 {
		t.Errorf("%d fetches of keys, want 2: the late answers dropped the new keys", n)
	}
	rc, err := st.ReadRange(t.Context(), store.Object{Key: "after", Size: 1, ETag: "e"}, 0, 1)
	if err != nil {
		t.Fatalf("a read with the new keys: %v", err)
	}
	rc.Close()
}

// slowRenewal hands out K1 at its first fetch; later fetches last until
// their context ends (a slow STS, a hung instance profile).
type slowRenewal struct{ fetches atomic.Int64 }

func (k *slowRenewal) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	if k.fetches.Add(1) > 1 {
		<-cc.Context.Done()
		return credentials.Value{}, cc.Context.Err()
	}
	// Expired by the time the late answer asks for new keys: the renewal
	// then gets its whole fetch time (10 s), not the second it gets while
	// the keys are valid.
	return credentials.Value{AccessKeyID: "K1", SecretAccessKey: "s", SessionToken: "t", Expiration: time.Now().Add(200 * time.Millisecond)}, nil
}
func (k *slowRenewal) Retrieve() (credentials.Value, error) { return k.RetrieveWithCredContext(nil) }
func (k *slowRenewal) IsExpired() bool                      { return false }

// TestExpiredTokenRenewalHeedsTheRequest: the fetch of new keys that an
// ExpiredToken answer starts ends with the request's context (a cancelled
// read, a LIST past its deadline), not after the renewal's own 10 s.
func TestExpiredTokenRenewalHeedsTheRequest(t *testing.T) {
	var arrived sync.WaitGroup
	arrived.Add(2)
	h := func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // both signed with K1: the first answer drops it, the second fetches anew
		if strings.HasSuffix(r.URL.Path, "/late") {
			time.Sleep(300 * time.Millisecond)
		}
		writeExpiredToken(w)
	}
	srv := httptest.NewServer(http.HandlerFunc(h))
	t.Cleanup(srv.Close)
	st, err := New(Config{Endpoint: srv.URL, Bucket: "bkt", Region: "us-east-1", PathStyle: true, Provider: &slowRenewal{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, key := range []string{"first", "late"} {
		wg.Go(func() {
			if rc, err := st.ReadRange(ctx, store.Object{Key: key, Size: 1, ETag: "e"}, 0, 1); err == nil {
				rc.Close()
				t.Errorf("%s: read with expired keys", key)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("reads with a deadline of 500ms took %s: the renewal ignored their context", took)
	}
}

// writeExpiredToken answers as S3 does a request signed with expired keys.
func writeExpiredToken(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusBadRequest)
	io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>`)
}
