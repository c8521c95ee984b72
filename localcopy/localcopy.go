// Package localcopy keeps whole local copies of large objects, one plain
// file each, for FUSE passthrough: the kernel then reads such a file from
// the copy's own page cache and filesystem (large folios, no request to the
// mount), as fast as a local disk.
//
// It owns the copies' directory, their byte budget and their lifetime: a
// copy in use (pinned) is never removed, an unpinned one is removed least
// recently used first when a new copy needs room. A clean Close keeps the
// copies for the next Copies on the same directory and store, with an index
// of their object versions and content hashes: each is checked against its
// hash at its first use there (a torn or altered copy is made again), and a
// directory without an index (a crash) is emptied. It does not fetch: the
// bytes come from an Opener (the prefetch loader, with its caches,
// read-ahead and checks), and it does not decide which files get a copy (the
// fuse layer and dataccel warm do).
package localcopy

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// Reader reads one object version; the prefetch loader's readers satisfy it.
type Reader interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Close() error
}

// viewReader is a Reader that can hand out its bytes without a copy (the
// prefetch loader's can, for a read within one block): the copy is then
// written straight from the loader's block, which done, when not nil,
// lets go.
type viewReader interface {
	ReadView(ctx context.Context, p []byte, off int64) (data []byte, done func(), err error)
}

// Opener opens a Reader for an object version.
type Opener interface {
	Open(obj store.Object) Reader
}

// ErrNoRoom: the copy would not fit the budget beside the copies in use,
// or the file system's free space above its floor.
var ErrNoRoom = errors.New("localcopy: no room in the budget")

// errFailedLately: this version's copy failed less than retryAfter ago.
var errFailedLately = errors.New("localcopy: failed lately")

// retryAfter is how long a failed copy is not tried again: each try
// fetches and writes the whole object, gigabytes, and a file a job opens
// over and over would otherwise repeat a failure (a full disk, a store
// error) on every open.
const retryAfter = time.Minute

// Stats are the copies' counters.
type Stats struct {
	Made     atomic.Int64 // copies made
	Reused   atomic.Int64 // acquires served by a copy made before
	Failed   atomic.Int64 // copies that could not be made (no room, a read or write failed)
	Evicted  atomic.Int64 // copies removed for room
	Bytes    atomic.Int64 // bytes the copies hold on disk now
	Written  atomic.Int64 // bytes written into copies
	Inflight atomic.Int64 // copies being made or checked now
	Adopted  atomic.Int64 // copies kept from an earlier Copies, checked intact at their first use
	Rejected atomic.Int64 // kept copies whose content did not match their hash (made again)
}

// Options configures Copies.
type Options struct {
	// Budget bounds the bytes the copies hold on disk.
	Budget int64
	// Source names the store the objects come from (endpoint and bucket):
	// copies kept by a Close are adopted only by a Copies of the same one.
	Source string
	// Chunk is how much one read of the Opener asks for (default 8 MiB).
	Chunk int
	// MinFree is the share of the file system under the directory that
	// copies leave free (as the disk cache's floor): a copy that would
	// cross it is not made.
	MinFree float64
	// DiskFree returns the bytes free on the file system holding dir and
	// the floor minFree keeps there; nil is cache.FreeSpace.
	DiskFree func(dir string, minFree float64) (free, floor int64, err error)
	// Made, if set, is called after a copy of obj is made: the source may
	// drop what it holds of obj (the copy has every byte).
	Made   func(obj store.Object)
	Logger *slog.Logger
	Stats  *Stats
}

