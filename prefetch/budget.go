package prefetch

import (
	"context"
	"slices"
	"sync"
	"time"
)

// budget is a weighted semaphore of bytes with two kinds of taker:
// background work (read-ahead, cross-file prefetch) only ever tries and
// never waits in line, and foreground reads may wait. While a foreground
// read waits, background tries fail, so prefetch cannot starve a reader.
//
// It is not x/sync/semaphore because the foreground must be able to free
// room (evict ready blocks) between tries and background workers must be
// able to wait for "something was released" without queueing.
type budget struct {
	stats    *Stats
	onChange func(used int64) // nil, or told every new used, under mu

	mu      sync.Mutex
	limit   int64         // fixed at creation
	used    int64         // guarded by mu
	fgWait  []*turn       // guarded by mu: foreground takers waiting, in turn (see acquire)
	changed chan struct{} // guarded by mu: closed (and replaced) on every release, and when a turn ends
}

func newBudget(limit int64, stats *Stats, onChange func(int64)) *budget {
	return &budget{limit: limit, stats: stats, onChange: onChange, changed: make(chan struct{})}
}

// set records a new used; called with mu held.
func (b *budget) set(used int64) {
	b.used = used
	b.stats.MemInUse.Store(used)
	if b.onChange != nil {
		b.onChange(used)
	}
}

// clamp lets one block larger than the whole budget still be read: it is
// charged as the whole budget, so it runs alone.
func (b *budget) clamp(n int64) int64 { return min(n, b.limit) }

// room reports whether tryAcquire(n) would take n bytes now.
func (b *budget) room(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fitsLocked(b.clamp(n))
}

// fitsLocked: n bytes are free and no foreground read waits. Called with
// b.mu held.
func (b *budget) fitsLocked(n int64) bool { return len(b.fgWait) == 0 && b.used+n <= b.limit }

// tryAcquire takes n bytes if they are free and no foreground read waits.
func (b *budget) tryAcquire(n int64) bool {
	n = b.clamp(n)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.fitsLocked(n) {
		return false
	}
	b.take(n)
	return true
}

// take is called with mu held.
func (b *budget) take(n int64) {
	b.set(b.used + n)
	storeMax(&b.stats.MemPeak, b.used)
}

// acquire takes n bytes for a foreground read, waiting if needed. Waiting
// takers are served in turn: only the first in line takes, and frees room
// between tries by calling evict, which frees one evictable holder and
// reports whether it found one; when it finds none, acquire waits for a
// release, or for poll when poll > 0 (an evict that spares busy holders
// for a while finds one once they idle), and tries again. Everything else
// that holds budget is a fetch or a copy in progress, which ends, so the
// wait ends too. In turn, a reader cannot lose the room it made to every
// later one, for good, with hundreds waiting; and the others do not evict
// meanwhile, which would give up far more than the first one needs.
func (b *budget) acquire(ctx context.Context, n int64, evict func() bool, poll time.Duration) error {
	n = b.clamp(n)
	b.mu.Lock()
	if len(b.fgWait) == 0 && b.used+n <= b.limit {
		b.take(n)
		b.mu.Unlock()
		return nil
	}
	me := &turn{n: n}
	b.fgWait = append(b.fgWait, me)
	defer func() {
		b.mu.Lock()
		if b.fgWait[0] == me {
			b.wakeLocked() // the next in line is first now
		}
		b.fgWait = slices.DeleteFunc(b.fgWait, func(w *turn) bool { return w == me })
		b.mu.Unlock()
	}()
	for {
		first := b.fgWait[0] == me
		if first && b.used+n <= b.limit {
			b.take(n)
			b.mu.Unlock()
			return nil
		}
		ch := b.changed
		b.mu.Unlock()
		if !first || !evict() {
			wait := poll
			if !first {
				wait = 0 // until a release, or this taker's turn
			}
			if err := waitRelease(ctx, ch, wait); err != nil {
				return err
			}
		}
		b.mu.Lock()
	}
}

// turn is a foreground taker's place in line (by its address).
type turn struct{ n int64 }

// waitRelease waits for ch (a release), for poll when poll > 0, or for ctx.
func waitRelease(ctx context.Context, ch <-chan struct{}, poll time.Duration) error {
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTimer(poll)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-ch:
	case <-tick:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// release returns n bytes (as given to acquire) and wakes every waiter.
func (b *budget) release(n int64) {
	n = b.clamp(n)
	b.mu.Lock()
	b.set(b.used - n)
	b.wakeLocked()
	b.mu.Unlock()
}

// wakeLocked wakes every waiter; called with mu held.
func (b *budget) wakeLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// pressured says whether a foreground read waits for room: new evictable
// holders (ready blocks) should then not be added.
func (b *budget) pressured() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.fgWait) > 0
}

// released returns a channel closed at the next release, for background
// workers waiting for room.
func (b *budget) released() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}
