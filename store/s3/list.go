package s3

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/store"
)

// A listing is paged: one request per 1,000 keys, each waiting for the
// last one's continuation token. A directory of 100,000 files is then 100
// round trips in a row. S3 has no way to ask where a listing's keys lie, but
// the first page shows how they are named (img_000123.jpg, n01440764_10026,
// hex digests), which is enough to guess keys that cut the rest into ranges.
// Each range is listed from its lower bound (start-after) and stops at its
// upper bound, all in parallel; a bad guess costs a few empty pages and never
// loses or repeats an entry.

// maxListRanges bounds the ranges of one listing, splits of splits included.
const maxListRanges = 32

type lister struct {
	s         *Store
	prefix    string
	recursive bool
	slots     chan struct{}
	ranges    atomic.Int32
	g         *errgroup.Group

	mu       sync.Mutex // serializes fn
	fn       func(store.Object) error
	prefixes map[string]bool // guarded by mu: common prefixes already passed to fn
}

// List implements store.Store. Objects come in no fixed order: a listing
// longer than a page is split into key ranges listed in parallel.
func (s *Store) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	g, gctx := errgroup.WithContext(ctx)
	l := &lister{s: s, prefix: prefix, recursive: recursive, g: g, fn: fn,
		slots: make(chan struct{}, s.listParallel), prefixes: map[string]bool{}}
	l.ranges.Store(1)
	g.Go(func() error { return l.listRange(gctx, "", "") })
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// listRange lists the keys in (after, upTo]; "" is the start or the end.
// A range whose first page is full hands what lies past it to new ranges.
func (l *lister) listRange(ctx context.Context, after, upTo string) error {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.slots }()
	token, ask := "", 0
	for pages := 0; ; pages++ {
		pg, err := l.s.listPage(ctx, l.prefix, l.recursive, after, token, ask)
		if err != nil {
			return err
		}
		// Objects and prefixes are each sorted: stop each at upTo.
		past := false
		for _, o := range pg.objects {
			if upTo != "" && o.Key > upTo {
				past = true
				break
			}
			if after != "" && o.Key <= after {
				continue // a server that ignores start-after: another range has it
			}
			if err := l.emit(o); err != nil {
				return err
			}
		}
		for _, p := range pg.prefixes {
			if upTo != "" && p > upTo {
				past = true
				break
			}
			if err := l.emit(store.Object{Key: p, IsPrefix: true}); err != nil {
				return err
			}
		}
		if past || !pg.truncated {
			return nil
		}
		ask = 0
		if pages == 0 {
			keys := pg.keys()
			if cap(l.slots) > 1 && l.ranges.Load() < maxListRanges {
				upTo = l.split(ctx, keys, upTo)
			}
			// A server fills every page it can, past the range's bound too,
			// and may pay for each key it sends (versitygw reads each file's
			// metadata): the range's second page asks for about what is
			// guessed to be left before the bound. A low guess costs one more
			// page; the pages after it are full.
			if upTo != "" {
				rest := restGuess(keys, len(l.prefix), upTo)
				if ask = rest + rest/4 + 2; ask >= l.s.pageKeys() {
					ask = 0
				}
			}
		}
		token = pg.next
	}
}

// split starts ranges for what lies past the page's keys, up to upTo, and
// returns the new upper bound of the calling range.
func (l *lister) split(ctx context.Context, page []string, upTo string) string {
	pts := splitPoints(page, len(l.prefix), upTo, maxListRanges-int(l.ranges.Load()))
	if len(pts) == 0 {
		return upTo
	}
	l.ranges.Add(int32(len(pts)))
	for i, lo := range pts {
		hi := upTo
		if i+1 < len(pts) {
			hi = pts[i+1]
		}
		l.g.Go(func() error { return l.listRange(ctx, lo, hi) })
	}
	return pts[0]
}

func (l *lister) emit(obj store.Object) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if obj.IsPrefix {
		// A prefix whose keys straddle a bound is reported by both ranges.
		if l.prefixes[obj.Key] {
			return nil
		}
		l.prefixes[obj.Key] = true
	}
	return l.fn(obj)
}

