package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
)

var srv *testenv.Server

func TestMain(m *testing.M) { os.Exit(testenv.Run(m, &srv)) }

// faultSetup uploads n objects and returns a retrying store that reaches
// the server through a fault proxy.
func faultSetup(t *testing.T, n, size int, opts store.RetryOptions) (*testenv.FaultProxy, *store.Retrying, map[string][]byte, []store.Object) {
	t.Helper()
	direct := srv.NewBucket(t)
	r := rand.New(rand.NewPCG(7, uint64(n)))
	data := map[string][]byte{}
	var objs []store.Object
	for i := range n {
		b := make([]byte, size/2+r.IntN(size))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		k := fmt.Sprintf("f/%04d", i)
		data[k] = b
		objs = append(objs, testenv.Put(t, direct, k, b))
	}
	fp, st := srv.BehindFaultProxy(t, direct)
	return fp, store.NewRetrying(st, opts), data, objs
}

func readAll(ctx context.Context, st store.Store, objs []store.Object, data map[string][]byte) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, o := range objs {
		g.Go(func() error {
			rc, err := st.ReadRange(ctx, o, 0, o.Size)
			if err != nil {
				return err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err != nil {
				return fmt.Errorf("%s: %w", o.Key, err)
			}
			if !bytes.Equal(b, data[o.Key]) {
				return fmt.Errorf("%s: wrong bytes (%d of %d)", o.Key, len(b), len(data[o.Key]))
			}
			return nil
		})
	}
	return g.Wait()
}

// TestFaults: for each fault, a parallel read of every object completes
// byte-exact, and the retry counter matches the faults injected.
func TestFaults(t *testing.T) {
	tests := []struct {
		fault testenv.Fault
		stall time.Duration
	}{
		{fault: testenv.SlowDown},
		{fault: testenv.InternalError},
		{fault: testenv.ResetMidBody},
		{fault: testenv.StallFirstByte, stall: 3 * time.Second},
		{fault: testenv.StallMidBody, stall: 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			stats := &store.RetryStats{}
			fp, st, data, objs := faultSetup(t, 150, 64<<10, store.RetryOptions{
				BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond,
				// Well above a healthy request on a loaded machine, well below the stalls.
				FirstByteTimeout: time.Second, ProgressTimeout: time.Second,
				Stats: stats,
			})
			fp.Add(testenv.Rule{Fault: tc.fault, Method: "GET", Every: 4, Stall: tc.stall})
			if err := readAll(context.Background(), st, objs, data); err != nil {
				t.Fatal(err)
			}
			inj := fp.Injected(tc.fault)
			if inj < 10 {
				t.Fatalf("only %d faults injected", inj)
			}
			// Every fault costs exactly one retry: a retried request may
			// itself be hit again (it is a new request), which is also one retry.
			if got := stats.Retries.Load(); got != inj {
				t.Fatalf("retries %d, faults injected %d", got, inj)
			}
			if tc.stall > 0 && stats.Timeouts.Load() != inj {
				t.Fatalf("timeouts %d, stalls injected %d", stats.Timeouts.Load(), inj)
			}
		})
	}
}