// Copies makes and keeps local copies in one directory.
//
// Lock order: mu only. No I/O under it but the rename that takes a copy
// out of the way (removeLocked); the file is removed after the unlock.
type Copies struct {
	dir    string
	src    Opener
	opts   Options
	log    *slog.Logger
	stats  *Stats
	ctx    context.Context // ends with Close: copies being made stop
	stop   context.CancelFunc
	wg     sync.WaitGroup
	seq    atomic.Int64 // names temporary files
	bufs   sync.Pool    // of *[]byte, Options.Chunk long
	warned atomic.Bool  // a failed copy was logged at warn level
	// warnedRoom: a copy refused for want of room was logged at warn level.
	warnedRoom atomic.Bool

	mu    sync.Mutex
	byKey map[string]*entry // guarded by mu: one entry per object version
	lru   list.List         // guarded by mu: unpinned complete entries, least recently used first
	used  int64             // guarded by mu: bytes reserved by every entry
	// writing is the bytes of the copies being written: not on the disk
	// yet, they already count against its free space.
	writing int64                // guarded by mu
	failed  map[string]time.Time // guarded by mu: versionKey -> when its copy last failed
	now     func() time.Time     // time.Now; tests move it
	closed  bool                 // guarded by mu
}

// entry is one object version's copy, being made or made.
type entry struct {
	key     string // versionKey of the object
	objKey  string
	etag    string
	size    int64
	done    chan struct{} // closed when the copy is made (or checked) or failed
	path    string        // set before done closes; "" if it failed
	err     error         // set before done closes
	sum     uint64        // guarded by Copies.mu: xxhash64 of the copy's bytes
	pins    int           // guarded by Copies.mu
	elem    *list.Element // guarded by Copies.mu: in lru while unpinned and made
	adopted bool          // guarded by Copies.mu: kept from an earlier Copies, not yet checked
}

func versionKey(obj store.Object) string {
	return obj.Key + "\x00" + obj.ETag + "\x00" + strconv.FormatInt(obj.Size, 10)
}

// fileName names an object version's copy in the directory.
func fileName(key, etag string) string {
	return strconv.FormatUint(xxhash.Sum64String(key+"\x00"+etag), 16)
}

// indexName is the file a clean Close leaves: what the copies hold. New
// removes it as it reads it, so a directory whose Copies did not close
// cleanly has none and is emptied.
const indexName = "index.json"

type index struct {
	Version int         `json:"version"`
	Source  string      `json:"source"`
	Copies  []indexCopy `json:"copies"` // least recently used first
}

type indexCopy struct {
	Key    string `json:"key"`
	ETag   string `json:"etag"`
	Size   int64  `json:"size"`
	XXHash uint64 `json:"xxhash64"`
}

// Held counts the copies in dir and their bytes, for a report on a cache
// dir no Copies has open.
func Held(dir string) (copies int, bytes int64) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && e.Name() != indexName && !strings.HasPrefix(e.Name(), "tmp-") {
			copies++
			bytes += fi.Size()
		}
	}
	return copies, bytes
}

