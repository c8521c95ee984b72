package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"
)

// RetryOptions bound how hard Retrying tries.
type RetryOptions struct {
	// Attempts bounds tries per request (first try included); 0 means 10.
	// A body cut mid-transfer is resumed up to Attempts times, each resume
	// a request with Attempts tries of its own; IOTimeout bounds the time
	// without progress, not the whole read.
	Attempts int
	// BaseDelay and MaxDelay shape the exponential backoff (full jitter).
	BaseDelay, MaxDelay time.Duration
	// FirstByteTimeout cuts a request whose response has not started.
	FirstByteTimeout time.Duration
	// ProgressTimeout cuts a body that brings less than MinProgressRate
	// bytes a second (at most 64 KiB) in this long mid-transfer: a trickle
	// is a stall too.
	ProgressTimeout time.Duration
	// IOTimeout bounds one operation, all retries included: past it the
	// operation fails (a dead endpoint costs a bounded wait, not a hang).
	IOTimeout time.Duration
	// Stats counts retries and cut requests; may be nil.
	Stats *RetryStats
	// Logger, if set, is told that the store fails requests: at most one
	// line every retryWarnEvery, with the retries since the last one.
	Logger *slog.Logger
}

// retryWarnEvery spaces the warnings of a store failing requests: an
// outage retries thousands of requests, and the counters alone left the
// log silent through it.
const retryWarnEvery = 30 * time.Second

// RetryStats count what Retrying did.
type RetryStats struct {
	Retries  atomic.Int64 // requests sent again after a retryable failure
	Timeouts atomic.Int64 // requests cut for no first byte or no progress
	GaveUp   atomic.Int64 // operations that failed after retrying
}

func (o *RetryOptions) defaults() {
	if o.Attempts <= 0 {
		o.Attempts = 10
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = 50 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 2 * time.Second
	}
	if o.FirstByteTimeout <= 0 {
		o.FirstByteTimeout = 10 * time.Second
	}
	if o.ProgressTimeout <= 0 {
		o.ProgressTimeout = 10 * time.Second
	}
	if o.IOTimeout <= 0 {
		o.IOTimeout = time.Minute
	}
	if o.Stats == nil {
		o.Stats = &RetryStats{}
	}
}

// Retrying retries retryable failures (5xx, throttling, resets, timeouts)
// with exponential backoff and jitter, cuts requests that stall, and resumes
// a body that breaks mid-transfer from where it stopped (still pinned to the
// same ETag, so a resumed body never mixes versions). Not-found, access
// denied and changed-object errors are final and returned at once.
type Retrying struct {
	Store
	opts  RetryOptions
	floor int64 // minProgress(opts.ProgressTimeout)

	warnedAt      atomic.Int64 // unix ns of the last warning of retries
	warnedRetries atomic.Int64 // Stats.Retries at that warning
}

// NewRetrying wraps s.
func NewRetrying(s Store, opts RetryOptions) *Retrying {
	opts.defaults()
	return &Retrying{Store: s, opts: opts, floor: minProgress(opts.ProgressTimeout)}
}

// MinProgressRate is how fast a body must move, over each ProgressTimeout,
// to count as moving (64 KiB in the default 10 s; at most 64 KiB in any
// window): a server that drips a byte at a time would otherwise keep a
// read of a block going for hours.
const MinProgressRate = 6554 // bytes a second

// minProgress is what a body must bring within timeout.
func minProgress(timeout time.Duration) int64 {
	return max(1, min(64<<10, int64(timeout.Seconds()*MinProgressRate)))
}

// errTimeout marks a request cut by the watchdog.
var errTimeout = errors.New("request timed out")

