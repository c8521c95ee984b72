package prefetch

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/dataccel/dataccel/store"
)

// HedgeOptions configure Hedged. Zero fields take the defaults shown.
type HedgeOptions struct {
	// MaxSize: whole-object GETs of objects up to this size are hedged (4 MiB).
	// Larger reads are dominated by transfer time, where a duplicate only
	// doubles the bytes.
	MaxSize int64
	// Percentile of recent first-byte latencies after which a duplicate is
	// sent (0.95), never sooner than Floor (5 ms); InitialDelay (50 ms) is
	// used until MinSamples (20) latencies have been seen.
	Percentile   float64
	Floor        time.Duration
	InitialDelay time.Duration
	MinSamples   int
	// Window is how many recent latencies are kept (512).
	Window int
	// Ratio bounds duplicates as a share of hedgeable GETs (0.05), with a
	// burst of Burst (10) duplicates: a token bucket earning Ratio per GET.
	Ratio float64
	Burst float64
	Stats *Stats
}

func (o HedgeOptions) withDefaults() HedgeOptions {
	if o.MaxSize <= 0 {
		o.MaxSize = 4 << 20
	}
	if o.Percentile <= 0 || o.Percentile >= 1 {
		o.Percentile = 0.95
	}
	if o.Floor <= 0 {
		o.Floor = 5 * time.Millisecond
	}
	if o.InitialDelay <= 0 {
		o.InitialDelay = 50 * time.Millisecond
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 20
	}
	if o.Window <= 0 {
		o.Window = 512
	}
	if o.Ratio <= 0 {
		o.Ratio = 0.05
	}
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.Stats == nil {
		o.Stats = &Stats{}
	}
	return o
}

// Hedged is a store.Store decorator for tail latency on small objects: when
// a whole-object GET has not produced its first byte after about the p95 of
// recent first-byte latencies, it sends one duplicate and takes whichever
// answers first, cancelling the other. Duplicates stay within a budget
// (Ratio of GETs). Other calls pass through. It belongs with the store
// decorators; it lives here until store/ takes it.
type Hedged struct {
	store.Store
	opts HedgeOptions

	mu      sync.Mutex
	samples []time.Duration // guarded by mu: ring of recent first-byte latencies
	head    int             // guarded by mu: next slot in samples
	fresh   int             // guarded by mu: samples since delay was computed
	delay   time.Duration   // guarded by mu: current hedge delay
	tokens  float64         // guarded by mu: duplicates we may still send
	winRate float64         // guarded by mu: running share of duplicates that answered first
}

// A duplicate that seldom answers first is pure load: slowness that hits
// both attempts alike (a saturated client or server) is not helped by
// asking twice. Below goodWinRate the budget shrinks in proportion, to no
// less than minBudgetShare of Ratio, which keeps probing.
const (
	goodWinRate    = 0.2
	minBudgetShare = 0.1
	winRateAlpha   = 1.0 / 16
)

// NewHedged wraps s.
func NewHedged(s store.Store, opts HedgeOptions) *Hedged {
	opts = opts.withDefaults()
	return &Hedged{Store: s, opts: opts, delay: opts.InitialDelay, tokens: opts.Burst, winRate: goodWinRate}
}

// Delay is the current hedge delay.
func (h *Hedged) Delay() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.delay
}

// ReadRange implements store.Store. The first attempt runs on the caller's
// goroutine: most GETs answer before the delay and cost no goroutine, no
// channel and no duplicate. A duplicate, once the delay passes, runs on its
// own; if it answers first it cancels the first attempt, whose call then
// returns and hands over the duplicate's body.
func (h *Hedged) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	whole := off == 0 && (n < 0 || n >= obj.Size)
	if !whole || obj.Size > h.opts.MaxSize || obj.Size == 0 {
		return h.Store.ReadRange(ctx, obj, off, n)
	}
	h.earn()
	pctx, pcancel := context.WithCancel(ctx)
	r := &race{}
	timer := time.AfterFunc(h.Delay(), func() { h.launch(ctx, r, pcancel, obj, off, n) })
	t0 := time.Now()
	body, err := h.firstByte(pctx, obj, off, n)
	lat := time.Since(t0)
	timer.Stop()

	r.mu.Lock()
	r.returned = true
	dupWon, hedged := r.dupWon, r.dup != nil
	if !dupWon && err == nil {
		r.decided = true
	}
	r.mu.Unlock()
	switch {
	case dupWon: // the duplicate answered first and cancelled this attempt
		if body != nil {
			body.Close()
		}
		pcancel()
		return h.dupWon(<-r.dup), nil
	case err == nil:
		h.record(lat)
		if hedged {
			h.outcome(false)
			r.dcancel()
			go dropLoser(r.dup)
		}
		return &hedgedBody{ReadCloser: body, cancel: pcancel}, nil
	}
	pcancel()
	if !hedged {
		// An error is not slowness: retrying is another decorator's job.
		return nil, err
	}
	// The duplicate is still out (had it answered, it would have won).
	a := <-r.dup
	if a.err != nil {
		a.cancel()
		return nil, err
	}
	r.mu.Lock()
	r.decided = true
	r.mu.Unlock()
	return h.dupWon(a), nil
}

