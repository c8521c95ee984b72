package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// DiskOptions configures a disk tier.
type DiskOptions struct {
	// Dir holds the cache. It is created if missing; an existing non-empty
	// directory must already be a cache directory (have the marker file).
	Dir string
	// MaxBytes bounds the bytes of block files.
	MaxBytes int64
	// MinFreeFraction keeps this fraction of the file system free: writes
	// that would go below it evict stale blocks or are rejected.
	// 0 means the default 0.05; a negative value disables the floor.
	MinFreeFraction float64
	// Compress stores blocks compressed (s2) when they shrink by >= 12%.
	// DefaultDiskOptions turns it on; callers should default it to true.
	Compress bool
	// Sync fsyncs each block file before the rename. Without it a power loss
	// may leave a block with bad content, which the checksum turns into a
	// miss; a crashed process (SIGKILL) loses nothing either way.
	Sync bool
	// QueueLen bounds the blocks waiting to be written (default 64); Puts
	// beyond it are dropped and counted. The queue holds the callers'
	// slices (shared with the RAM tier under Tiered), so it pins at most
	// QueueLen blocks of memory.
	QueueLen int
	// Writers is the number of background writer goroutines (default 2).
	Writers int
	// Logger receives the one warning when the tier disables itself
	// (default slog.Default()).
	Logger *slog.Logger
	// Stats receives the counters (default: a private Stats).
	Stats *Stats
}

// DefaultDiskOptions returns options with compression on and other fields
// at their defaults.
func DefaultDiskOptions(dir string, maxBytes int64) DiskOptions {
	return DiskOptions{Dir: dir, MaxBytes: maxBytes, Compress: true}
}

// MarkerName is the file that marks a directory as a dataccel cache; it is
// also the lock file (flock) that keeps two processes off one directory.
const MarkerName = "DATACCEL-CACHE"

const markerContent = "dataccel block cache, format 1\n"

// Disk is the disk tier: one file per block under Dir, named by a hash of
// the key, fanned out into 256 subdirectories.
//
// Reads run on the caller's goroutine; writes go through a bounded queue to
// a fixed set of writer goroutines, so a fill never blocks a reader. Any
// disk error counts, logs one warning, and turns writes off for the life of
// the Disk; reads keep working and a failed read is a miss.
//
// Lock order: qmu before pendMu; mu is a leaf and is never held during file
// I/O.
type Disk struct {
	dir     string
	max     int64
	minFree float64
	opts    DiskOptions
	log     *slog.Logger
	stats   *Stats
	lock    *os.File // the marker file, flocked; nil when disabled at open

	mu       sync.Mutex
	policy   *Policy             // guarded by mu
	inflight map[uint64]struct{} // guarded by mu; ids being written

	qmu    sync.RWMutex
	closed bool         // guarded by qmu
	queue  chan putItem // sends guarded by qmu (never after close)

	pendMu   sync.Mutex
	pend     int // guarded by pendMu; queued or being written
	pendCond *sync.Cond

	wg       sync.WaitGroup
	disabled atomic.Bool // writes off after a disk error
	warned   atomic.Bool
	tmpSeq   atomic.Uint64
}

type putItem struct {
	key  Key
	data []byte
}