// TestEndpointDown: a server gone for longer than the io timeout fails the
// read within the bound; once it is back, new reads succeed.
func TestEndpointDown(t *testing.T) {
	stats := &store.RetryStats{}
	const ioTimeout = 2 * time.Second
	fp, st, data, objs := faultSetup(t, 3, 1<<10, store.RetryOptions{
		BaseDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond, IOTimeout: ioTimeout, Attempts: 1000, Stats: stats,
	})
	fp.SetDown(true)
	start := time.Now()
	_, err := st.ReadRange(context.Background(), objs[0], 0, -1)
	took := time.Since(start)
	if err == nil {
		t.Fatal("read succeeded with the server down")
	}
	if took > ioTimeout+time.Second {
		t.Fatalf("failed after %s, want within %s", took, ioTimeout)
	}
	if stats.GaveUp.Load() != 1 || fp.Refused() < 2 {
		t.Fatalf("gave up %d, refused %d", stats.GaveUp.Load(), fp.Refused())
	}
	fp.SetDown(false)
	if err := readAll(context.Background(), st, objs, data); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

// TestFinalErrors are not retried.
func TestFinalErrors(t *testing.T) {
	stats := &store.RetryStats{}
	_, st, _, objs := faultSetup(t, 1, 1<<10, store.RetryOptions{Stats: stats})
	if _, err := st.Stat(context.Background(), "missing"); !errors.Is(err, store.ErrNotExist) {
		t.Fatal(err)
	}
	stale := objs[0]
	stale.ETag = "0123456789abcdef0123456789abcdef"
	if _, err := st.ReadRange(context.Background(), stale, 0, -1); !errors.Is(err, store.ErrChanged) {
		t.Fatal(err)
	}
	if stats.Retries.Load() != 0 {
		t.Fatalf("%d retries of final errors", stats.Retries.Load())
	}
}

// backAt fails every Stat with a retryable error until its time comes.
type backAt struct {
	store.Store
	at time.Time
}

func (b backAt) Stat(ctx context.Context, key string) (store.Object, error) {
	if time.Now().Before(b.at) {
		return store.Object{}, errors.New("connection refused")
	}
	return store.Object{Key: key}, nil
}

// TestRetriesUntilIOTimeout: backoffs longer than the time left are cut to
// it, so the last attempt comes at the deadline and finds a store that came
// back before it (a long draw used to end the retries early).
func TestRetriesUntilIOTimeout(t *testing.T) {
	const ioTimeout = 300 * time.Millisecond
	st := store.NewRetrying(backAt{at: time.Now().Add(ioTimeout / 2)}, store.RetryOptions{
		BaseDelay: 10 * time.Second, MaxDelay: 10 * time.Second, IOTimeout: ioTimeout, Attempts: 1000,
	})
	start := time.Now()
	if _, err := st.Stat(context.Background(), "k"); err != nil {
		t.Fatalf("Stat of a store back within the io timeout: %v", err)
	}
	if took := time.Since(start); took > ioTimeout+time.Second {
		t.Errorf("Stat took %v, want about %v", took, ioTimeout)
	}
}

// TestStallsUntilIOTimeout: a server that stalls every request makes a
// stat or a read fail within the io timeout with an error that says so,
// never with the cancellation the watchdog used to cut each attempt: the
// caller did not cancel, and a reader told "interrupted" (EINTR) retries for
// ever.
func TestStallsUntilIOTimeout(t *testing.T) {
	tests := []struct {
		name string
		op   func(st store.Store, obj store.Object) error
	}{
		{"stat", func(st store.Store, obj store.Object) error {
			_, err := st.Stat(context.Background(), obj.Key)
			return err
		}},
		{"read", func(st store.Store, obj store.Object) error {
			rc, err := st.ReadRange(context.Background(), obj, 0, obj.Size)
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.ReadAll(rc)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stats := &store.RetryStats{}
			const ioTimeout = 2 * time.Second
			fp, st, _, objs := faultSetup(t, 1, 64<<10, store.RetryOptions{
				BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, IOTimeout: ioTimeout, Attempts: 1000,
				FirstByteTimeout: 300 * time.Millisecond, ProgressTimeout: 300 * time.Millisecond, Stats: stats,
			})
			fp.Add(testenv.Rule{Fault: testenv.StallFirstByte, Stall: time.Minute})
			start := time.Now()
			err := tc.op(st, objs[0])
			took := time.Since(start)
			switch {
			case err == nil:
				t.Fatal("succeeded with every request stalled")
			case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("failed with %v, which reads as the caller's own cancellation", err)
			case stats.GaveUp.Load() != 1 || stats.Timeouts.Load() < 2:
				t.Fatalf("%v: gave up %d times after %d timeouts; want once, after several", err, stats.GaveUp.Load(), stats.Timeouts.Load())
			case took > ioTimeout+2*time.Second:
				t.Fatalf("failed after %s, want within about %s", took, ioTimeout)
			}
		})
	}
}

// TestFirstByteWithinIOTimeout: with an io timeout under the first-byte
// timeout (--io-timeout 1s, --stall-timeout 10s), a store that never
// answers fails a stat or a read within about the io timeout: one request
// waited the whole first-byte timeout.
func TestFirstByteWithinIOTimeout(t *testing.T) {
	for _, op := range []string{"stat", "read"} {
		t.Run(op, func(t *testing.T) {
			const ioTimeout = time.Second
			fp, st, _, objs := faultSetup(t, 1, 64<<10, store.RetryOptions{
				BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, IOTimeout: ioTimeout,
				FirstByteTimeout: 10 * time.Second, ProgressTimeout: 10 * time.Second,
			})
			fp.Add(testenv.Rule{Fault: testenv.StallFirstByte, Stall: time.Minute})
			start := time.Now()
			var err error
			if op == "stat" {
				_, err = st.Stat(context.Background(), objs[0].Key)
			} else {
				var rc io.ReadCloser
				if rc, err = st.ReadRange(context.Background(), objs[0], 0, objs[0].Size); err == nil {
					rc.Close()
				}
			}
			if took := time.Since(start); err == nil || took > ioTimeout+ioTimeout/4+time.Second {
				t.Fatalf("%s of a store that never answers: %v after %s, want an error within about %s", op, err, took, ioTimeout)
			}
		})
	}
}

// TestDripUntilIOTimeout: a body that brings a byte at a time, each well
// inside the stall timeout, on every try, is cut as stalled, and the read
// fails within about the io timeout: a trickle is not progress, or a read
// of a block would take hours.
func TestDripUntilIOTimeout(t *testing.T) {
	stats := &store.RetryStats{}
	const ioTimeout = 2 * time.Second
	fp, st, _, objs := faultSetup(t, 1, 256<<10, store.RetryOptions{
		BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, IOTimeout: ioTimeout, Attempts: 1000,
		FirstByteTimeout: 300 * time.Millisecond, ProgressTimeout: 300 * time.Millisecond, Stats: stats,
	})
	fp.Add(testenv.Rule{Fault: testenv.DripMidBody, Stall: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	rc, err := st.ReadRange(ctx, objs[0], 0, objs[0].Size)
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	took := time.Since(start)
	switch {
	case err == nil:
		t.Fatal("read succeeded with every body dripping")
	case ctx.Err() != nil:
		t.Fatalf("still reading after %s: %v", took, err)
	case errors.Is(err, context.Canceled):
		t.Fatalf("failed with %v, which reads as the caller's own cancellation", err)
	case stats.Timeouts.Load() < 2:
		t.Fatalf("%v after %d timeouts; want several", err, stats.Timeouts.Load())
	case took > ioTimeout+2*time.Second:
		t.Fatalf("failed after %s, want within about %s", took, ioTimeout)
	}
}

// memBody hands out data until its request's context ends, a few bytes a
// read when trickle is set, and breaks (a reset) after breakAt bytes when
// breakAt > 0.
type memBody struct {
	ctx     context.Context
	data    []byte
	trickle time.Duration
	breakAt int
}

func (b *memBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	if b.breakAt < 0 {
		return 0, errors.New("connection reset by peer")
	}
	n := len(p)
	if b.trickle > 0 {
		time.Sleep(b.trickle)
		n = min(n, 16)
	}
	if b.breakAt > 0 {
		n = min(n, b.breakAt)
		if b.breakAt -= n; b.breakAt == 0 {
			b.breakAt = -1
		}
	}
	n = copy(p, b.data[:min(n, len(b.data))])
	b.data = b.data[n:]
	return n, nil
}

func (b *memBody) Close() error { return nil }

// memStore serves one object from memory: its opens fail (retryably) until
// openAt, and its first body trickles and breaks as firstBody says.
type memStore struct {
	store.Store
	data      []byte
	openAfter time.Duration // from the test's start
	openAt    time.Time
	firstBody memBody
	opens     int
}

func (s *memStore) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	if time.Now().Before(s.openAt) {
		return nil, errors.New("503 SlowDown")
	}
	s.opens++
	b := &memBody{ctx: ctx, data: s.data[off : off+n]}
	if s.opens == 1 {
		b.trickle, b.breakAt = s.firstBody.trickle, s.firstBody.breakAt
	}
	return b, nil
}

// TestResumeBudget: the io timeout of a body's resumes counts from when it
// last moved, not from before its first open's retries, nor across a pause
// of its reader (a frozen process): in both, a resume of a healthy server
// succeeds.
func TestResumeBudget(t *testing.T) {
	const ioTimeout = 500 * time.Millisecond
	data := bytes.Repeat([]byte("x"), 4096)
	tests := []struct {
		name  string
		st    *memStore
		pause time.Duration // between the reader's first and second read
	}{
		// Opens fail for most of the io timeout; the body then trickles
		// past the timeout and breaks before it brought the floor.
		{"slow first open", &memStore{data: data, openAfter: ioTimeout * 8 / 10,
			firstBody: memBody{trickle: 20 * time.Millisecond, breakAt: 200}}, 0},
		// The reader stops for longer than the io timeout: the watchdog
		// cuts the body meanwhile.
		{"reader pause", &memStore{data: data}, 2 * ioTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.st.openAt = time.Now().Add(tc.st.openAfter)
			r := store.NewRetrying(tc.st, store.RetryOptions{BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond,
				IOTimeout: ioTimeout, FirstByteTimeout: time.Second, ProgressTimeout: 100 * time.Millisecond, Attempts: 1000})
			rc, err := r.ReadRange(t.Context(), store.Object{Key: "k", Size: int64(len(data))}, 0, int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			got := make([]byte, 100)
			if _, err := io.ReadFull(rc, got); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.pause)
			rest, err := io.ReadAll(rc)
			if got = append(got, rest...); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %d of %d bytes: %v", len(got), len(data), err)
			}
		})
	}
}

