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

// maxListRanges bounds the ranges of one listing alive at once, splits of
// splits included.
const maxListRanges = 32

// longRange: a range guessed to hold fewer pages than this past its first
// is not cut (cut, its ranges would cost more requests than they save
// round trips), and one that has listed this many pages in a row since its
// last cut is cut again, while fewer than maxListRanges are alive: its cut
// guessed short (names not zero-padded leave a range all of a bucket, as
// n01440764_1005 to _1999).
const longRange = 4

type lister struct {
	s         *Store
	prefix    string
	recursive bool
	slots     chan struct{}
	ranges    atomic.Int32 // ranges alive: started and not yet ended
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
// A range whose page is full hands what lies past it to new ranges, on its
// first page and on any later one while fewer than maxListRanges are
// alive: a guess that left it most of a large directory (its last range
// holds all that lies past the guessed names) is cut again as the short
// ranges end.
func (l *lister) listRange(ctx context.Context, after, upTo string) error {
	defer l.ranges.Add(-1)
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.slots }()
	token, ask, since := "", 0, 0
	for pages := 0; ; pages, since = pages+1, since+1 {
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
		keys := pg.keys()
		split := false
		if (pages == 0 || since >= longRange) && cap(l.slots) > 1 && l.ranges.Load() < maxListRanges {
			bound := upTo
			upTo = l.split(ctx, keys, upTo)
			if split = upTo != bound; split {
				since = 0
			}
		}
		if pages == 0 || split {
			// A server fills every page it can, past the range's bound too,
			// and may pay for each key it sends (versitygw reads each file's
			// metadata): the range's next page asks for about what is
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
	if len(page) < 2 {
		return upTo // a truncated page of one key or none shows nothing to guess from
	}
	most := maxListRanges - int(l.ranges.Load())
	if upTo != "" {
		rest := restGuess(page, len(l.prefix), upTo)
		if rest < longRange*len(page) {
			return upTo // ends about as soon as new ranges would
		}
		// Ranges of two pages at least: one of a page costs two requests
		// (the second finds the bound).
		most = min(most, rest/(2*len(page)))
	}
	pts := splitPoints(page, len(l.prefix), upTo, most)
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
//
// Those ranges of a page each leave the last one all that lies past them:
// in a directory of 300,000 numbered files, the page f0000000-f0000999
// cuts f0001 to f0009, and the last range, past f0009, holds 291 pages. So
// where the character before that one is of the same class, it bumps that
// one too (f001 to f009: ranges of ten pages, which cut themselves as they
// are listed), and the last range's first page the one before (f01 to
// f09): the ranges grow tenfold at each step, and the last one is reached
// in a few. When max leaves no room for all, the coarser cuts come first.
func splitPoints(page []string, keep int, upTo string, max int) []string {
	fine, q := finestPoints(page, keep, upTo)
	if len(fine) == 0 || max <= 0 {
		return nil
	}
	var coarse []string
	hi := slices.Max(page)
	tops := letterTops(page, keep)
	if from, to := tops.class(hi[q]); from != to {
		for q--; q >= keep && len(coarse) == 0; q-- {
			if lo, _ := tops.class(hi[q]); lo != from {
				break // another class: the name's stem, not its number
			}
			for d := hi[q] + 1; d > hi[q] && d <= to; d++ {
				if pt := hi[:q] + string([]byte{d}); upTo == "" || pt < upTo {
					coarse = append(coarse, pt)
				}
			}
		}
	}
	pts := spread(coarse, max)
	pts = append(pts, spread(fine, max-len(pts))...)
	slices.Sort(pts)
	return pts
}

// finestPoints is splitPoints' cut at one position (see there), all of it,
// and the position it bumps.
func finestPoints(page []string, keep int, upTo string) ([]string, int) {
	if len(page) < 2 {
		return nil, 0
	}
	lo, hi := slices.Min(page), slices.Max(page)
	tops := letterTops(page, keep)
	p := keep
	for p < len(lo) && p < len(hi) && lo[p] == hi[p] {
		p++
	}
	for q := min(p, len(hi)-1); q >= keep; q-- {
		head := hi[:q]
		alpha, most, _ := alphabet(page, head, tops)
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
			return nil, 0 // what is left likely fits a page or two
		}
		return spread(cands, want), q
	}
	return nil, 0
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
	tops := letterTops(page, keep)
	rest := 0
	for q := keep; q < len(hi); q++ {
		head := hi[:q]
		alpha, most, under := alphabet(page, head, tops)
		if under < 2 {
			break // only the last key itself goes on
		}
		if len(upTo) > q && strings.HasPrefix(upTo, head) {
			from, to := tops.class(upTo[q])
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
func alphabet(page []string, head string, tops letters) ([]byte, int, int) {
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
		from, to := tops.class(c)
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

// letters holds the last lower- and upper-case letters that keys use (0:
// none), past their shared prefix: names of hex digits use a-f, and a guess
// of names in g-z would only cost empty LISTs.
type letters struct{ lower, upper byte }

func letterTops(page []string, keep int) letters {
	var t letters
	for _, k := range page {
		for i := keep; i < len(k); i++ {
			switch c := k[i]; {
			case c >= 'a' && c <= 'z':
				t.lower = max(t.lower, c)
			case c >= 'A' && c <= 'Z':
				t.upper = max(t.upper, c)
			}
		}
	}
	return t
}

// class returns the range of characters c stands for: digits, lower case
// or upper case up to the last letter of its case the keys use (c at
// least), or c alone.
func (t letters) class(c byte) (lo, hi byte) {
	switch {
	case c >= '0' && c <= '9':
		return '0', '9'
	case c >= 'a' && c <= 'z':
		return 'a', max(t.lower, c)
	case c >= 'A' && c <= 'Z':
		return 'A', max(t.upper, c)
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
