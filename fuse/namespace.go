package fuse

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
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
	entries []entry // sorted by name
	index   map[string]int
	at      time.Time
}

func (l *listing) get(name string) (entry, bool) {
	i, ok := l.index[name]
	if !ok {
		return entry{}, false
	}
	return l.entries[i], true
}

// namespace caches directory listings of the mounted prefix for ttl. A
// directory is listed with one delimiter LIST (paginated), which answers
// lookups of all its children at once: far cheaper than a HEAD per file.
type namespace struct {
	st  store.Store
	ttl time.Duration
	log *slog.Logger
	now func() time.Time
	sf  singleflight.Group

	mu     sync.Mutex
	dirs   map[string]*listing // guarded by mu; key: directory prefix ending in "/" (or "" for the bucket root)
	warned map[string]bool     // guarded by mu; keys already warned about
}

func newNamespace(st store.Store, ttl time.Duration, log *slog.Logger) *namespace {
	return &namespace{st: st, ttl: ttl, log: log, now: time.Now, dirs: map[string]*listing{}, warned: map[string]bool{}}
}

// list returns the listing of dir (a prefix ending in "/", or ""), fetching
// it when absent or older than the TTL. Concurrent callers share one fetch.
func (ns *namespace) list(ctx context.Context, dir string) (*listing, error) {
	return ns.listAt(ctx, dir, time.Time{})
}

// listAt is list that also re-fetches a listing built before notBefore.
func (ns *namespace) listAt(ctx context.Context, dir string, notBefore time.Time) (*listing, error) {
	ns.mu.Lock()
	l := ns.dirs[dir]
	ns.mu.Unlock()
	if l != nil && ns.now().Sub(l.at) < ns.ttl && !l.at.Before(notBefore) {
		return l, nil
	}
	// The fetch runs on its own context so that one caller's interrupt does
	// not fail the others sharing it; the caller still stops waiting.
	ch := ns.sf.DoChan(dir, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		l, err := ns.fetch(fctx, dir)
		if err != nil {
			return nil, err
		}
		ns.mu.Lock()
		ns.dirs[dir] = l
		ns.mu.Unlock()
		return l, nil
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*listing), nil
	}
}

func (ns *namespace) fetch(ctx context.Context, dir string) (*listing, error) {
	b := newDirBuilder()
	err := ns.st.List(ctx, dir, false, func(o store.Object) error {
		name := strings.TrimPrefix(o.Key, dir)
		if o.IsPrefix {
			name = strings.TrimSuffix(name, "/")
			if ns.validName(o.Key, name) {
				b.dirs[name] = true
			}
			return nil
		}
		if name == "" || strings.HasSuffix(name, "/") {
			return nil // the directory's own marker object
		}
		if ns.validName(o.Key, name) {
			b.files[name] = o
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list directory %q: %w", dir, err)
	}
	return ns.build(b, ns.now()), nil
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
	l := &listing{index: make(map[string]int, len(b.files)+len(b.dirs)), at: at}
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
		l.index[e.name] = i
	}
	return l
}

// load replaces the listings of root and every directory below it with
// ones built from a full listing of root (a manifest): afterwards, lookups
// and readdirs under root cost no request until the TTL passes.
func (ns *namespace) load(root string, objs []store.Object) {
	builders := map[string]*dirBuilder{root: newDirBuilder()}
	ensure := func(dir string) *dirBuilder {
		b := builders[dir]
		if b == nil {
			b = newDirBuilder()
			builders[dir] = b
		}
		return b
	}
	for _, o := range objs {
		if !strings.HasPrefix(o.Key, root) {
			continue
		}
		rest := o.Key[len(root):]
		dir, skip := root, false
		// Walk down the directories; stop at the first bad segment, as a
		// per-directory listing would.
		for {
			i := strings.IndexByte(rest, '/')
			if i < 0 {
				break
			}
			name := rest[:i]
			if !ns.validName(o.Key, name) {
				skip = true
				break
			}
			ensure(dir).dirs[name] = true
			dir += name + "/"
			ensure(dir)
			rest = rest[i+1:]
		}
		if skip || rest == "" {
			continue // skipped, or a marker object
		}
		if ns.validName(o.Key, rest) {
			ensure(dir).files[rest] = o
		}
	}
	at := ns.now()
	built := make(map[string]*listing, len(builders))
	for dir, b := range builders {
		built[dir] = ns.build(b, at)
	}
	ns.mu.Lock()
	for dir := range ns.dirs {
		if strings.HasPrefix(dir, root) {
			delete(ns.dirs, dir)
		}
	}
	for dir, l := range built {
		ns.dirs[dir] = l
	}
	ns.mu.Unlock()
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
	e, ok := l.get(name)
	return e, ok, nil
}

// next returns up to n files that follow key in its directory's listing,
// from what is already cached (it never fetches: prefetch hints must not
// add round trips).
func (ns *namespace) next(key string, n int) []store.Object {
	dir, name := splitKey(key)
	ns.mu.Lock()
	l := ns.dirs[dir]
	ns.mu.Unlock()
	if l == nil {
		return nil
	}
	i, ok := l.index[name]
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
	ns.mu.Lock()
	l := ns.dirs[dir]
	ns.mu.Unlock()
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

// walk lists every directory under root, parallel at a time, through the
// listing cache: a directory that a lookup or readdir has listed (or is
// listing) costs no second LIST, and the walk's listings serve later
// lookups. With refresh, listings older than the walk are fetched again.
// gate runs before each LIST, so that the walk can yield to reads. It
// returns every file under root, for a manifest.
func (ns *namespace) walk(ctx context.Context, root string, refresh bool, parallel int, gate func(context.Context) error) ([]store.Object, error) {
	var notBefore time.Time
	if refresh {
		notBefore = ns.now()
	}
	var (
		mu    sync.Mutex
		files []store.Object // guarded by mu
		next  []string       // guarded by mu; the level below
	)
	// Level by level: a bounded group per level, and no goroutine waiting
	// per pending directory.
	for level := []string{root}; len(level) > 0; level, next = next, nil {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(parallel)
		for _, dir := range level {
			g.Go(func() error {
				if err := gate(gctx); err != nil {
					return err
				}
				l, err := ns.listAt(gctx, dir, notBefore)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				for _, e := range l.entries {
					if e.dir {
						next = append(next, dir+e.name+"/")
					} else {
						files = append(files, e.obj)
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	}
	return files, nil
}