// splitPoints guesses keys past every key of page and before upTo ("" for
// none) that cut the keys still to come into ranges of about one page each,
// at most max of them. It bumps one character of the page's last key: the
// one at the first position where the page's keys differ or, when that
// character is the last of its class (9, z, Z), the nearest one before it
// that is not. The next characters are guessed from the class of those seen
// there (digits, lower case, upper case, others as seen), and how many keys
// each holds from the most the page has under one. Keys share the first
// keep bytes (the listing's prefix), which are never bumped.
func splitPoints(page []string, keep int, upTo string, max int) []string {
	if len(page) < 2 || max <= 0 {
		return nil
	}
	lo, hi := slices.Min(page), slices.Max(page)
	p := keep
	for p < len(lo) && p < len(hi) && lo[p] == hi[p] {
		p++
	}
	for q := min(p, len(hi)-1); q >= keep; q-- {
		head := hi[:q]
		alpha, most, _ := alphabet(page, head)
		var cands []string
		for _, c := range alpha {
			if c > hi[q] && c != '/' {
				if pt := head + string([]byte{c}); upTo == "" || pt < upTo {
					cands = append(cands, pt)
				}
			}
		}
		if len(cands) == 0 {
			continue
		}
		want := (len(cands)*most + len(page) - 1) / len(page)
		if want < 2 {
			return nil // what is left likely fits a page or two
		}
		return spread(cands, min(want, max))
	}
	return nil
}

// restGuess guesses how many keys lie past every key of page and up to
// upTo, as splitPoints does, at every position of the page's last key where
// the page's keys differ: each character that may come there past the last
// key's own, below upTo, holds as many keys as the fullest one seen. The
// characters that may come there are those of the classes the page has
// there and, where upTo shares the position, upTo's (hex names: a page of
// 8... and 9... keys in a range up to c).
func restGuess(page []string, keep int, upTo string) int {
	if len(page) == 0 {
		return 0
	}
	hi := slices.Max(page)
	rest := 0
	for q := keep; q < len(hi); q++ {
		head := hi[:q]
		alpha, most, under := alphabet(page, head)
		if under < 2 {
			break // only the last key itself goes on
		}
		if len(upTo) > q && strings.HasPrefix(upTo, head) {
			from, to := class(upTo[q])
			for c := int(from); c <= int(to); c++ {
				alpha = append(alpha, byte(c))
			}
			slices.Sort(alpha)
			alpha = slices.Compact(alpha)
		}
		for _, c := range alpha {
			if c <= hi[q] || c == '/' {
				continue
			}
			if head+string([]byte{c}) >= upTo {
				break
			}
			rest += most
		}
	}
	return rest
}

// alphabet returns, sorted, the characters that may follow head: those the
// page's keys have there, widened to their whole class; the most keys that
// share one of them; and how many keys go on past head.
func alphabet(page []string, head string) ([]byte, int, int) {
	var seen [256]bool
	var count [256]int
	under := 0
	for _, k := range page {
		if len(k) <= len(head) || !strings.HasPrefix(k, head) {
			continue
		}
		under++
		c := k[len(head)]
		count[c]++
		from, to := class(c)
		for d := int(from); d <= int(to); d++ {
			seen[d] = true
		}
	}
	var out []byte
	for c := range seen {
		if seen[c] {
			out = append(out, byte(c))
		}
	}
	return out, slices.Max(count[:]), under
}

// class returns the range of characters c stands for: digits, lower case,
// upper case, or c alone.
func class(c byte) (lo, hi byte) {
	switch {
	case c >= '0' && c <= '9':
		return '0', '9'
	case c >= 'a' && c <= 'z':
		return 'a', 'z'
	case c >= 'A' && c <= 'Z':
		return 'A', 'Z'
	}
	return c, c
}

// spread keeps at most max of pts, evenly spaced.
func spread(pts []string, max int) []string {
	if len(pts) <= max {
		return pts
	}
	out := make([]string, 0, max)
	for i := range max {
		out = append(out, pts[i*len(pts)/max])
	}
	return out
}
