package fuse

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/dataccel/dataccel/store"
)

// entry is one name in a directory: a subdirectory or a file.
type entry struct {
	name string
	dir  bool
	obj  store.Object // files only
}

// listing is one directory's entries, immutable once built.
type listing struct {
	entries []entry       // sorted by name: position finds one without a map of its own (a map costs about 40 B a file)
	dirs    []int         // indices in entries of the subdirectories, ascending
	at      time.Time     // when its LIST started: what it says is no older
	took    time.Duration // how long its LIST took (0 from a manifest)

	// used says a lookup or readdir asked for the listing (a fetch for one
	// counts); relistDue relists only used listings, so a directory the job
	// left costs one LIST more, not one a ttl for the mount's life.
	used atomic.Bool
	// lastUse is when the directory was last asked for (unix ns, to the
	// second; 0: never), through this listing or the ones it replaced:
	// dropIdle drops listings left longer than the kernel keeps what they
	// answered.
	lastUse atomic.Int64
}

// use marks l used at now and returns it.
func (l *listing) use(now time.Time) *listing {
	if !l.used.Load() { // loads, not stores, on every lookup
		l.used.Store(true)
	}
	if t := now.UnixNano(); t-l.lastUse.Load() >= int64(time.Second) {
		l.lastUse.Store(t)
	}
	return l
}

// lookUp returns l's entry for name; a name in bytes makes no string.
func lookUp[N string | []byte](l *listing, name N) (entry, bool) {
	i, ok := position(l, name)
	if !ok {
		return entry{}, false
	}
	return l.entries[i], true
}

// position returns the index of name in l.entries, by binary search (a
// name in bytes makes no string: it is only compared).
func position[N string | []byte](l *listing, name N) (int, bool) {
	lo, hi := 0, len(l.entries)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.entries[m].name < string(name) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(l.entries) && l.entries[lo].name == string(name)
}

// maxWarned bounds the keys a namespace remembers it warned about.
const maxWarned = 1 << 16

// namespace caches directory listings of the mounted prefix for ttl. A
// directory is listed with one delimiter LIST (paginated), which answers
// lookups of all its children at once: far cheaper than a HEAD per file.
//
// Listings are listed again in the background before their ttl passes
// (keepFresh), so that a job reading a directory never waits for its
// relisting: a directory of a million files takes a minute or more to
// list, and every lookup in it would wait that long once a ttl.
type namespace struct {
	bg  context.Context // the mount's lifetime: background relistings run on it
	st  store.Store
	ttl time.Duration
	log *slog.Logger
	now func() time.Time
	sf  singleflight.Group

	mu     sync.Mutex
	dirs   map[string]*listing // guarded by mu; key: directory prefix ending in "/" (or "" for the bucket root)
	gen    uint64              // guarded by mu; bumped when a listing is installed
	warned map[string]bool     // guarded by mu; keys already warned about

	relisting map[string]bool // guarded by mu; directories relistDue lists again before their ttl passed

	// grace is how long past its ttl a listing serves while the LISTs of
	// its directory fail on errors sending again may cure (an unreachable
	// or failing store): a job whose files are cached reads on through an
	// outage instead of failing its lookups. 0: never.
	grace time.Duration
	// riding: for each directory whose own LIST failed that way while a
	// listing of it was held, when it last failed: the listing serves past
	// the ttl for grace, and relistDue tries again once a lookup asked for
	// it since. Guarded by mu.
	riding map[string]time.Time
	// refused: the directories whose last LIST got an answer that no retry
	// changes (access denied, no bucket): their listings never ride.
	// Guarded by mu.
	refused map[string]bool
	// outage: the last LIST that ended failed as in an outage (guarded by
	// mu). An expired listing then serves while it is listed again in the
	// background (revalidate) instead of making its lookup wait for a LIST
	// that may fail only after --io-timeout: a job over a thousand
	// directories would wait that long in each.
	outage bool
	// outageLogged: the outage's start was logged (so its end will be);
	// outageWarnedAt: when a start was last logged. Guarded by mu.
	outageLogged   bool
	outageWarnedAt time.Time
	// revalidating bounds the background LISTs of revalidate.
	revalidating chan struct{}
	bgLists      sync.WaitGroup // revalidate's LISTs (tests wait for them)

	// changed, if set, is told the names a new listing of dir added,
	// removed or changed against the one it replaced (set before the
	// mount serves): the kernel's entries of them must go.
	changed func(dir string, names []string)
	// idle, if set, is told each directory whose listing dropIdle gave
	// back (set before the mount serves; told after ns.mu is released):
	// the kernel's entries of its files may go.
	idle func(dir string)
}

