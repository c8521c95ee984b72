package fuse

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// walkAfter is how many subdirectories of one directory a walker must list
// before the ones after them are listed ahead of it: one is an ls, two are
// a walk (find, os.walk, ImageFolder's scan of its classes).
const walkAfter = 2

// maxWalkQueue bounds the directories waiting to be listed ahead, and the
// parents tracked.
const maxWalkQueue = 1 << 16

// walkAhead lists the subdirectories that follow the one a walker lists,
// parallel at a time, once it has listed walkAfter of one directory. A
// dataset walk lists every directory of the tree in turn, each a LIST round
// trip that the next one waits for: a thousand class directories cost a
// thousand round trips in a row before the first read. Listed ahead, the
// walker finds them listed or in flight (the namespace shares one LIST per
// directory).
//
// Like a kernel's read-ahead, the window starts at twice the parallelism
// and doubles with each further subdirectory the walker lists: a full walk
// soon has every sibling in flight, while an ls of two directories lists a
// window more beside them and one inside the second (no data), at most
// once per metadata TTL. It lists as deep as the walker has gone: once the
// walker has listed inside two subdirectories of one directory, the
// subdirectories listed ahead beside them are listed as many levels down,
// so that a tree of several levels costs no round trip per directory the
// walker enters (after one, an ls of the next is as likely as a walk).
type walkAhead struct {
	ns       *namespace
	ctx      context.Context // the mount's lifetime
	parallel int
	log      *slog.Logger

	maxParents int // bounds parents

	mu      sync.Mutex
	parents map[string]*walkedParent // guarded by mu; by parent directory
	queue   []walkItem               // guarded by mu: siblings to list, in order
	inside  []walkItem               // guarded by mu: subdirectories to list first, a stack
	running int                      // guarded by mu: workers alive
}

// pruneLocked makes room in parents, which a mount that walks more
// directories than it bounds would otherwise fill for good, and then list
// nothing ahead: the parents whose window has not moved for the metadata
// TTL go (a walk of them would start over anyway), and, when fewer than an
// eighth go that way, others at random up to an eighth: the state is a
// hint, a parent dropped in a walk starts its window over, and the scan of
// the map is paid once per eighth of it. Called with w.mu held.
func (w *walkAhead) pruneLocked(now time.Time) {
	keep := w.maxParents - max(1, w.maxParents/8)
	for dir, p := range w.parents {
		if now.Sub(p.at) >= w.ns.ttl {
			delete(w.parents, dir)
		}
	}
	for dir := range w.parents {
		if len(w.parents) <= keep {
			break
		}
		delete(w.parents, dir)
	}
}

// walkItem is a directory to list ahead, and how many levels of its
// subdirectories to list after it.
type walkItem struct {
	dir    string
	levels int
}

type walkedParent struct {
	last   string    // the name of the subdirectory listed last (a repeated ls of one is no walk)
	listed int       // distinct subdirectories listed, up to walkAfter
	window int       // subdirectories listed ahead of the walker's position
	ahead  int       // subdirectories before this index (in name order) are queued
	at     time.Time // when the window last moved
	depth  int       // levels the walker went down inside one of the subdirectories
	// downs counts the subdirectories the walker listed inside, up to
	// walkAfter (lastDown the last): only then are the subdirectories
	// listed ahead listed below too.
	downs    int
	lastDown string
	entered  bool // its first window is queued (the walker entered it, or it was listed ahead below)
}

func newWalkAhead(ctx context.Context, ns *namespace, parallel int, log *slog.Logger) *walkAhead {
	return &walkAhead{ns: ns, ctx: ctx, parallel: parallel, log: log, maxParents: maxWalkQueue, parents: map[string]*walkedParent{}}
}

// listed records that dir (a key prefix ending in "/", below the mount's
// root) was listed for a readdir or a first lookup and, once that looks
// like a walk, queues the subdirectories that follow it in its parent's
// listing. The walker goes on into what it lists: the subdirectories of a
// directory it reached in a walk are queued at once, not after it has
// listed two of them (a tree two levels deep would otherwise cost two
// round trips in a row per directory).
func (w *walkAhead) listed(dir string) {
	if w == nil || w.parallel <= 0 {
		return
	}
	parent, name := splitKey(strings.TrimSuffix(dir, "/"))
	if depth, walked := w.advance(parent, name, 0); walked {
		w.advance(dir, "", depth-1)
	}
}

