package fuse

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// walkAfter is how many subdirectories of one directory a walker must list
// before the rest of them are listed ahead of it: one is an ls, two in a
// row are a walk (find, os.walk, ImageFolder's scan of its classes).
const walkAfter = 2

// maxWalkQueue bounds the directories waiting to be listed ahead.
const maxWalkQueue = 1 << 16

// walkAhead lists the remaining subdirectories of a directory, parallel at
// a time, once a walker has listed walkAfter of them. A dataset walk lists
// every directory of the tree in turn, each a LIST round trip that the
// next one waits for: a thousand class directories cost a thousand round
// trips in a row before the first read. Listed ahead, the walker finds
// them listed or in flight (the namespace shares one LIST per directory).
//
// It lists one level at a time: the siblings of what the walker lists,
// never their subtrees, so a wrong guess costs the LISTs of one
// directory's subdirectories (no data), at most once per metadata TTL.
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
	last   string    // the subdirectory listed last (a repeated ls of one is no walk)
	listed int       // subdirectories listed in a row
	queued time.Time // when the rest were last queued; zero if never
}

func newWalkAhead(ctx context.Context, ns *namespace, parallel int, log *slog.Logger) *walkAhead {
	return &walkAhead{ns: ns, ctx: ctx, parallel: parallel, log: log, parents: map[string]*walkedParent{}}
}

// listed records that dir (a key prefix ending in "/", below the mount's
// root) was listed for a readdir, and queues the rest of its parent's
// subdirectories once that looks like a walk.
func (w *walkAhead) listed(dir string) {
	if w == nil || w.parallel <= 0 {
		return
	}
	parent, _ := splitKey(strings.TrimSuffix(dir, "/"))
	now := w.ns.now()
	w.mu.Lock()
	p := w.parents[parent]
	if p == nil {
		if len(w.parents) >= maxWalkQueue {
			w.mu.Unlock()
			return
		}
		p = &walkedParent{}
		w.parents[parent] = p
	}
	if p.last != dir {
		p.last = dir
		p.listed++
	}
	due := p.listed >= walkAfter && (p.queued.IsZero() || now.Sub(p.queued) >= w.ns.ttl)
	if due {
		p.queued, p.listed = now, 0
	}
	w.mu.Unlock()
	if !due {
		return
	}

	var todo []string
	for _, sub := range w.ns.subdirs(parent) { // from memory, outside the lock
		if w.ns.cached(sub) == nil {
			todo = append(todo, sub)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	todo = todo[:min(len(todo), maxWalkQueue-len(w.queue))]
	w.queue = append(w.queue, todo...)
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