// newNamespace returns an empty namespace; background relistings
// (keepFresh, which the caller starts) stop when bg ends.
func newNamespace(bg context.Context, st store.Store, ttl time.Duration, log *slog.Logger) *namespace {
	return &namespace{bg: bg, st: st, ttl: ttl, log: log, now: time.Now, dirs: map[string]*listing{}, warned: map[string]bool{},
		relisting: map[string]bool{}, riding: map[string]time.Time{}, refused: map[string]bool{}, revalidating: make(chan struct{}, 2)}
}

// list returns the listing of dir (a prefix ending in "/", or ""), fetching
// it when absent or older than the TTL. Concurrent callers share one fetch.
func (ns *namespace) list(ctx context.Context, dir string) (*listing, error) {
	return ns.listAt(ctx, dir, time.Time{})
}

// fresh says whether l is younger than the ttl. A listing whose LIST took
// more than half the ttl serves half a ttl after it arrived: it cannot be
// younger, and listing it again at once would never end.
func (ns *namespace) fresh(l *listing, now time.Time) bool {
	return now.Sub(l.at) < ns.life(l)
}

// life is how long after its LIST began l serves (fresh says why).
func (ns *namespace) life(l *listing) time.Duration { return max(ns.ttl, l.took+ns.ttl/2) }

// ridesOut says whether l, dir's listing, serves past its life because
// the store fails LISTs: its own, or the last one that ended (ns.mu held).
func (ns *namespace) ridesOut(dir string, l *listing, now time.Time) bool {
	if ns.refused[dir] || now.Sub(l.at) >= ns.life(l)+ns.grace {
		return false
	}
	_, failed := ns.riding[dir]
	return failed || ns.outage
}

// servesFor says whether dir's listing is fresh and stays so for d at
// least (a relisting aside: it may not land in time).
func (ns *namespace) servesFor(dir string, d time.Duration) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	l := ns.dirs[dir]
	return l != nil && ns.now().Add(d).Sub(l.at) < ns.life(l)
}

// failing says whether the last LIST that ended failed as in an outage.
func (ns *namespace) failing() bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.outage
}

// serving returns dir's listing if it is fresh, or no longer while
// relistDue lists it again (it started before the listing expired: the
// listing serves for the ttl and the time its relisting takes) or while
// it rides out an outage (ns.grace), and marks it used; otherwise nil.
func (ns *namespace) serving(dir string) *listing {
	l, _ := ns.servingOrHeld(dir)
	return l
}

// servingOrHeld is serving that also returns the listing held for dir,
// serving or not (nil if none).
func (ns *namespace) servingOrHeld(dir string) (serve, held *listing) {
	ns.mu.Lock()
	l := ns.dirs[dir]
	now := ns.now()
	serves, revalidate := false, false
	if l != nil {
		serves = ns.answersLocked(dir, l, now)
		if !serves && ns.ridesOut(dir, l, now) {
			_, failed := ns.riding[dir]
			serves, revalidate = true, !failed // expired in an outage its own LIST has not met yet
		}
	}
	ns.mu.Unlock()
	if !serves {
		return nil, l
	}
	if revalidate {
		ns.revalidate(dir, l)
	}
	return l.use(now), l
}

// revalidate lists dir again in the background (l is its listing), two
// directories at a time; when two are being listed it does nothing: the
// next lookup, or relistDue, tries again.
func (ns *namespace) revalidate(dir string, l *listing) {
	select {
	case ns.revalidating <- struct{}{}:
	default:
		return
	}
	ns.bgLists.Add(1)
	go func() {
		defer ns.bgLists.Done()
		defer func() { <-ns.revalidating }()
		select {
		case <-ns.fetchShared(dir, l, time.Time{}):
		case <-ns.bg.Done():
		}
	}()
}