// dupWon records that the duplicate a answered first and returns its body.
func (h *Hedged) dupWon(a attempt) io.ReadCloser {
	h.record(a.lat)
	h.opts.Stats.HedgeWins.Add(1)
	h.outcome(true)
	return &hedgedBody{ReadCloser: a.body, cancel: a.cancel}
}

// race is what the first attempt and its duplicate share.
type race struct {
	mu       sync.Mutex
	returned bool               // guarded by mu: the first attempt's call returned
	decided  bool               // guarded by mu: an attempt's body was taken
	dupWon   bool               // guarded by mu: the duplicate answered first
	dup      chan attempt       // guarded by mu until set: the duplicate's outcome (nil: none sent)
	dcancel  context.CancelFunc // guarded by mu until set
}

type attempt struct {
	body   io.ReadCloser
	err    error
	lat    time.Duration
	cancel context.CancelFunc
}

// launch sends the duplicate, unless the first attempt has returned or the
// budget is spent. A duplicate that answers while nothing is decided wins:
// it cancels the first attempt (pcancel) to wake its caller.
func (h *Hedged) launch(ctx context.Context, r *race, pcancel context.CancelFunc, obj store.Object, off, n int64) {
	r.mu.Lock()
	if r.returned || !h.spend() {
		r.mu.Unlock()
		return
	}
	dctx, dcancel := context.WithCancel(ctx)
	r.dup, r.dcancel = make(chan attempt, 1), dcancel
	r.mu.Unlock()
	h.opts.Stats.Hedges.Add(1)
	go func() {
		t0 := time.Now()
		body, err := h.firstByte(dctx, obj, off, n)
		a := attempt{body: body, err: err, lat: time.Since(t0), cancel: dcancel}
		r.mu.Lock()
		if err == nil && !r.decided {
			r.decided, r.dupWon = true, true
			pcancel()
		}
		r.mu.Unlock()
		r.dup <- a
	}()
}

// dropLoser closes a duplicate that lost once it comes back.
func dropLoser(dup chan attempt) {
	a := <-dup
	if a.body != nil {
		a.body.Close()
	}
	a.cancel()
}

// firstByte issues the GET and waits for the first byte of the body, which
// is what "answered" means: headers can come back before the data does.
func (h *Hedged) firstByte(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	body, err := h.Store.ReadRange(ctx, obj, off, n)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 512)
	for {
		k, err := body.Read(buf)
		if k > 0 || err != nil {
			if err != nil && err != io.EOF {
				body.Close()
				return nil, err
			}
			return &prefixed{Reader: io.MultiReader(bytes.NewReader(buf[:k]), body), body: body}, nil
		}
	}
}

type prefixed struct {
	io.Reader
	body io.ReadCloser
}

func (p *prefixed) Close() error { return p.body.Close() }

// hedgedBody ends the winning attempt's context when the body is closed.
type hedgedBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *hedgedBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func (h *Hedged) earn() {
	h.mu.Lock()
	share := max(minBudgetShare, min(1, h.winRate/goodWinRate))
	h.tokens = min(h.tokens+h.opts.Ratio*share, h.opts.Burst)
	h.mu.Unlock()
}

// outcome records whether a duplicate, once sent, answered first.
func (h *Hedged) outcome(hedgeWon bool) {
	h.mu.Lock()
	h.winRate += winRateAlpha * (float64(btoi(hedgeWon)) - h.winRate)
	h.mu.Unlock()
}

func (h *Hedged) spend() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tokens < 1 {
		return false
	}
	h.tokens--
	return true
}

// record adds a first-byte latency and recomputes the delay every few
// samples (sorting the window on every GET would cost more than it tells).
func (h *Hedged) record(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) < h.opts.Window {
		h.samples = append(h.samples, d)
	} else {
		h.samples[h.head] = d
		h.head = (h.head + 1) % h.opts.Window
	}
	h.fresh++
	if len(h.samples) < h.opts.MinSamples || h.fresh < 8 && len(h.samples) > h.opts.MinSamples {
		return
	}
	h.fresh = 0
	s := slices.Clone(h.samples)
	slices.Sort(s)
	h.delay = max(h.opts.Floor, s[int(h.opts.Percentile*float64(len(s)-1))])
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