// New returns Copies that keep their files in dir. It adopts the copies a
// clean Close of the same Source left there, within the budget, to be
// checked against their hashes at first use; every other file in dir is
// removed (a crash may have left a copy half written).
func New(dir string, src Opener, opts Options) (*Copies, error) {
	if opts.Chunk <= 0 {
		opts.Chunk = 8 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stats == nil {
		opts.Stats = &Stats{}
	}
	if opts.DiskFree == nil {
		opts.DiskFree = cache.FreeSpace
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("local copies: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Copies{dir: dir, src: src, opts: opts, log: opts.Logger, stats: opts.Stats,
		ctx: ctx, stop: stop, byKey: map[string]*entry{}, failed: map[string]time.Time{}, now: time.Now}
	if err := c.adopt(); err != nil {
		stop()
		return nil, err
	}
	return c, nil
}

// adopt takes in the copies listed in dir's index and removes every other
// file there.
func (c *Copies) adopt() error {
	var idx index
	b, err := os.ReadFile(filepath.Join(c.dir, indexName))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &idx); err != nil {
			c.log.Warn("local copies: index unreadable; removing the copies", "dir", c.dir, "err", err)
			idx = index{}
		}
	case !errors.Is(err, os.ErrNotExist):
		c.log.Warn("local copies: index unreadable; removing the copies", "dir", c.dir, "err", err)
	}
	if idx.Version != 1 || idx.Source != c.opts.Source {
		if len(idx.Copies) > 0 {
			c.log.Warn("local copies: those in the directory came from another store (endpoint or bucket); removing them",
				"dir", c.dir, "copies", len(idx.Copies))
		}
		idx.Copies = nil
	}
	// Most recently used first, while they fit the budget.
	keep := map[string]bool{}
	for i := len(idx.Copies) - 1; i >= 0; i-- {
		r := idx.Copies[i]
		name := fileName(r.Key, r.ETag)
		if r.ETag == "" || r.Size <= 0 || keep[name] || c.used+r.Size > c.opts.Budget {
			continue
		}
		path := filepath.Join(c.dir, name)
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Size() != r.Size {
			continue
		}
		e := &entry{key: versionKey(store.Object{Key: r.Key, ETag: r.ETag, Size: r.Size}), objKey: r.Key, etag: r.ETag,
			size: r.Size, done: make(chan struct{}), path: path, sum: r.XXHash, adopted: true}
		keep[name] = true
		c.byKey[e.key] = e
		c.used += e.size
		c.stats.Bytes.Add(e.size)
		e.elem = c.lru.PushFront(e)
	}
	files, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("local copies: %w", err)
	}
	for _, f := range files {
		if !keep[f.Name()] {
			if err := os.RemoveAll(filepath.Join(c.dir, f.Name())); err != nil {
				return fmt.Errorf("local copies: clear %s: %w", c.dir, err)
			}
		}
	}
	if len(keep) > 0 {
		c.log.Info("local copies kept from the last mount", "copies", len(keep), "bytes", c.used)
	}
	return nil
}

// Acquire returns a read-only file that holds all of obj (this version),
// making the copy first if there is none; it waits for a copy being made.
// The copy stays until release is called (release must be called once).
// An error means there is no copy: the caller reads obj another way.
func (c *Copies) Acquire(ctx context.Context, obj store.Object) (*os.File, func(), error) {
	e, err := c.pin(obj)
	switch {
	case errors.Is(err, errFailedLately): // counted when it failed
		return nil, nil, err
	case errors.Is(err, ErrNoRoom) && c.warnedRoom.CompareAndSwap(false, true):
		c.log.Warn("local copy not made for want of room; the file is read through the block cache instead (further ones are not logged)", "err", err)
	}
	if err != nil {
		c.stats.Failed.Add(1)
		return nil, nil, err
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		c.unpin(e)
		return nil, nil, ctx.Err()
	}
	if e.err != nil {
		c.unpin(e)
		return nil, nil, e.err
	}
	f, err := os.Open(e.path)
	if err != nil {
		c.unpin(e)
		return nil, nil, fmt.Errorf("local copy of %s: %w", obj.Key, err)
	}
	var once sync.Once
	return f, func() { once.Do(func() { f.Close(); c.unpin(e) }) }, nil
}

// Has reports whether a whole copy of obj (this version) is held: made, or
// kept from an earlier Copies (not checked yet: its first Acquire checks
// it).
func (c *Copies) Has(obj store.Object) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byKey[versionKey(obj)]
	if e == nil {
		return false
	}
	if e.adopted {
		return true
	}
	select {
	case <-e.done:
		return e.err == nil
	default:
		return false
	}
}

