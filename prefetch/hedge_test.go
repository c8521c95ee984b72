package prefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// callLatency returns a latency function that gives the n-th call for a
// key (from 0) the latency f(n).
func callLatency(f func(n int) time.Duration) func(string) time.Duration {
	var mu sync.Mutex
	calls := map[string]int{}
	return func(key string) time.Duration {
		mu.Lock()
		n := calls[key]
		calls[key]++
		mu.Unlock()
		return f(n)
	}
}

func readObject(t *testing.T, s store.Store, obj store.Object, off, n int64) []byte {
	t.Helper()
	b, err := tryRead(s, obj, off, n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readEach reads every object whole through s, parallel at a time, and
// checks the bytes.
func readEach(t *testing.T, s store.Store, st *fakeStore, objs []store.Object, parallel int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for _, obj := range objs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if b, err := tryRead(s, obj, 0, obj.Size); err != nil || !bytes.Equal(b, st.data(obj.Key)) {
				t.Errorf("%s: err %v or wrong bytes", obj.Key, err)
			}
		})
	}
	wg.Wait()
}

// tryRead is readObject for goroutines other than the test's.
func tryRead(s store.Store, obj store.Object, off, n int64) ([]byte, error) {
	rc, err := s.ReadRange(context.Background(), obj, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestHedgedSlowPrimaryLosesToDuplicate(t *testing.T) {
	st := newFakeStore()
	obj := st.add("slow", 110<<10)
	st.latency = callLatency(func(n int) time.Duration {
		if n == 0 {
			return 5 * time.Second // a stuck first GET
		}
		return time.Millisecond
	})
	stats := &Stats{}
	h := NewHedged(st, HedgeOptions{InitialDelay: 20 * time.Millisecond, Stats: stats})
	start := time.Now()
	got := readObject(t, h, obj, 0, obj.Size)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("hedged read took %v: the duplicate did not win", took)
	}
	if !bytes.Equal(got, st.data(obj.Key)) {
		t.Error("wrong bytes")
	}
	if stats.Hedges.Load() != 1 || stats.HedgeWins.Load() != 1 {
		t.Errorf("hedges %d wins %d, want 1 and 1", stats.Hedges.Load(), stats.HedgeWins.Load())
	}
}

func TestHedgedPassThroughAndErrors(t *testing.T) {
	st := newFakeStore()
	small := st.add("small", 1000)
	large := st.add("large", 4<<20)
	st.latency = func(string) time.Duration { return 30 * time.Millisecond }
	stats := &Stats{}
	h := NewHedged(st, HedgeOptions{InitialDelay: time.Millisecond, MaxSize: 1 << 20, Stats: stats})
	for _, tc := range []struct {
		name   string
		obj    store.Object
		off, n int64
	}{
		{"ranged read of a small object", small, 10, 100},
		{"whole large object", large, 0, large.Size},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := st.gets.Load()
			got := readObject(t, h, tc.obj, tc.off, tc.n)
			if !bytes.Equal(got, st.data(tc.obj.Key)[tc.off:tc.off+tc.n]) {
				t.Error("wrong bytes")
			}
			if n := st.gets.Load() - before; n != 1 {
				t.Errorf("%d GETs, want 1 (not hedged)", n)
			}
		})
	}
	// An error is not slowness: it comes back at once, unhedged. (A delay
	// far above the error's own time, so a loaded machine cannot make the
	// error look slow.)
	st.latency = nil
	boom := errors.New("boom")
	st.fail = func(store.Object) error { return boom }
	h = NewHedged(st, HedgeOptions{InitialDelay: time.Second, MaxSize: 1 << 20, Stats: stats})
	if _, err := h.ReadRange(context.Background(), small, 0, small.Size); !errors.Is(err, boom) {
		t.Errorf("err %v, want boom", err)
	}
	if stats.Hedges.Load() != 0 {
		t.Errorf("%d hedges, want 0", stats.Hedges.Load())
	}
}

func TestHedgedBudgetAndDelay(t *testing.T) {
	st := newFakeStore()
	const gets = 400
	objs := make([]store.Object, gets)
	for i := range objs {
		objs[i] = st.add(fmt.Sprintf("o%d", i), 2000)
	}
	// Every GET is slower than the hedge delay would be at first.
	st.latency = func(string) time.Duration { return 3 * time.Millisecond }
	stats := &Stats{}
	h := NewHedged(st, HedgeOptions{InitialDelay: 100 * time.Microsecond, Floor: 100 * time.Microsecond, MinSamples: 1000, Stats: stats})
	readEach(t, h, st, objs, 16)
	// Burst 10 + 5% of 400.
	if n := stats.Hedges.Load(); n > 10+gets/20 || n == 0 {
		t.Errorf("%d hedges for %d GETs, want 1..%d", n, gets, 10+gets/20)
	}
	t.Logf("%d hedges for %d GETs", stats.Hedges.Load(), gets)

	// With samples, the delay follows the p95 of first-byte latency.
	h2 := NewHedged(st, HedgeOptions{InitialDelay: time.Second, Floor: time.Millisecond, MinSamples: 20})
	st.latency = callLatency(func(int) time.Duration { return 2 * time.Millisecond })
	for _, obj := range objs[:40] {
		readObject(t, h2, obj, 0, obj.Size)
	}
	if d := h2.Delay(); d < 2*time.Millisecond || d > 500*time.Millisecond {
		t.Errorf("delay %v after 40 GETs of ~2ms, want about their p95", d)
	}
}