// slowLister lists keys one every gap; its first listing fails after them
// all (a connection reset on the last page), the next ones succeed.
type slowLister struct {
	store.Store
	keys  []string
	gap   time.Duration
	calls int
}

func (s *slowLister) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	s.calls++
	for _, k := range s.keys {
		time.Sleep(s.gap)
		if err := fn(store.Object{Key: k}); err != nil {
			return err
		}
	}
	if s.calls == 1 {
		return errors.New("connection reset by peer")
	}
	return nil
}

// TestListProgressExtendsIOTimeout: a listing that keeps bringing keys is
// retried after a failure even when it has run past the io timeout since
// its first page; only a timeout since the last new key ends it.
func TestListProgressExtendsIOTimeout(t *testing.T) {
	const ioTimeout = 300 * time.Millisecond
	st := &slowLister{keys: []string{"a", "b", "c", "d", "e", "f"}, gap: 100 * time.Millisecond}
	r := store.NewRetrying(st, store.RetryOptions{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, IOTimeout: ioTimeout, Attempts: 10})
	var got []string
	err := r.List(context.Background(), "", true, func(o store.Object) error { got = append(got, o.Key); return nil })
	if err != nil || len(got) != len(st.keys) || st.calls != 2 {
		t.Fatalf("listing of %v (a retryable failure after them, past the io timeout of %s): %v after %d listings, got %v; want the keys once, in two listings",
			st.keys, ioTimeout, err, st.calls, got)
	}
}