// Retryable reports whether err may succeed if the request is sent again.
func Retryable(err error) bool {
	switch {
	case errors.Is(err, errTimeout):
		return true // our watchdog cut it: the cancel is not the caller's
	case err == nil,
		errors.Is(err, ErrNotExist), errors.Is(err, ErrNoBucket),
		errors.Is(err, ErrAccess), errors.Is(err, ErrChanged), errors.Is(err, ErrRefused),
		errors.Is(err, context.Canceled), errors.Is(err, errStopped):
		return false
	}
	return true
}

// do runs op until it succeeds, fails for good, or the IOTimeout passes.
// op gets how long its request may wait for a first byte: FirstByteTimeout,
// or less when the IOTimeout ends sooner.
func (r *Retrying) do(ctx context.Context, what string, op func(ctx context.Context, firstByte time.Duration) error) error {
	return r.doSince(ctx, what, nil, op)
}

// doSince is do with the IOTimeout counted from *progress once it is set
// (nil or zero: from the start): a long listing that moves on is not cut at
// IOTimeout from its first page, and a resumed body that did not move is not
// given a new IOTimeout on each resume.
func (r *Retrying) doSince(ctx context.Context, what string, progress *time.Time, op func(ctx context.Context, firstByte time.Duration) error) error {
	start := time.Now()
	deadlineAt := func() time.Time {
		if progress != nil && !progress.IsZero() {
			return progress.Add(r.opts.IOTimeout)
		}
		return start.Add(r.opts.IOTimeout)
	}
	var err error
	for attempt := 0; attempt < r.opts.Attempts; attempt++ {
		if attempt > 0 {
			r.opts.Stats.Retries.Add(1)
			r.warnRetries(what, err)
			backoff := r.opts.BaseDelay << min(attempt-1, 20)
			backoff = rand.N(min(backoff, r.opts.MaxDelay)) + time.Millisecond
			// A backoff past the deadline is cut short, not skipped: the
			// last attempt comes at the deadline, so a store that is back
			// by then is still reached (giving up at the first long draw
			// could end the retries well before IOTimeout).
			left := time.Until(deadlineAt())
			if left <= 0 {
				break
			}
			backoff = min(backoff, left)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
		}
		// A request to a store that never answers waits for its first
		// byte no longer than the IOTimeout has left (with
		// --io-timeout under --stall-timeout one request ran past it),
		// but for a floor: the last attempt, at the deadline, gets time
		// to be answered.
		firstByte := min(r.opts.FirstByteTimeout, max(time.Until(deadlineAt()), r.opts.IOTimeout/4, time.Millisecond))
		err = op(ctx, firstByte)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !Retryable(err) || time.Now().After(deadlineAt()) {
			break
		}
	}
	if Retryable(err) {
		r.opts.Stats.GaveUp.Add(1)
		return fmt.Errorf("%s: %w (io timeout %s): %w", what, ErrGaveUp, r.opts.IOTimeout, err)
	}
	return err
}

// warnRetries warns of a retry just counted, for err, with the retries
// since the last warning, unless that went out less than retryWarnEvery
// ago.
func (r *Retrying) warnRetries(what string, err error) {
	if r.opts.Logger == nil {
		return
	}
	now, last := time.Now().UnixNano(), r.warnedAt.Load()
	if now-last < int64(retryWarnEvery) || !r.warnedAt.CompareAndSwap(last, now) {
		return
	}
	retries := r.opts.Stats.Retries.Load()
	r.opts.Logger.Warn("the object store fails requests; retrying them (one line per "+retryWarnEvery.String()+")",
		"retries", retries-r.warnedRetries.Swap(retries), "op", what, "err", err)
}

// watchdog cancels a request when its timer fires: first byte, then progress.
type watchdog struct {
	t      *time.Timer
	fired  atomic.Bool
	cancel context.CancelFunc
}

func newWatchdog(ctx context.Context, d time.Duration, stats *RetryStats) (context.Context, *watchdog) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watchdog{cancel: cancel}
	w.t = time.AfterFunc(d, func() {
		w.fired.Store(true)
		stats.Timeouts.Add(1)
		cancel()
	})
	return ctx, w
}