// listAt is list that also re-fetches a listing built before notBefore.
func (ns *namespace) listAt(ctx context.Context, dir string, notBefore time.Time) (*listing, error) {
	l, held := ns.servingOrHeld(dir)
	if l != nil && !l.at.Before(notBefore) {
		return l, nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r := <-ns.fetchShared(dir, held, notBefore):
			if r.Err != nil {
				if notBefore.IsZero() && ns.outageErr(r.Err) {
					if l := ns.serving(dir); l != nil {
						return l, nil // riding out an outage (the fetch marked it)
					}
				}
				return nil, r.Err
			}
			l := r.Val.(*listing)
			if l.at.Before(notBefore) {
				// A LIST that began before notBefore was in flight and
				// this call joined it: one more, which begins now.
				held = l
				continue
			}
			return l.use(ns.now()), nil
		}
	}
}

// awaitSince is listAt for background work with no context of its own:
// it waits for a listing of dir made since notBefore (held is the one
// found wanting) and returns the error of its fetch.
func (ns *namespace) awaitSince(dir string, held *listing, notBefore time.Time) error {
	for {
		r := <-ns.fetchShared(dir, held, notBefore)
		if r.Err != nil {
			return r.Err
		}
		if held = r.Val.(*listing); !held.at.Before(notBefore) {
			return nil
		}
	}
}

// fetchShared starts the fetch of dir's listing, or joins the one running,
// and returns the channel its result comes on. The fetch runs on the
// mount's context (ns.bg) so that one caller's interrupt does not fail the
// others sharing it; a caller still stops waiting on its own.
//
// held is the listing the caller found wanting (nil if none). A fetch
// that ended between the caller's look and this call installed a newer
// one: when that is fresh and made since notBefore, it is the answer, with
// no second LIST.
func (ns *namespace) fetchShared(dir string, held *listing, notBefore time.Time) <-chan singleflight.Result {
	return ns.sf.DoChan(dir, func() (any, error) {
		if l := ns.installedSince(dir, held, notBefore); l != nil {
			return l, nil
		}
		fctx, cancel := context.WithTimeout(ns.bg, 5*time.Minute)
		defer cancel()
		l, err := ns.fetch(fctx, dir)
		if err != nil {
			ns.failed(dir, err)
			return nil, err
		}
		ns.install(dir, l)
		return l, nil
	})
}

// install makes l (a new LIST's) dir's listing, unless the one held began
// later: a tree listing and a directory's own LIST may overlap, and the one
// that began first may end last.
func (ns *namespace) install(dir string, l *listing) {
	old := ns.held(dir)
	for {
		if old != nil && old.at.After(l.at) {
			return
		}
		// Outside ns.mu: a million entries take a while. A relisting that
		// finds nothing new leaves the generation (and so the saved
		// manifest) as it was.
		var changed []string
		if old != nil {
			changed = changedNames(old, l)
			l.lastUse.Store(old.lastUse.Load()) // the kernel's entries from old live on
		}
		ns.mu.Lock()
		if now := ns.dirs[dir]; now != old {
			// Another install came first: weigh l against it instead.
			old = now
			ns.mu.Unlock()
			continue
		}
		if old == nil || len(changed) > 0 {
			ns.gen++
		}
		ns.dirs[dir] = l
		ended := ns.listed(dir)
		ns.mu.Unlock()
		if ended {
			ns.log.Info("the store answers LISTs again: listings still riding out the outage are listed again as they are asked for")
		}
		if len(changed) > 0 && ns.changed != nil {
			ns.changed(dir, changed)
		}
		return
	}
}

// outageErr says whether a LIST's err is one of an outage: one that
// sending again may cure (the store unreachable, 5xx, timeouts), while
// the mount lives.
func (ns *namespace) outageErr(err error) bool {
	return ns.grace > 0 && store.Retryable(err) && ns.bg.Err() == nil
}

// outageWarnEvery spaces the warnings of outages that begin: a prefix
// that keeps failing beside healthy ones starts one at each failure.
const outageWarnEvery = 5 * time.Minute