// pin finds or starts obj's copy and pins it.
func (c *Copies) pin(obj store.Object) (*entry, error) {
	key := versionKey(obj)
	c.mu.Lock()
	e, err := c.heldLocked(key, obj)
	c.mu.Unlock()
	if e != nil || err != nil {
		return e, err
	}
	// A new copy: the file system's room, asked outside the lock (no I/O
	// under it), and only for a new copy, not at every open of a file that
	// has one.
	free, floor, ferr := c.opts.DiskFree(c.dir, c.opts.MinFree)
	var evicted []string
	defer removeFiles(&evicted) // after the unlock below
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, err := c.heldLocked(key, obj); e != nil || err != nil {
		return e, err // started, or failed, meanwhile
	}
	switch {
	case ferr != nil:
		return nil, fmt.Errorf("local copy of %s: free space of %s: %w", obj.Key, c.dir, ferr)
	case free-c.writing-obj.Size < floor:
		// Copies of other versions or files removed for room would free
		// some; the floor is a bound, not a target: no copy this time.
		return nil, fmt.Errorf("local copy of %s (%d bytes): %d bytes free on the disk, %d being written, %d kept free: %w",
			obj.Key, obj.Size, free, c.writing, floor, ErrNoRoom)
	}
	c.staleLocked(obj, &evicted)
	if !c.roomLocked(obj.Size, &evicted) {
		return nil, fmt.Errorf("local copy of %s (%d bytes, budget %d): %w", obj.Key, obj.Size, c.opts.Budget, ErrNoRoom)
	}
	e = &entry{key: key, objKey: obj.Key, etag: obj.ETag, size: obj.Size, done: make(chan struct{}), pins: 1}
	c.byKey[key] = e
	c.used += obj.Size
	c.writing += obj.Size
	c.wg.Add(1)
	c.stats.Inflight.Add(1)
	go c.make(e, obj, false)
	return e, nil
}

// heldLocked pins key's copy if there is one (made, being made, or kept
// from an earlier Copies: its check starts), and fails when the Copies
// are closed or key's copy failed lately; (nil, nil) means a new copy is
// to be made. Called with c.mu held.
func (c *Copies) heldLocked(key string, obj store.Object) (*entry, error) {
	if c.closed {
		return nil, errors.New("local copies: closed")
	}
	if e := c.byKey[key]; e != nil {
		if e.elem != nil {
			c.lru.Remove(e.elem)
			e.elem = nil
		}
		e.pins++
		if e.adopted {
			e.adopted = false
			c.wg.Add(1)
			c.stats.Inflight.Add(1)
			go c.make(e, obj, true)
			return e, nil
		}
		select {
		case <-e.done:
			c.stats.Reused.Add(1)
		default:
		}
		return e, nil
	}
	if at, ok := c.failed[key]; ok {
		if c.now().Sub(at) < retryAfter {
			return nil, fmt.Errorf("local copy of %s: %w", obj.Key, errFailedLately)
		}
		delete(c.failed, key)
	}
	return nil, nil
}

// staleLocked removes the unpinned copies of other versions of obj's key:
// the listing that gave obj says they are gone from the store. (A pinned
// one is removed when room is needed, least recently used first.)
func (c *Copies) staleLocked(obj store.Object, evicted *[]string) {
	for _, e := range c.byKey {
		if e.objKey == obj.Key && e.elem != nil && (e.etag != obj.ETag || e.size != obj.Size) {
			*evicted = append(*evicted, c.removeLocked(e))
			c.stats.Evicted.Add(1)
		}
	}
}

// roomLocked removes unpinned copies, least recently used first, until n
// more bytes fit the budget; false if they cannot (a copy larger than the
// whole budget removes none). The files to unlink are added to evicted.
func (c *Copies) roomLocked(n int64, evicted *[]string) bool {
	if n > c.opts.Budget {
		return false
	}
	for c.used+n > c.opts.Budget {
		front := c.lru.Front()
		if front == nil {
			return false
		}
		*evicted = append(*evicted, c.removeLocked(front.Value.(*entry)))
		c.stats.Evicted.Add(1)
	}
	return true
}

// removeLocked forgets a made, unpinned entry and moves its file out of the
// way under a name of its own, which it returns for the caller to unlink
// once c.mu is let go: freeing a multi-GB file's extents can take a while,
// and every open waits on c.mu. (Renamed first, so that a copy of the same
// version made again under the same name is never the one unlinked.) An
// open descriptor, the kernel's included, keeps reading the file.
func (c *Copies) removeLocked(e *entry) string {
	c.lru.Remove(e.elem)
	e.elem = nil
	delete(c.byKey, e.key)
	c.used -= e.size
	c.stats.Bytes.Add(-e.size)
	gone := filepath.Join(c.dir, "gone-"+strconv.FormatInt(c.seq.Add(1), 10))
	if err := os.Rename(e.path, gone); err != nil {
		os.Remove(e.path)
		return ""
	}
	return gone
}