func (w *watchdog) stop() { w.t.Stop(); w.cancel() }

// explain turns the cancellation the watchdog caused into a retryable error.
// That cancellation is the watchdog's own, not the caller's, so it leaves
// the chain: an error that is context.Canceled reads as an interrupted
// request (EINTR through the mount), which a reader retries for ever.
func (w *watchdog) explain(err error) error {
	switch {
	case err == nil || !w.fired.Load():
		return err
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %v", errTimeout, err)
	}
	return fmt.Errorf("%w: %w", errTimeout, err)
}

func (r *Retrying) Stat(ctx context.Context, key string) (Object, error) {
	var obj Object
	err := r.do(ctx, "stat "+key, func(ctx context.Context, firstByte time.Duration) error {
		rctx, w := newWatchdog(ctx, firstByte, r.opts.Stats)
		defer w.stop()
		var err error
		obj, err = r.Store.Stat(rctx, key)
		return w.explain(err)
	})
	return obj, err
}

// errStopped marks a listing that fn stopped: final, never retried.
var errStopped = errors.New("listing stopped by its caller")

func (r *Retrying) List(ctx context.Context, prefix string, recursive bool, fn func(Object) error) error {
	// A retried listing starts over: skip what fn has already seen. Each
	// new key is progress: the IOTimeout counts from the last one.
	seen := newKeySet()
	var fnErr error
	var last time.Time
	err := r.doSince(ctx, "list "+prefix, &last, func(ctx context.Context, firstByte time.Duration) error {
		seen.attempt()
		rctx, w := newWatchdog(ctx, firstByte, r.opts.Stats)
		defer w.stop()
		err := r.Store.List(rctx, prefix, recursive, func(o Object) error {
			if fnErr != nil {
				return fnErr // a range listed in parallel: fn said stop already
			}
			w.t.Reset(r.opts.ProgressTimeout)
			if !seen.add(o.Key) {
				return nil
			}
			last = time.Now()
			if err := fn(o); err != nil {
				fnErr = err
				return err
			}
			return nil
		})
		if fnErr != nil {
			return fmt.Errorf("%w: %w", errStopped, fnErr)
		}
		return w.explain(err)
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}

// keySet remembers the keys a listing handed on, as two independent
// 64-bit hashes of each (16 B a key, not the key: a recursive listing of
// millions of keys, for warm or bench gen, held every key string and a map
// entry for its whole run, about 100 MB a million). Two keys share both
// hashes with odds of about n*n/2^129. A listing hands each key on once,
// so an attempt looks up only what earlier attempts handed on (sorted at
// its start: the first attempt, the usual one, sorts and searches nothing).
type keySet struct {
	s1, s2 maphash.Seed
	hashes [][2]uint64 // sorted up to sorted
	sorted int
}

func newKeySet() *keySet { return &keySet{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()} }

// attempt starts an attempt of the listing.
func (k *keySet) attempt() {
	slices.SortFunc(k.hashes, compareHash)
	k.sorted = len(k.hashes)
}

// add records key and reports whether no earlier attempt handed it on.
func (k *keySet) add(key string) bool {
	h := [2]uint64{maphash.String(k.s1, key), maphash.String(k.s2, key)}
	if _, found := slices.BinarySearchFunc(k.hashes[:k.sorted], h, compareHash); found {
		return false
	}
	k.hashes = append(k.hashes, h)
	return true
}

func compareHash(a, b [2]uint64) int {
	if c := cmp.Compare(a[0], b[0]); c != 0 {
		return c
	}
	return cmp.Compare(a[1], b[1])
}

func (r *Retrying) ReadRange(ctx context.Context, obj Object, off, n int64) (io.ReadCloser, error) {
	b := &resumingBody{r: r, ctx: ctx, obj: obj, off: off, n: n, movedAt: time.Now()}
	if err := b.open(); err != nil {
		return nil, err
	}
	return b, nil
}

// resumingBody re-requests the rest of its range when the body breaks.
// It holds the caller's context for the life of the body, like any HTTP
// response body does: the body is the request.
type resumingBody struct {
	r        *Retrying
	ctx      context.Context
	obj      Object
	off, n   int64 // remaining range; n < 0: to the end
	body     io.ReadCloser
	w        *watchdog
	attempts int       // resumes so far
	fresh    int64     // bytes since the watchdog was last reset
	movedAt  time.Time // when the body last brought r.floor bytes, or first opened
	readAt   time.Time // when the caller's last Read returned
	cause    error     // why the last body broke
	failed   error     // final error, once resuming is over
}

func (b *resumingBody) open() error {
	return b.r.doSince(b.ctx, "read "+b.obj.Key, &b.movedAt, func(ctx context.Context, firstByte time.Duration) error {
		rctx, w := newWatchdog(ctx, firstByte, b.r.opts.Stats)
		body, err := b.r.Store.ReadRange(rctx, b.obj, b.off, b.n)
		if err != nil {
			w.stop()
			return w.explain(err)
		}
		w.t.Reset(b.r.opts.ProgressTimeout)
		if b.attempts == 0 {
			b.movedAt = time.Now() // the retries of the first open are not the body's
		}
		b.body, b.w, b.fresh = body, w, 0
		return nil
	})
}

func (b *resumingBody) Read(p []byte) (int, error) {
	if !b.readAt.IsZero() && time.Since(b.readAt) > b.r.opts.ProgressTimeout {
		// The caller paused (a frozen process, a reader that waits on
		// memory): time the body could not move is not the server's.
		b.movedAt = time.Now()
	}
	defer func() { b.readAt = time.Now() }()
	for {
		if b.n == 0 {
			return 0, io.EOF
		}
		if b.failed != nil {
			return 0, b.failed
		}
		if b.body == nil {
			if err := b.resume(); err != nil {
				b.failed = err
				return 0, err
			}
		}
		if b.n > 0 && int64(len(p)) > b.n {
			p = p[:b.n]
		}
		k, err := b.body.Read(p)
		if k > 0 {
			b.off += int64(k)
			if b.n > 0 {
				b.n -= int64(k)
			}
			if b.fresh += int64(k); b.fresh >= b.r.floor {
				b.w.t.Reset(b.r.opts.ProgressTimeout)
				b.fresh, b.movedAt = 0, time.Now()
			}
		}
		switch {
		case err == nil:
			return k, nil
		case errors.Is(err, io.EOF) && b.n <= 0:
			b.n = 0 // done (n < 0 read to the end)
			return k, io.EOF
		}
		// The body broke (reset, stall cut, short body): drop it, hand
		// over what arrived, and resume the rest on the next pass.
		b.cause = b.w.explain(err)
		if errors.Is(err, io.EOF) {
			b.cause = io.ErrUnexpectedEOF
		}
		b.close()
		if k > 0 {
			return k, nil
		}
	}
}

func (b *resumingBody) resume() error {
	if !Retryable(b.cause) || b.ctx.Err() != nil {
		return fmt.Errorf("read %q at %d: %w", b.obj.Key, b.off, b.cause)
	}
	if b.attempts >= b.r.opts.Attempts || time.Since(b.movedAt) > b.r.opts.IOTimeout {
		b.r.opts.Stats.GaveUp.Add(1)
		return fmt.Errorf("read %q at %d: %w (io timeout %s): %w", b.obj.Key, b.off, ErrGaveUp, b.r.opts.IOTimeout, b.cause)
	}
	b.attempts++
	b.r.opts.Stats.Retries.Add(1)
	return b.open()
}

func (b *resumingBody) close() {
	if b.body != nil {
		b.body.Close()
		b.w.stop()
		b.body = nil
	}
}

func (b *resumingBody) Close() error {
	b.close()
	return nil
}