// failed records that a LIST of dir failed with err. In an outage
// (outageErr) a listing held for dir rides it out: it serves past its ttl
// for ns.grace. After an answer no retry changes (access denied, no
// bucket) it serves no longer than its ttl, outage or not, until dir is
// listed again.
func (ns *namespace) failed(dir string, err error) {
	ns.mu.Lock()
	if !ns.outageErr(err) {
		delete(ns.riding, dir)
		if ns.bg.Err() != nil || store.Retryable(err) {
			ns.mu.Unlock()
			return // the mount ends, or no grace to ride on
		}
		ns.refused[dir] = true
		ended := ns.endOutage()
		ns.mu.Unlock()
		if ended {
			ns.log.Info("the store answers LISTs again, with an error no retry changes: listings of the directories it refuses no longer serve past --metadata-ttl",
				"dir", dir, "err", err)
		}
		return
	}
	now := ns.now()
	if ns.dirs[dir] != nil {
		ns.riding[dir] = now
	}
	warn := false
	if !ns.outage {
		ns.outage = true
		if now.Sub(ns.outageWarnedAt) >= outageWarnEvery {
			warn, ns.outageLogged, ns.outageWarnedAt = true, true, now
		}
	}
	ns.mu.Unlock()
	if warn {
		ns.log.Warn("the store fails LISTs: listings serve past --metadata-ttl until it answers, for up to --outage-grace",
			"dir", dir, "outage_grace", ns.grace, "err", err)
	}
}

// listed records that dir was listed (ns.mu held), and reports whether
// that ended an outage whose start was logged.
func (ns *namespace) listed(dir string) bool {
	delete(ns.riding, dir)
	delete(ns.refused, dir)
	return ns.endOutage()
}

// endOutage ends the outage, if any (ns.mu held), and reports whether its
// start was logged.
func (ns *namespace) endOutage() bool {
	logged := ns.outage && ns.outageLogged
	if ns.outage {
		ns.outage, ns.outageLogged = false, false
	}
	return logged
}

// installedSince returns dir's listing if it replaced held, is fresh and
// was made since notBefore; otherwise nil.
func (ns *namespace) installedSince(dir string, held *listing, notBefore time.Time) *listing {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	l := ns.dirs[dir]
	if l != nil && l != held && ns.fresh(l, ns.now()) && !l.at.Before(notBefore) {
		return l
	}
	return nil
}

// changedNames returns the names that a and b (sorted listings of one
// directory) do not hold alike: in one only, or another kind or version.
func changedNames(a, b *listing) []string {
	var out []string
	i, j := 0, 0
	for i < len(a.entries) || j < len(b.entries) {
		switch {
		case j == len(b.entries) || i < len(a.entries) && a.entries[i].name < b.entries[j].name:
			out = append(out, a.entries[i].name)
			i++
		case i == len(a.entries) || b.entries[j].name < a.entries[i].name:
			out = append(out, b.entries[j].name)
			j++
		default:
			x, y := a.entries[i], b.entries[j]
			if x.dir != y.dir || x.obj.ETag != y.obj.ETag || x.obj.Size != y.obj.Size || !x.obj.ModTime.Equal(y.obj.ModTime) {
				out = append(out, x.name)
			}
			i++
			j++
		}
	}
	return out
}

// keepFresh lists again, in the background, the listings that near the end
// of their ttl (relistDue), until ns.bg ends.
//
// Listings riding out an outage are tried again at least once a minute
// (the rest keep their ttl/8).
func (ns *namespace) keepFresh() {
	every := max(ns.ttl/8, time.Second)
	t := time.NewTicker(min(every, time.Minute))
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ns.bg.Done():
			return
		case now := <-t.C:
			if now.Sub(last) >= every-every/16 { // a tick late or early is still this one
				last = now
				ns.relistDue(ns.bg, false)
				ns.dropIdle()
			} else if ns.anyRiding() {
				ns.relistDue(ns.bg, true)
			}
		}
	}
}

// anyRiding says whether a listing rides out an outage of its own LIST.
func (ns *namespace) anyRiding() bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return len(ns.riding) > 0
}