// removeFiles unlinks the files named in *paths ("" is skipped); a file
// left behind by a crash is removed when the directory is next opened.
func removeFiles(paths *[]string) {
	for _, p := range *paths {
		if p != "" {
			os.Remove(p)
		}
	}
}

func (c *Copies) unpin(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.pins--
	if e.pins > 0 {
		return
	}
	select {
	case <-e.done:
	default:
		return // the maker settles it
	}
	if e.err != nil || c.closed {
		return
	}
	e.elem = c.lru.PushBack(e)
}

// make writes obj into a new file, under the Copies' own context: a waiter
// that gives up does not stop it for the others. With check, e is a copy
// kept from an earlier Copies: it is used if its bytes match its hash, else
// removed and made again.
func (c *Copies) make(e *entry, obj store.Object, check bool) {
	defer c.wg.Done()
	defer c.stats.Inflight.Add(-1)
	var path string
	var sum uint64
	var err error
	stopped := false // a check Close stopped: the copy stays, for the next Copies to check
	if check {
		c.mu.Lock()
		want := e.sum
		c.mu.Unlock()
		switch err = c.verify(e.path, e.size, want); {
		case err == nil:
			path, sum = e.path, want
			c.stats.Adopted.Add(1)
			c.stats.Reused.Add(1)
		case c.ctx.Err() != nil: // closing: the check stopped, nothing is known against the copy
			stopped = true
		default:
			c.stats.Rejected.Add(1)
			c.log.Warn("local copy kept from the last mount is damaged; making it again", "key", obj.Key, "err", err)
			os.Remove(e.path)
			c.stats.Bytes.Add(-e.size)
		}
	}
	fresh := path == ""
	counted := !check                // in c.writing: a new copy since Acquire, a kept one once it is made again
	if fresh && c.ctx.Err() != nil { // closing (a stopped check included): nothing to make
		err = fmt.Errorf("local copy of %s: %w", obj.Key, c.ctx.Err())
	} else if fresh {
		if !counted {
			c.mu.Lock()
			c.writing += e.size
			c.mu.Unlock()
			counted = true
		}
		path, sum, err = c.write(obj)
		if err == nil && c.opts.Made != nil {
			c.opts.Made(obj)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if counted {
		c.writing -= e.size
	}
	if err != nil {
		c.stats.Failed.Add(1)
		switch {
		case c.ctx.Err() != nil: // closing
		case c.warned.CompareAndSwap(false, true):
			c.log.Warn("local copy not made; the file is read through the block cache instead, and its copy not tried again for "+retryAfter.String()+
				" (further failures are logged at debug level)", "key", obj.Key, "err", err)
		default:
			c.log.Debug("local copy not made", "key", obj.Key, "err", err)
		}
		if c.ctx.Err() == nil {
			c.failedLocked(e.key)
		}
		e.err = err // its waiters read through the mount
		if !stopped {
			delete(c.byKey, e.key)
			c.used -= e.size
		}
	} else {
		e.path = path
		e.sum = sum
		if fresh {
			c.stats.Made.Add(1)
			c.stats.Bytes.Add(e.size)
		}
		if e.pins == 0 && !c.closed {
			e.elem = c.lru.PushBack(e)
		}
	}
	close(e.done)
}

// failedLocked notes that key's copy failed now. Past maxFailed notes, the
// expired ones go, and others if that is not enough.
func (c *Copies) failedLocked(key string) {
	if len(c.failed) >= maxFailed {
		for k, at := range c.failed {
			if c.now().Sub(at) >= retryAfter || len(c.failed) >= maxFailed {
				delete(c.failed, k)
			}
		}
	}
	c.failed[key] = c.now()
}

// maxFailed bounds the failed copies remembered.
const maxFailed = 4096

// verify checks that the file at path holds size bytes hashing to want.
func (c *Copies) verify(path string, size int64, want uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bp := c.buf()
	defer c.bufs.Put(bp)
	d := xxhash.New()
	// Close stops a check as it stops a copy being made: a hash of a
	// copy of gigabytes takes seconds.
	n, err := io.CopyBuffer(d, ctxReader{c.ctx, io.LimitReader(f, size+1)}, *bp)
	switch {
	case err != nil:
		return err
	case n != size:
		return fmt.Errorf("%d bytes, want %d", n, size)
	case d.Sum64() != want:
		return errors.New("content does not match its hash")
	}
	return nil
}

// ctxReader reads from r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

func (c *Copies) buf() *[]byte {
	if bp, _ := c.bufs.Get().(*[]byte); bp != nil {
		return bp
	}
	b := make([]byte, c.opts.Chunk)
	return &b
}

// write copies obj into a temporary file and renames it into place; it
// returns the path and the bytes' xxhash64.
func (c *Copies) write(obj store.Object) (string, uint64, error) {
	name := fileName(obj.Key, obj.ETag)
	tmp := filepath.Join(c.dir, "tmp-"+strconv.FormatInt(c.seq.Add(1), 10))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", 0, fmt.Errorf("local copy of %s: %w", obj.Key, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	r := c.src.Open(obj)
	defer r.Close()
	bp := c.buf()
	defer c.bufs.Put(bp)
	buf := *bp
	d := xxhash.New()
	view, isView := r.(viewReader)
	var off int64
	for off < obj.Size {
		p := buf[:min(int64(len(buf)), obj.Size-off)]
		var data []byte
		var done func()
		var err error
		if isView {
			data, done, err = view.ReadView(c.ctx, p, off)
		} else {
			var n int
			n, err = r.ReadAt(c.ctx, p, off)
			data = p[:n]
		}
		var werr error
		if n := len(data); n > 0 {
			if _, werr = f.WriteAt(data, off); werr == nil {
				d.Write(data)
				c.stats.Written.Add(int64(n))
				off += int64(n)
			}
		}
		if done != nil {
			done()
		}
		if werr != nil {
			return "", 0, fmt.Errorf("local copy of %s: %w", obj.Key, werr)
		}
		if err != nil && !(errors.Is(err, io.EOF) && off == obj.Size) {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: %d of %d bytes", store.ErrChanged, off, obj.Size)
			}
			return "", 0, fmt.Errorf("local copy of %s: read at %d: %w", obj.Key, off, err)
		}
		if len(data) == 0 && err == nil {
			return "", 0, fmt.Errorf("local copy of %s: read at %d: %w", obj.Key, off, io.ErrNoProgress)
		}
	}
	if err := f.Close(); err != nil {
		return "", 0, fmt.Errorf("local copy of %s: %w", obj.Key, err)
	}
	path := filepath.Join(c.dir, name)
	if err := os.Rename(tmp, path); err != nil {
		return "", 0, fmt.Errorf("local copy of %s: %w", obj.Key, err)
	}
	ok = true
	return path, d.Sum64(), nil
}

// Close stops the copies being made, waits for them and leaves the made
// ones with an index, for the next Copies on this directory. Files acquired
// before stay readable until released.
func (c *Copies) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	c.mu.Lock()
	idx := index{Version: 1, Source: c.opts.Source}
	listed := map[*entry]bool{}
	add := func(e *entry) {
		if e.path != "" && !listed[e] {
			listed[e] = true
			idx.Copies = append(idx.Copies, indexCopy{Key: e.objKey, ETag: e.etag, Size: e.size, XXHash: e.sum})
		}
	}
	for el := c.lru.Front(); el != nil; el = el.Next() {
		add(el.Value.(*entry))
	}
	for _, e := range c.byKey { // pinned at Close: the most recently used
		add(e)
	}
	c.mu.Unlock()
	b, err := json.Marshal(idx)
	if err == nil {
		tmp := filepath.Join(c.dir, "tmp-index")
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Join(c.dir, indexName))
		}
	}
	if err != nil {
		os.RemoveAll(c.dir) // without an index the next Copies would remove them anyway
		return fmt.Errorf("local copies: index: %w", err)
	}
	return nil
}