// TestHedgedBudgetFollowsWins: duplicates that never answer first (slowness
// that asking twice does not cure) shrink the budget to a probe; duplicates
// that win keep the full budget.
func TestHedgedBudgetFollowsWins(t *testing.T) {
	for _, tc := range []struct {
		name     string
		latency  func(n int) time.Duration // of the n-th call for one key
		gets     int
		min, max int64
	}{
		// Full budget: burst 10 + 5% of 400 = 30.
		{"duplicates win", func(n int) time.Duration {
			if n == 0 {
				return 20 * time.Millisecond
			}
			return 0
		}, 400, 25, 30},
		// Without adapting: 10 + 5% of 2000 = 110. Adapting: the burst, then
		// about a tenth of the rate, which still probes. On a loaded machine
		// a duplicate sometimes reaches the store first and so "wins" (6-7
		// of 65 seen under -race): the bound leaves room for that.
		{"duplicates lose", func(n int) time.Duration {
			if n == 0 {
				return 2 * time.Millisecond
			}
			return time.Second // cancelled when the first attempt answers
		}, 2000, 11, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			objs := make([]store.Object, tc.gets)
			for i := range objs {
				objs[i] = st.add(fmt.Sprintf("o%d", i), 2000)
			}
			st.latency = callLatency(tc.latency)
			stats := &Stats{}
			h := NewHedged(st, HedgeOptions{InitialDelay: 100 * time.Microsecond, Floor: 100 * time.Microsecond, MinSamples: 1 << 20, Stats: stats})
			readEach(t, h, st, objs, 16)
			n := stats.Hedges.Load()
			t.Logf("%d hedges, %d won, for %d GETs", n, stats.HedgeWins.Load(), tc.gets)
			if n < tc.min || n > tc.max {
				t.Errorf("%d hedges for %d GETs; want %d..%d", n, tc.gets, tc.min, tc.max)
			}
		})
	}
}

// scripted answers its i-th ReadRange after script[i].delay (or when ctx
// ends) with script[i].err, or else with the fake store's bytes.
type scripted struct {
	*fakeStore
	mu     sync.Mutex
	calls  int // guarded by mu
	script []step
	open   atomic.Int64 // attempts from call until error or body Close
}

type step struct {
	delay time.Duration
	err   error
}

func (s *scripted) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	s.mu.Lock()
	st := s.script[min(s.calls, len(s.script)-1)]
	s.calls++
	s.mu.Unlock()
	s.open.Add(1)
	t := time.NewTimer(st.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		s.open.Add(-1)
		return nil, ctx.Err()
	}
	if st.err != nil {
		s.open.Add(-1)
		return nil, st.err
	}
	rc, err := s.fakeStore.ReadRange(ctx, obj, off, n)
	if err != nil {
		s.open.Add(-1)
		return nil, err
	}
	return &closeCounter{ReadCloser: rc, open: &s.open}, nil
}

type closeCounter struct {
	io.ReadCloser
	open *atomic.Int64
	once sync.Once
}

func (c *closeCounter) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.ReadCloser.Close()
}

// TestHedgedRace: whichever attempt answers first is read, the other is
// cancelled and closed, and an attempt that fails does not hide the other.
func TestHedgedRace(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		script    []step // the first attempt, then the duplicate (sent at 10 ms)
		wantErr   error
		wantWins  int64
		wantCalls int
	}{
		{"first answers, stuck duplicate dropped", []step{{40 * time.Millisecond, nil}, {time.Hour, nil}}, nil, 0, 2},
		{"duplicate answers first", []step{{time.Hour, nil}, {time.Millisecond, nil}}, nil, 1, 2},
		{"first fails with the duplicate out", []step{{60 * time.Millisecond, boom}, {100 * time.Millisecond, nil}}, nil, 1, 2},
		{"both fail", []step{{60 * time.Millisecond, boom}, {time.Millisecond, errors.New("other")}}, boom, 0, 2},
		{"error before the delay: no duplicate", []step{{time.Millisecond, boom}}, boom, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &scripted{fakeStore: newFakeStore(), script: tc.script}
			obj := st.add("o", 50<<10)
			stats := &Stats{}
			h := NewHedged(st, HedgeOptions{InitialDelay: 10 * time.Millisecond, Stats: stats})
			start := time.Now()
			got, err := tryRead(h, obj, 0, obj.Size)
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("read took %v", took)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil && !bytes.Equal(got, st.data(obj.Key)) {
				t.Fatal("wrong bytes")
			}
			if w := stats.HedgeWins.Load(); w != tc.wantWins {
				t.Errorf("hedge wins %d, want %d", w, tc.wantWins)
			}
			st.mu.Lock()
			calls := st.calls
			st.mu.Unlock()
			if calls != tc.wantCalls {
				t.Errorf("%d GETs, want %d", calls, tc.wantCalls)
			}
			// The loser's GET ends (cancelled) and its body is closed.
			waitFor(t, "no GET left open", func() bool { return st.open.Load() == 0 })
		})
	}
}