// relistDue lists again, two at a time, the directories whose listings
// were used and are in the last quarter of their ttl, or closer to it than
// twice the time their LIST took (but not in its first half): a lookup in
// a directory the job reads then never waits for its relisting. The
// kernel caches entries for the ttl too and hides the job's use of a
// listing until they expire, so a listing counts as used once it was asked
// for at all: a directory the job left is relisted once more, then no
// longer. Failures are logged in one line; a listing that cannot be
// relisted is tried again at each tick while it serves, then no more (a
// LIST that fails for good was tried, and logged, every tick for the
// mount's life): lookups then wait for a fetch as on a first listing, and
// see its error. A listing riding out an outage is tried again at a tick
// once a lookup asked for it since it began to; a round stops at its first
// LIST that fails as in an outage (the others would wait for theirs), and
// in an outage lists one directory at a time: the first probes the store.
func (ns *namespace) relistDue(ctx context.Context, ridingOnly bool) {
	now := ns.now()
	var due []string
	found := map[string]*listing{}
	riding := map[string]time.Time{}
	ns.mu.Lock()
	for dir, l := range ns.dirs {
		if ns.relisting[dir] {
			continue
		}
		if f, ok := ns.riding[dir]; ok && ns.ridesOut(dir, l, now) {
			if l.lastUse.Load() >= f.UnixNano() { // asked for since its LIST failed
				due = append(due, dir)
				found[dir] = l
				riding[dir] = f
			}
			continue
		}
		if !ridingOnly && now.Sub(l.at) >= ns.ttl-min(max(ns.ttl/4, 2*l.took), ns.ttl/2) && ns.fresh(l, now) && l.used.Load() {
			due = append(due, dir)
			found[dir] = l
		}
	}
	inOutage := ns.outage
	ns.mu.Unlock()
	// Riding first, the longest riding first: a directory whose LIST keeps
	// failing (its time is its last failure) never stands before the
	// others, healthy ones perhaps, in a round that its failure ends.
	slices.SortFunc(due, func(a, b string) int {
		fa, ra := riding[a]
		fb, rb := riding[b]
		switch {
		case ra && rb && !fa.Equal(fb):
			return fa.Compare(fb)
		case ra != rb:
			if ra {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var (
		mu       sync.Mutex
		failed   int   // guarded by mu
		firstErr error // guarded by mu
	)
	var g errgroup.Group
	g.SetLimit(2)
	if inOutage {
		g.SetLimit(1) // one LIST probes the store
	}
	var outage atomic.Bool // a LIST of this round failed as in an outage: the rest wait for the next tick
	for _, dir := range due {
		g.Go(func() error {
			if outage.Load() {
				return nil
			}
			// Marked as it starts, not while it waits its turn: a listing
			// serves past its expiry only for the time of its own LIST.
			ns.mu.Lock()
			l := ns.dirs[dir]
			if l != found[dir] {
				ns.mu.Unlock()
				return nil // listed again meanwhile (a lookup after it expired)
			}
			if ns.fresh(l, ns.now()) {
				ns.relisting[dir] = true
			}
			ns.mu.Unlock()
			var err error
			select {
			case r := <-ns.fetchShared(dir, l, time.Time{}):
				err = r.Err
			case <-ctx.Done():
				err = ctx.Err()
			}
			ns.mu.Lock()
			delete(ns.relisting, dir)
			ns.mu.Unlock()
			if err != nil && ns.outageErr(err) {
				outage.Store(true)
			}
			if _, rode := riding[dir]; err != nil && !rode { // an outage ridden out was logged as it began
				mu.Lock()
				if failed++; firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			return nil
		})
	}
	g.Wait()
	if failed > 0 && ctx.Err() == nil {
		ns.log.Warn("relisting directories ahead of --metadata-ttl failed; their listings serve until it passes (and, while the store cannot be reached, for --outage-grace after)",
			"failed", failed, "of", len(due)-len(riding), "err", firstErr)
	}
}

// dropIdle drops the listings that serve no more (past their ttl, not
// being relisted) and that no lookup or readdir asked for in two ttls:
// the kernel's entries from them have expired (they live a ttl from the
// last answer), so the next lookup lists the directory as a first one
// would, and a mount that walked millions of files once does not hold
// them (about 150 B a file) for its life. Prefetch hints read from held
// listings and find none, as before the first listing. A listing young
// enough to ride out an outage (ns.grace) is kept: the lookup that meets
// the outage finds it to serve once its LIST fails (it was dropped while
// that LIST ran, and cached files failed their opens).
func (ns *namespace) dropIdle() {
	now := ns.now()
	var dropped []string
	ns.mu.Lock()
	for dir, l := range ns.dirs {
		if now.Sub(l.at) >= ns.life(l)+ns.grace && !ns.relisting[dir] && now.UnixNano()-l.lastUse.Load() >= int64(2*ns.ttl) {
			delete(ns.dirs, dir)
			delete(ns.riding, dir)
			delete(ns.refused, dir)
			dropped = append(dropped, dir)
		}
	}
	ns.mu.Unlock()
	if ns.idle != nil {
		for _, dir := range dropped {
			ns.idle(dir)
		}
	}
}

func (ns *namespace) fetch(ctx context.Context, dir string) (*listing, error) {
	b := newDirBuilder()
	start := ns.now()
	err := ns.st.List(ctx, dir, false, func(o store.Object) error {
		name := strings.TrimPrefix(o.Key, dir)
		if o.IsPrefix {
			name = strings.TrimSuffix(name, "/")
			if ns.validName(o.Key, name) {
				b.dirs[name] = true
			}
			return nil
		}
		ns.addFile(b, o, name)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list directory %q: %w", dir, err)
	}
	l := ns.build(b, start)
	l.took = ns.now().Sub(start)
	return l, nil
}

// errSparseTree: a tree listing stopped, as most of what it listed lay in
// directories nobody asked for.
var errSparseTree = errors.New("tree listing: mostly directories not asked for")

// sparseSlack is how many keys of directories not asked for a tree listing
// takes before it weighs them against those asked for: a quarter of a
// page, so that a tree that is mostly what nobody asked for stops within
// its first page, before its listing splits into ranges in parallel (one
// request, where a later stop costs the ranges in flight too).
const sparseSlack = 256

// listTree lists everything under root (a directory prefix) with one
// recursive listing, and installs a listing of every directory in it, as
// its own delimiter LIST would have built it. It stops with errSparseTree,
// installing nothing, once more than sparseSlack keys lie in directories
// that asked does not name and they outnumber those in directories it does:
// then the directories' own LISTs cost less. A recursive listing returns
// up to a thousand keys a request where a LIST of one directory of a deep
// tree returns a handful, and its pages are read in parallel key ranges:
// for a tree of many small directories it costs a fraction of the
// requests and round trips.
func (ns *namespace) listTree(ctx context.Context, root string, asked func(dir string) bool) (dirs int, err error) {
	builders := map[string]*dirBuilder{}
	builder := func(dir string) *dirBuilder {
		b := builders[dir]
		if b == nil {
			b = newDirBuilder()
			builders[dir] = b
		}
		return b
	}
	wanted, unwanted := 0, 0
	start := ns.now()
	err = ns.st.List(ctx, root, true, func(o store.Object) error {
		if o.IsPrefix || !strings.HasPrefix(o.Key, root) {
			return nil
		}
		dir, rel := root, o.Key[len(root):]
		b := builder(dir) // a directory whose keys all lie under skipped names lists empty, as its own LIST would
		for {
			i := strings.IndexByte(rel, '/')
			if i < 0 {
				break
			}
			name := rel[:i]
			if !ns.validName(dir+name+"/", name) {
				// Skipped, as its directory's own LIST skips its prefix;
				// still weighed, or a tree of such keys would be listed
				// to its end.
				if unwanted++; unwanted > sparseSlack && unwanted > wanted {
					return errSparseTree
				}
				return nil
			}
			b.dirs[name] = true
			dir, rel = dir+name+"/", rel[i+1:]
			b = builder(dir)
		}
		if asked(dir) {
			wanted++
		} else if unwanted++; unwanted > sparseSlack && unwanted > wanted {
			return errSparseTree
		}
		ns.addFile(b, o, rel)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list tree %q: %w", root, err)
	}
	took := ns.now().Sub(start)
	for dir, b := range builders {
		l := ns.build(b, start)
		l.took = took
		ns.install(dir, l)
	}
	return len(builders), nil
}

// addFile adds object o, named name in b's directory, unless it is the
// directory's own marker object or its name cannot be a path.
func (ns *namespace) addFile(b *dirBuilder, o store.Object, name string) {
	if name == "" || strings.HasSuffix(name, "/") {
		if o.Size > 0 { // a marker is the directory; its bytes have no path
			ns.warn(o.Key, "a directory marker object with content: the directory shows, its bytes do not")
		}
		return
	}
	if ns.validName(o.Key, name) {
		b.files[name] = o
	}
}

// dirBuilder collects one directory's children before they become a listing.
type dirBuilder struct {
	files map[string]store.Object
	dirs  map[string]bool
}

func newDirBuilder() *dirBuilder {
	return &dirBuilder{files: map[string]store.Object{}, dirs: map[string]bool{}}
}

func (ns *namespace) build(b *dirBuilder, at time.Time) *listing {
	l := &listing{at: at}
	l.entries = make([]entry, 0, len(b.files)+len(b.dirs))
	for name := range b.dirs {
		l.entries = append(l.entries, entry{name: name, dir: true})
	}
	for name, o := range b.files {
		if b.dirs[name] {
			ns.warn(o.Key, "a directory of the same name exists")
			continue
		}
		l.entries = append(l.entries, entry{name: name, obj: o})
	}
	sort.Slice(l.entries, func(i, j int) bool { return l.entries[i].name < l.entries[j].name })
	for i, e := range l.entries {
		if e.dir {
			l.dirs = append(l.dirs, i)
		}
	}
	return l
}

// snapshot returns the cached listings that are still fresh (for a
// manifest: a stale one would be listed again by the next mount anyway,
// and would make the others look as old as itself), in directory order,
// the generation (a number that changes whenever a listing is installed)
// and the start of the oldest one's LIST: the listings a manifest saves
// are no older than that. Each listing is copied as the sequence reaches it, under ns.mu
// for that listing alone: a million files are never copied at once, nor
// ns.mu held while they are. A listing installed after the call may be in
// the sequence, which changes the generation, so a caller that saves by
// generation saves again; one dropped after it (dropIdle) is not, which
// changes nothing: only listings a snapshot skips, past their ttl, go.
func (ns *namespace) snapshot() (iter.Seq[store.ManifestDir], uint64, time.Time) {
	now := ns.now()
	ns.mu.Lock()
	var names []string
	var oldest time.Time
	for dir, l := range ns.dirs {
		if !ns.fresh(l, now) {
			continue
		}
		names = append(names, dir)
		if oldest.IsZero() || l.at.Before(oldest) {
			oldest = l.at
		}
	}
	gen := ns.gen
	ns.mu.Unlock()
	slices.Sort(names)
	return func(yield func(store.ManifestDir) bool) {
		for _, dir := range names {
			ns.mu.Lock()
			l := ns.dirs[dir]
			var md store.ManifestDir
			if l != nil {
				md.Dir = dir
				for _, e := range l.entries {
					if e.dir {
						md.Subdirs = append(md.Subdirs, e.name)
					} else {
						md.Files = append(md.Files, e.obj)
					}
				}
			}
			ns.mu.Unlock()
			if l != nil && !yield(md) {
				return
			}
		}
	}, gen, oldest
}

// generation is the number snapshot would return, without the copy.
func (ns *namespace) generation() uint64 {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.gen
}

// restore installs listings from a manifest, listed at listed (zero, or a
// time to come from a clock set back: now); those outside root are
// ignored. A manifest is a file on disk: names are checked again as a
// listing would check them, so a damaged or crafted one cannot put an
// unsafe name in the mount.
func (ns *namespace) restore(root string, dirs []store.ManifestDir, listed time.Time) {
	at := ns.now()
	if !listed.IsZero() && listed.Before(at) {
		at = listed
	}
	built := make(map[string]*listing, len(dirs))
	for _, md := range dirs {
		if !strings.HasPrefix(md.Dir, root) || !ns.validDir(md.Dir[len(root):]) {
			continue
		}
		b := newDirBuilder()
		for _, name := range md.Subdirs {
			if ns.validName(md.Dir+name+"/", name) {
				b.dirs[name] = true
			}
		}
		for _, o := range md.Files {
			name, ok := strings.CutPrefix(o.Key, md.Dir)
			if ok && !o.IsPrefix && ns.validName(o.Key, name) {
				b.files[name] = o
			}
		}
		built[md.Dir] = ns.build(b, at)
	}
	ns.mu.Lock()
	for dir, l := range built {
		ns.dirs[dir] = l
	}
	ns.gen++
	ns.mu.Unlock()
}

// validDir says whether rel ("" or "a/b/") is a path of valid names.
func (ns *namespace) validDir(rel string) bool {
	if rel == "" {
		return true
	}
	if !strings.HasSuffix(rel, "/") {
		return false
	}
	for _, name := range strings.Split(strings.TrimSuffix(rel, "/"), "/") {
		if invalidNameReason(name) != "" {
			return false
		}
	}
	return true
}

// validName says whether name can be a file name in the mount. Keys whose
// names are empty ("a//b"), "." or "..", contain NUL or exceed NAME_MAX
// would break POSIX paths or escape the mount: they are skipped with one
// warning each.
func (ns *namespace) validName(key, name string) bool {
	if reason := invalidNameReason(name); reason != "" {
		ns.warn(key, reason)
		return false
	}
	return true
}

func invalidNameReason(name string) string {
	switch {
	case name == "":
		return "empty path segment"
	case name == "." || name == "..":
		return "dot segment"
	case strings.IndexByte(name, 0) >= 0:
		return "NUL byte in name"
	case strings.IndexByte(name, '/') >= 0:
		return "slash in name"
	case len(name) > 255:
		return "name longer than 255 bytes"
	}
	return ""
}

func (ns *namespace) warn(key, reason string) {
	ns.mu.Lock()
	seen := ns.warned[key]
	if !seen && len(ns.warned) >= maxWarned {
		clear(ns.warned) // a bucket of millions of such keys: warned again, not held for good
	}
	ns.warned[key] = true
	ns.mu.Unlock()
	if !seen {
		ns.log.Warn("skipping object key that cannot be a path in the mount", "key", fmt.Sprintf("%q", key), "reason", reason)
	}
}

// lookup finds name in dir.
func (ns *namespace) lookup(ctx context.Context, dir, name string) (entry, bool, error) {
	l, err := ns.list(ctx, dir)
	if err != nil {
		return entry{}, false, err
	}
	e, ok := lookUp(l, name)
	return e, ok, nil
}

// answersNow says whether dir's listing answers lookups from memory now
// (fresh, or being listed again), without counting a use of it.
func (ns *namespace) answersNow(dir string) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	l := ns.dirs[dir]
	return l != nil && ns.answersLocked(dir, l, ns.now())
}

// answersLocked: dir's listing l is fresh, or being listed again (ns.mu
// held).
func (ns *namespace) answersLocked(dir string, l *listing, now time.Time) bool {
	return ns.fresh(l, now) || ns.relisting[dir]
}

// held returns dir's listing, however old (prefetch hints tolerate a stale
// one), or nil if dir was never listed; it never lists.
func (ns *namespace) held(dir string) *listing {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.dirs[dir]
}

// next returns up to n files that follow key in its directory's listing,
// from what is already cached (it never fetches: prefetch hints must not
// add round trips).
func (ns *namespace) next(key string, n int) []store.Object {
	dir, name := splitKey(key)
	l := ns.held(dir)
	if l == nil {
		return nil
	}
	i, ok := position(l, name)
	if !ok {
		return nil
	}
	var out []store.Object
	for _, e := range l.entries[i+1:] {
		if len(out) == n {
			break
		}
		if !e.dir {
			out = append(out, e.obj)
		}
	}
	return out
}

// splitKey splits an object key into its directory prefix and base name.
func splitKey(key string) (dir, name string) {
	i := strings.LastIndexByte(key, '/')
	return key[:i+1], key[i+1:]
}

// files returns the files directly in dir, from the cached listing only.
func (ns *namespace) files(dir string) []store.Object {
	l := ns.held(dir)
	if l == nil {
		return nil
	}
	out := make([]store.Object, 0, len(l.entries))
	for _, e := range l.entries {
		if !e.dir {
			out = append(out, e.obj)
		}
	}
	return out
}

// subdirs returns the directories in dir's cached listing, as key prefixes
// in name order.
func (ns *namespace) subdirs(dir string) []string {
	l := ns.held(dir)
	if l == nil {
		return nil
	}
	var out []string
	for _, e := range l.entries {
		if e.dir {
			out = append(out, dir+e.name+"/")
		}
	}
	return out
}

// refresh lists dirs again, parallel at a time, replacing listings made
// before the call; gate runs before each LIST (to yield to reads) and an
// error from it stops the refresh.
func (ns *namespace) refresh(ctx context.Context, dirs []string, parallel int, gate func(context.Context) error) error {
	notBefore := ns.now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, dir := range dirs {
		g.Go(func() error {
			if err := gate(gctx); err != nil {
				return err
			}
			_, err := ns.listAt(gctx, dir, notBefore)
			return err
		})
	}
	return g.Wait()
}