// NewDisk opens (or creates) a disk tier. It returns an error only for bad
// options, a directory that is not a cache, or one already in use. An I/O
// failure on the directory (unwritable, read-only, not a directory) yields
// a working tier that misses and stores nothing, with one warning and a
// disk error counted; Disabled reports it.
func NewDisk(opts DiskOptions) (*Disk, error) {
	if opts.Dir == "" {
		return nil, errors.New("new disk cache: empty directory")
	}
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("new disk cache %s: max bytes %d must be positive", opts.Dir, opts.MaxBytes)
	}
	if opts.MinFreeFraction == 0 {
		opts.MinFreeFraction = 0.05
	}
	if opts.MinFreeFraction >= 1 {
		return nil, fmt.Errorf("new disk cache %s: min free fraction %v must be < 1", opts.Dir, opts.MinFreeFraction)
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = 64
	}
	if opts.Writers <= 0 {
		opts.Writers = 2
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Stats == nil {
		opts.Stats = new(Stats)
	}
	d := &Disk{
		dir:      opts.Dir,
		max:      opts.MaxBytes,
		minFree:  opts.MinFreeFraction,
		opts:     opts,
		log:      opts.Logger,
		stats:    opts.Stats,
		policy:   NewPolicy(),
		inflight: make(map[uint64]struct{}),
		queue:    make(chan putItem, opts.QueueLen),
	}
	d.pendCond = sync.NewCond(&d.pendMu)
	if err := d.open(); err != nil {
		var cfg *configError
		if errors.As(err, &cfg) {
			return nil, err
		}
		d.fail("open", err)
	}
	for i := 0; i < opts.Writers; i++ {
		d.wg.Add(1)
		go d.writer()
	}
	return d, nil
}

