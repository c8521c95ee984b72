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
// once per metadata TTL. It lists no
// deeper than the walker has reached: the siblings of what it lists, and
// the subdirectories of the directory it enters.
type walkAhead struct {
	ns       *namespace
	ctx      context.Context // the mount's lifetime
	parallel int
	log      *slog.Logger

	mu      sync.Mutex
	parents map[string]*walkedParent // guarded by mu; by parent directory
	queue   []string                 // guarded by mu: directories to list, in order
	running int                      // guarded by mu: workers alive
}

type walkedParent struct {
	last   string    // the name of the subdirectory listed last (a repeated ls of one is no walk)
	listed int       // distinct subdirectories listed, up to walkAfter
	window int       // subdirectories listed ahead of the walker's position
	ahead  int       // subdirectories before this index (in name order) are queued
	at     time.Time // when the window last moved
}

func newWalkAhead(ctx context.Context, ns *namespace, parallel int, log *slog.Logger) *walkAhead {
	return &walkAhead{ns: ns, ctx: ctx, parallel: parallel, log: log, parents: map[string]*walkedParent{}}
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
	if w.advance(parent, name) {
		w.advance(dir, "")
	}
}

// advance records that the walker listed the subdirectory name of dir (""
// when it entered dir in a walk of dir's parent), queues the window of
// dir's subdirectories after it once dir is being walked, and reports
// whether dir is. It costs a map lookup and a binary search in dir's
// listing, whatever the number of its subdirectories.
func (w *walkAhead) advance(dir, name string) bool {
	l := w.ns.held(dir)
	if l == nil {
		return false
	}
	pos := -1 // the walker's place among dir's subdirectories
	if name != "" {
		i, ok := l.index[name]
		if !ok || !l.entries[i].dir {
			return false
		}
		pos, _ = slices.BinarySearch(l.dirs, i)
	}
	now := w.ns.now()
	w.mu.Lock()
	p := w.parents[dir]
	if p == nil {
		if len(w.parents) >= maxWalkQueue {
			w.mu.Unlock()
			return false
		}
		p = &walkedParent{}
		w.parents[dir] = p
	}
	switch {
	case name == "":
		p.listed = walkAfter
	case p.last != name:
		p.last = name
		p.listed = min(p.listed+1, walkAfter)
	}
	if now.Sub(p.at) >= w.ns.ttl { // a walk after the listings expired starts over
		p.window, p.ahead = 0, 0
	}
	if p.listed < walkAfter {
		w.mu.Unlock()
		return false
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

	var todo []string
	for _, i := range l.dirs[min(from, to):to] {
		if sub := dir + l.entries[i].name + "/"; w.ns.cached(sub) == nil {
			todo = append(todo, sub)
		}
	}
	w.enqueue(todo)
	return true
}

// enqueue queues dirs for listing and starts workers for them.
func (w *walkAhead) enqueue(dirs []string) {
	if len(dirs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	dirs = dirs[:min(len(dirs), maxWalkQueue-len(w.queue))]
	w.queue = append(w.queue, dirs...)
	for ; w.running < w.parallel && w.running < len(w.queue); w.running++ {
		go w.worker()
	}
}

// worker lists queued directories until the queue is empty or the mount
// ends. A failed LIST drops the queue: the store is failing, and the
// walker's own readdir reports it.
func (w *walkAhead) worker() {
	for {
		w.mu.Lock()
		if len(w.queue) == 0 || w.ctx.Err() != nil {
			w.queue = nil
			w.running--
			w.mu.Unlock()
			return
		}
		dir := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		if w.ns.cached(dir) != nil {
			continue // the walker got there first
		}
		if _, err := w.ns.list(w.ctx, dir); err != nil && w.ctx.Err() == nil {
			w.log.Debug("listing ahead of a walk failed; dropping the rest", "dir", dir, "err", err)
			w.mu.Lock()
			w.queue = nil
			w.mu.Unlock()
		}
	}
}