// advance records that the walker listed the subdirectory name of dir (""
// when it entered dir in a walk of dir's parent, or when a worker listed
// dir ahead: levels says how deep the tree below dir is known to go),
// queues the window of dir's subdirectories after it once dir is being
// walked, each to be listed with as many levels below it as the walker has
// gone down inside dir's subdirectories, and reports that depth and
// whether dir is being walked. It costs a map lookup and a binary search
// in dir's listing, whatever the number of its subdirectories.
func (w *walkAhead) advance(dir, name string, levels int) (depth int, walked bool) {
	l := w.ns.held(dir)
	if l == nil {
		return 0, false
	}
	pos := -1 // the walker's place among dir's subdirectories
	if name != "" {
		var ok bool
		if pos, ok = subdirPos(l, name); !ok {
			return 0, false
		}
	}
	now := w.ns.now()
	w.mu.Lock()
	p := w.parents[dir]
	if p == nil {
		if len(w.parents) >= w.maxParents {
			w.pruneLocked(now)
		}
		p = &walkedParent{}
		w.parents[dir] = p
	}
	if now.Sub(p.at) >= w.ns.ttl { // a walk after the listings expired starts over
		p.window, p.ahead, p.entered = 0, 0, false
	}
	var exp expansion
	switch {
	case name == "":
		p.depth = max(p.depth, levels)
		if p.entered { // listed ahead, or entered, before: its first window is queued
			depth = p.depth // read under mu: another walker's advance writes it
			w.mu.Unlock()
			return depth, true
		}
		p.listed, p.entered = walkAfter, true
		depth = p.depth
	default:
		if p.last != name {
			p.last = name
			p.listed = min(p.listed+1, walkAfter)
		}
		exp = w.wentDown(dir, p.depth)
		// Below the siblings only once the walker has gone down into two
		// of them: after one, an ls of another is as likely.
		if p.downs >= walkAfter {
			depth = p.depth
		}
	}
	if p.listed < walkAfter {
		w.mu.Unlock()
		w.expand(exp)
		return depth, false
	}
	from, to := 0, 0
	if len(l.dirs) > 0 {
		p.window = min(max(2*p.window, 2*w.parallel), maxWalkQueue)
		from, to = max(p.ahead, pos+1), min(pos+1+p.window, len(l.dirs))
		if from < to {
			p.ahead, p.at = to, now
		}
	}
	w.mu.Unlock()

	var todo []walkItem
	for _, i := range l.dirs[min(from, to):to] {
		if sub := dir + l.entries[i].name + "/"; w.ns.serving(sub) == nil {
			todo = append(todo, walkItem{sub, depth})
		}
	}
	w.enqueue(todo, name == "")
	w.expand(exp)
	return depth, true
}

// expansion is a window of subdirectories of parent, queued before the
// walker was seen going down into them, to be listed levels further down
// now that it was: those after the subdirectory named after, up to ahead.
type expansion struct {
	parent, after string
	ahead, levels int
}

// wentDown records that the walker listed inside dir, whose own
// subdirectories it had gone depth levels down into: dir's parent has one
// more subdirectory gone into, and its ancestors are depth+1, depth+2...
// levels deep. When that makes walkAfter subdirectories of the parent
// gone into, it returns the window of the parent's subdirectories queued
// so far, to be listed below too. Callers hold mu.
func (w *walkAhead) wentDown(dir string, depth int) (exp expansion) {
	if dir == "" {
		return exp
	}
	parent, name := splitKey(strings.TrimSuffix(dir, "/"))
	p := w.parents[parent]
	if p == nil {
		return exp
	}
	first := p // dir's parent
	expands := false
	if p.lastDown != name && p.downs < walkAfter {
		p.lastDown = name
		p.downs++
		expands = p.downs == walkAfter
	}
	for up := parent; p != nil && p.depth < depth+1; p = w.parents[up] {
		depth++
		p.depth = depth
		if up == "" {
			break
		}
		up, _ = splitKey(strings.TrimSuffix(up, "/"))
	}
	if expands {
		exp = expansion{parent: parent, after: name, ahead: first.ahead, levels: first.depth}
	}
	return exp
}

// expand queues the subdirectories of an expansion's window for listing
// below them.
func (w *walkAhead) expand(exp expansion) {
	if exp.levels <= 0 {
		return
	}
	l := w.ns.held(exp.parent)
	if l == nil {
		return
	}
	pos, ok := subdirPos(l, exp.after)
	if !ok {
		return
	}
	var todo []walkItem
	for _, i := range l.dirs[min(pos+1, len(l.dirs)):min(max(exp.ahead, pos+1), len(l.dirs))] {
		todo = append(todo, walkItem{exp.parent + l.entries[i].name + "/", exp.levels})
	}
	w.enqueue(todo, false)
}

// subdirPos is the place of the subdirectory name among l's
// subdirectories (l.dirs), or false when l has no such subdirectory.
func subdirPos(l *listing, name string) (int, bool) {
	i, ok := position(l, name)
	if !ok || !l.entries[i].dir {
		return 0, false
	}
	pos, _ := slices.BinarySearch(l.dirs, i)
	return pos, true
}

// enqueue queues items for listing and starts workers for them: the
// subdirectories of a directory being entered (inside) before the
// siblings of the walker's place, as the walker goes down before it goes on.
func (w *walkAhead) enqueue(items []walkItem, inside bool) {
	if len(items) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	items = items[:min(len(items), maxWalkQueue-len(w.queue)-len(w.inside))]
	if inside {
		for _, it := range slices.Backward(items) { // popped from the end, in order
			w.inside = append(w.inside, it)
		}
	} else {
		w.queue = append(w.queue, items...)
	}
	for ; w.running < w.parallel && w.running < len(w.queue)+len(w.inside); w.running++ {
		go w.worker()
	}
}

// worker lists queued directories until the queues are empty or the mount
// ends, and queues the subdirectories of each that the walk will go down
// into. A failed LIST drops the queues: the store is failing, and the
// walker's own readdir reports it.
func (w *walkAhead) worker() {
	for {
		w.mu.Lock()
		if len(w.queue)+len(w.inside) == 0 || w.ctx.Err() != nil {
			w.queue, w.inside = nil, nil
			w.running--
			w.mu.Unlock()
			return
		}
		var it walkItem
		if n := len(w.inside); n > 0 {
			it, w.inside = w.inside[n-1], w.inside[:n-1]
		} else {
			it, w.queue = w.queue[0], w.queue[1:]
		}
		w.mu.Unlock()
		if w.ns.serving(it.dir) == nil {
			if _, err := w.ns.list(w.ctx, it.dir); err != nil {
				if w.ctx.Err() == nil {
					w.log.Debug("listing ahead of a walk failed; dropping the rest", "dir", it.dir, "err", err)
					w.mu.Lock()
					w.queue, w.inside = nil, nil
					w.mu.Unlock()
				}
				continue
			}
		}
		if it.levels > 0 {
			w.advance(it.dir, "", it.levels-1)
		}
	}
}