// configError is an open failure that is the caller's to fix, not an I/O
// failure to degrade around.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// open prepares the directory, takes the lock and loads the index.
func (d *Disk) open() error {
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	marker := filepath.Join(d.dir, MarkerName)
	if _, err := os.Stat(marker); errors.Is(err, fs.ErrNotExist) {
		ents, err := os.ReadDir(d.dir)
		if err != nil {
			return fmt.Errorf("read cache dir: %w", err)
		}
		if len(ents) > 0 {
			return &configError{fmt.Errorf("new disk cache: %s is not empty and has no %s marker; refusing to use it", d.dir, MarkerName)}
		}
		if err := os.WriteFile(marker, []byte(markerContent), 0o644); err != nil {
			return fmt.Errorf("write cache marker: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("stat cache marker: %w", err)
	}
	f, err := os.Open(marker)
	if err != nil {
		return fmt.Errorf("open cache marker: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return &configError{fmt.Errorf("new disk cache: %s is in use by another process", d.dir)}
		}
		return fmt.Errorf("lock cache dir: %w", err)
	}
	d.lock = f
	if err := d.load(); err != nil {
		return err
	}
	d.loadState()
	// The bound may have shrunk since the last run.
	d.mu.Lock()
	victims := d.policy.Trim(d.max)
	d.publish()
	d.mu.Unlock()
	d.removeVictims(victims)
	return nil
}

// load rebuilds the index from the file names (no stat, no read per file),
// removes temp files of writes that never finished, and creates missing
// subdirectories.
func (d *Disk) load() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := 0; i < 256; i++ {
		sub := filepath.Join(d.dir, fmt.Sprintf("%02x", i))
		ents, err := os.ReadDir(sub)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(sub, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("create cache subdir: %w", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("read cache subdir: %w", err)
		}
		for _, e := range ents {
			name := e.Name()
			if isTempName(name) {
				if err := os.Remove(filepath.Join(sub, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("remove temp file: %w", err)
				}
				continue
			}
			id, size, ok := parseBlockName(name)
			if !ok || subdirName(id) != filepath.Base(sub) {
				continue // not ours; leave it alone
			}
			if !d.policy.Restore(id, size) {
				// A second file for one id (the block was rewritten with a
				// different size and the old one not yet removed): keep one.
				if err := os.Remove(filepath.Join(sub, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("remove duplicate block: %w", err)
				}
			}
		}
	}
	d.publish()
	return nil
}

// publish copies the policy's totals to the gauges. Caller holds mu.
func (d *Disk) publish() {
	d.stats.DiskEntries.Store(int64(d.policy.Len()))
	d.stats.DiskBytes.Store(d.policy.Used())
}

func (d *Disk) path(id uint64, size int64) string {
	return filepath.Join(d.dir, subdirName(id), blockName(id, size))
}

// fail counts a disk error and turns writes off; the first one is logged.
func (d *Disk) fail(op string, err error) {
	d.stats.DiskErrors.Add(1)
	d.disabled.Store(true)
	if d.warned.CompareAndSwap(false, true) {
		d.log.Warn("disk cache error; disk cache writes disabled", "dir", d.dir, "op", op, "err", err)
	}
}

// Disabled reports whether a disk error has turned writes off.
func (d *Disk) Disabled() bool { return d.disabled.Load() }

// Get returns the block for k if it is on disk and intact. The slice must
// not be modified.
func (d *Disk) Get(k Key) ([]byte, bool) {
	id := keyHash(k)
	d.mu.Lock()
	size, ok := d.policy.Access(id)
	if _, busy := d.inflight[id]; busy {
		ok = false
	}
	d.mu.Unlock()
	if !ok {
		d.stats.DiskMisses.Add(1)
		return nil, false
	}
	p := d.path(id, size)
	buf, err := os.ReadFile(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			d.fail("read", err)
		}
		// Gone (evicted concurrently, or removed by hand): forget it.
		d.forget(id, size)
		d.stats.DiskMisses.Add(1)
		return nil, false
	}
	raw, err := decodeBlock(buf, k)
	if err != nil {
		d.stats.DiskCorruptions.Add(1)
		d.log.Debug("corrupt disk cache block removed", "path", p, "err", err)
		d.forget(id, size)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.fail("remove corrupt block", err)
		}
		d.stats.DiskMisses.Add(1)
		return nil, false
	}
	d.stats.DiskHits.Add(1)
	d.stats.DiskReadBytes.Add(int64(len(raw)))
	return raw, true
}

// forget drops id from the index if it still has the given size (a newer
// write of the same id may have replaced it).
func (d *Disk) forget(id uint64, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, busy := d.inflight[id]; busy {
		return
	}
	if e, ok := d.policy.Remove(id); ok && e.Size != size {
		// Not the entry we looked at: put it back.
		d.policy.Restore(id, e.Size)
	}
	d.publish()
}

// Touch records an access to k served by another tier, so that the eviction
// policy sees blocks that are hot in RAM as in use.
func (d *Disk) Touch(k Key) {
	id := keyHash(k)
	d.mu.Lock()
	d.policy.Access(id)
	d.mu.Unlock()
}

// Put queues b for writing under k and returns at once; it takes ownership
// of b and never modifies it. When the queue is full the write is dropped.
func (d *Disk) Put(k Key, b []byte) {
	if d.disabled.Load() {
		return
	}
	d.qmu.RLock()
	defer d.qmu.RUnlock()
	if d.closed {
		return
	}
	d.pendMu.Lock()
	d.pend++
	d.pendMu.Unlock()
	select {
	case d.queue <- putItem{key: k, data: b}:
	default:
		d.stats.DiskDropped.Add(1)
		d.done()
	}
}

func (d *Disk) done() {
	d.pendMu.Lock()
	d.pend--
	if d.pend == 0 {
		d.pendCond.Broadcast()
	}
	d.pendMu.Unlock()
}

// Flush waits until every Put made before it has been written or dropped.
func (d *Disk) Flush() {
	d.pendMu.Lock()
	for d.pend > 0 {
		d.pendCond.Wait()
	}
	d.pendMu.Unlock()
}

// Close drains the write queue, stops the writers and releases the
// directory. Get misses and Put is ignored afterwards. Close is idempotent.
func (d *Disk) Close() error {
	d.qmu.Lock()
	if d.closed {
		d.qmu.Unlock()
		return nil
	}
	d.closed = true
	close(d.queue)
	d.qmu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	mean, samples := d.policy.ReuseDistance()
	// Readers after Close see an empty index.
	d.policy = NewPolicy()
	d.mu.Unlock()
	if d.lock != nil {
		if err := d.saveState(mean, samples); err != nil {
			d.log.Debug("disk cache: policy state not saved", "dir", d.dir, "err", err)
		}
		if err := d.lock.Close(); err != nil {
			return fmt.Errorf("close disk cache %s: %w", d.dir, err)
		}
	}
	return nil
}

func (d *Disk) writer() {
	defer d.wg.Done()
	var c compressor
	for it := range d.queue {
		d.write(&c, it.key, it.data)
		d.done()
	}
}

// write stores one block: admission, eviction, then temp file + rename so
// that a crash at any moment leaves either no file or a complete one.
func (d *Disk) write(c *compressor, k Key, b []byte) {
	if d.disabled.Load() {
		return
	}
	id := keyHash(k)
	d.mu.Lock()
	_, busy := d.inflight[id]
	if busy || d.policy.Contains(id) {
		d.mu.Unlock()
		return // content under one ETag never changes: nothing to do
	}
	d.inflight[id] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.inflight, id)
		d.mu.Unlock()
	}()

	hdr, payload, saved := c.encodeBlock(k, b, d.opts.Compress)
	size := int64(len(hdr) + len(payload))

	var avail int64
	if d.minFree >= 0 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(d.dir, &st); err != nil {
			d.fail("statfs", err)
			return
		}
		avail = int64(st.Bavail) * int64(st.Bsize)
		avail -= int64(d.minFree * float64(st.Blocks) * float64(st.Bsize))
	}
	d.mu.Lock()
	limit := d.max
	if d.minFree >= 0 {
		// avail is already net of the floor; it may be negative.
		limit = min(limit, d.policy.Used()+avail)
	}
	ok, victims := d.policy.Admit(id, size, limit)
	d.publish()
	d.mu.Unlock()
	d.removeVictims(victims)
	if !ok {
		d.stats.DiskRejected.Add(1)
		return
	}
	if err := d.writeFile(id, size, hdr, payload); err != nil {
		d.mu.Lock()
		d.policy.Remove(id)
		d.publish()
		d.mu.Unlock()
		d.fail("write", err)
		return
	}
	d.stats.DiskWrites.Add(1)
	d.stats.DiskWriteBytes.Add(size)
	d.stats.DiskSavedBytes.Add(saved)
}