// partialLister's attempt i lists the first cuts[i] of its keys in
// order, then fails as a reset connection would; past cuts it lists all.
type partialLister struct {
	store.Store
	keys  []string
	cuts  []int
	calls int
}

func (s *partialLister) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	n := len(s.keys)
	if s.calls < len(s.cuts) {
		n = s.cuts[s.calls]
	}
	s.calls++
	for _, k := range s.keys[:n] {
		if err := fn(store.Object{Key: k}); err != nil {
			return err
		}
	}
	if n < len(s.keys) {
		return errors.New("connection reset by peer")
	}
	return nil
}

// TestListRetriesHandEachKeyOnce: a listing cut short and started over,
// however far each attempt got, hands each key on once, in the order
// first listed.
func TestListRetriesHandEachKeyOnce(t *testing.T) {
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = fmt.Sprintf("train/c%03d/img%05d.jpg", i%100, i)
	}
	for _, cuts := range [][]int{nil, {0}, {1000}, {1000, 1000, 0, 4999}, {3000, 1000, 4000}} {
		t.Run(fmt.Sprint(cuts), func(t *testing.T) {
			st := &partialLister{keys: keys, cuts: cuts}
			r := store.NewRetrying(st, store.RetryOptions{BaseDelay: time.Microsecond, MaxDelay: time.Microsecond, Attempts: 10})
			var got []string
			if err := r.List(context.Background(), "", true, func(o store.Object) error { got = append(got, o.Key); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, keys) || st.calls != len(cuts)+1 {
				t.Fatalf("%d keys handed on in %d listings, want each of %d once in %d", len(got), st.calls, len(keys), len(cuts)+1)
			}
		})
	}
}

// TestListCallerStopIsFinal: an error from fn ends the listing at once:
// it is returned as it is, never retried, and fn is not called again.
func TestListCallerStopIsFinal(t *testing.T) {
	stats := &store.RetryStats{}
	_, st, _, _ := faultSetup(t, 5, 1<<10, store.RetryOptions{Stats: stats})
	stop := errors.New("enough")
	calls := 0
	err := st.List(context.Background(), "", true, func(store.Object) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 3 || stats.Retries.Load() != 0 {
		t.Fatalf("List: %v after %d calls of fn and %d retries; want fn's error after 3 calls and none", err, calls, stats.Retries.Load())
	}
}

// TestRetriesWarnOnce: a store failing requests is said in the log as it
// happens (an outage left it silent, the counters alone rising), in one
// line for many retries, not one each.
func TestRetriesWarnOnce(t *testing.T) {
	var logs testenv.SyncBuffer
	st := store.NewRetrying(backAt{at: time.Now().Add(200 * time.Millisecond)}, store.RetryOptions{
		BaseDelay: 5 * time.Millisecond, MaxDelay: 10 * time.Millisecond, IOTimeout: 5 * time.Second, Attempts: 1000,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := st.Stat(context.Background(), "k"); err != nil {
				t.Errorf("Stat of a store back within the io timeout: %v", err)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(logs.String(), "the object store fails requests"); n != 1 {
		t.Fatalf("%d warnings of retries, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Fatalf("the warning does not say why:\n%s", logs.String())
	}
}