func (d *Disk) removeVictims(victims []Entry) {
	for _, v := range victims {
		err := os.Remove(d.path(v.ID, v.Size))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.fail("evict", err)
			continue
		}
		d.stats.DiskEvictions.Add(1)
	}
}

func (d *Disk) writeFile(id uint64, size int64, hdr, payload []byte) (err error) {
	final := d.path(id, size)
	tmp := filepath.Join(filepath.Dir(final), tempPrefix+strconv.FormatUint(id, 16)+"-"+
		strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(d.tmpSeq.Add(1), 10))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(hdr); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if _, err = f.Write(payload); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if d.opts.Sync {
		if err = f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", tmp, err)
		}
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, final); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// StateName is the file where Close saves the policy's learned reuse
// distance; a missing or bad one (after a crash) only means re-learning it.
const StateName = "policy-state"

const stateMagic = "DACP1"

func (d *Disk) saveState(mean float64, samples uint64) error {
	buf := make([]byte, len(stateMagic)+16)
	copy(buf, stateMagic)
	binary.LittleEndian.PutUint64(buf[len(stateMagic):], math.Float64bits(mean))
	binary.LittleEndian.PutUint64(buf[len(stateMagic)+8:], samples)
	tmp := filepath.Join(d.dir, tempPrefix+StateName)
	if err := os.WriteFile(tmp, buf, 0o644); err != nil {
		return fmt.Errorf("save policy state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, StateName)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save policy state: %w", err)
	}
	return nil
}

// loadState reads and then removes the saved state, so that a crash after
// this run never restores numbers older than its own learning.
func (d *Disk) loadState() {
	p := filepath.Join(d.dir, StateName)
	buf, err := os.ReadFile(p)
	if err != nil {
		return
	}
	os.Remove(p)
	if len(buf) != len(stateMagic)+16 || string(buf[:len(stateMagic)]) != stateMagic {
		return
	}
	d.mu.Lock()
	d.policy.SetReuseDistance(math.Float64frombits(binary.LittleEndian.Uint64(buf[len(stateMagic):])),
		binary.LittleEndian.Uint64(buf[len(stateMagic)+8:]))
	d.mu.Unlock()
}

// Contains reports whether k has an entry, from the index alone: no file is
// read and the eviction policy does not count it as an access.
func (d *Disk) Contains(k Key) bool {
	id := keyHash(k)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.policy.Contains(id)
}
