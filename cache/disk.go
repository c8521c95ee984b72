package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"
)

// DiskOptions configures a disk tier.
type DiskOptions struct {
	// Dir holds the cache. It is created if missing; an existing non-empty
	// directory must already be a cache directory (have the marker file).
	Dir string
	// MaxBytes bounds the bytes of segment files: live records plus the
	// dead bytes (evicted or dropped records) not yet reclaimed.
	MaxBytes int64
	// MinFreeFraction keeps this fraction of the file system free: writes
	// that would go below it evict stale blocks or are rejected.
	// 0 means the default 0.05; a negative value keeps no floor (the
	// file system's free space still bounds the cache).
	MinFreeFraction float64
	// Compress stores blocks compressed (s2) when they shrink by >= 12%,
	// except while the write queue holds a quarter of QueueBytes or more.
	// DefaultDiskOptions turns it on; callers should default it to true.
	Compress bool
	// Sync fdatasyncs the segment after each batch of records (up to 64),
	// before they enter the index. Without it a power loss may leave records with bad
	// content, which the checksums turn into misses; a crashed process
	// (SIGKILL) loses nothing either way.
	Sync bool
	// QueueLen bounds the blocks waiting to be written (default 64), and
	// QueueBytes their bytes (DefaultQueueBytes); Puts beyond either are
	// dropped and counted. The queue holds the callers' slices: under
	// Tiered, blocks the RAM tier gave up, memory no other bound counts.
	QueueLen   int
	QueueBytes int64
	// Writers is the number of background writer goroutines (default 2,
	// 4 with direct I/O); each appends to its own segment.
	Writers int
	// Buffered writes through the page cache. By default writes, and reads
	// of the aligned records, use direct I/O where the file system supports
	// it (statx reports its alignment): the page cache would hold a second
	// copy of what the RAM tier (or, for a read, the caller) holds, and
	// filling it costs more CPU than the I/O itself. Records are then
	// aligned to 4 KiB (the padding counts as theirs).
	Buffered bool
	// Logger receives the one warning when the tier disables itself
	// (default: none).
	Logger *slog.Logger
	// Stats receives the counters (default: a private Stats).
	Stats *Stats
}

// DefaultDiskOptions returns options with compression on and other fields
// at their defaults.
func DefaultDiskOptions(dir string, maxBytes int64) DiskOptions {
	return DiskOptions{Dir: dir, MaxBytes: maxBytes, Compress: true}
}

// DefaultQueueBytes bounds the bytes of blocks waiting to be written when
// DiskOptions.QueueBytes is not set.
const DefaultQueueBytes = 64 << 20

// MarkerName is the file that marks a directory as a dataccel cache; it is
// also the lock file (flock) that keeps two processes off one directory.
const MarkerName = "DATACCEL-CACHE"

const (
	markerContent = "dataccel block cache, format 2\n"
	// markerFormat1 marks the one-file-per-block layout (256 fan-out
	// directories "00".."ff"); NewDisk drops its blocks and converts it.
	markerFormat1 = "dataccel block cache, format 1\n"
)

// Segment sizes: MaxBytes/64, within these bounds.
const (
	minSegment = 1 << 20
	maxSegment = 256 << 20
)

// Disk is the disk tier, log-structured: blocks are records appended to
// segment files (see format.go) and found through an in-memory index
// (key hash -> segment, offset, length) rebuilt at open by reading the
// record headers of every segment.
//
// Reads run on the caller's goroutine: an index lookup and one pread of the
// whole record, checked against the key and its checksums. Writes go
// through a bounded queue to a fixed set of writer goroutines, each
// appending to its own segment, so a fill never blocks a reader; a record
// enters the index only once written. The eviction Policy decides what
// stays; evicted or corrupt records become dead bytes in their segment. A
// sealed segment with nothing live is deleted at once; when dead bytes grow
// past a quarter of MaxBytes (or a write is rejected while dead bytes
// exist), the compactor goroutine copies the live records of the segment
// with the most dead bytes into its own segment and deletes the old one.
//
// Any disk error counts, logs one warning, and turns writes off for the
// life of the Disk; reads keep working and a failed read is a miss.
//
// Bookkeeping: every index entry is resident in the policy; the policy
// also holds the ids being written (admitted, not yet indexed). Each
// segment's bytes are live (indexed records), dead (evicted, corrupt or
// superseded records, torn tails, the segment header) or reserved by an
// append in flight. Disk usage is live + dead (the DiskBytes gauge), so the
// policy is given MaxBytes (or what the free-space floor allows) net of
// dead bytes.
//
// Lock order: qmu before pendMu; mu is a leaf and is never held during file
// I/O. Segment fds are reference counted (segment.refs), so a segment
// deleted by the compactor stays readable by a Get already reading it.
type Disk struct {
	dir     string
	max     int64
	minFree float64
	// freeSpace is FreeSpace (a test's stand-in can say the file system
	// has room it lacks).
	freeSpace func(dir string, minFree float64) (free, floor int64, err error)
	segTarget int64
	opts      DiskOptions
	log       *slog.Logger
	stats     *Stats
	lock      *os.File // the marker file, flocked; nil when disabled at open

	mu            sync.Mutex
	policy        *Policy             // guarded by mu; admission and eviction
	index         map[uint64]recLoc   // guarded by mu; records written and live
	segs          map[uint64]*segment // guarded by mu; by seq
	dead          int64               // guarded by mu; dead bytes of all segments
	inflight      map[uint64]struct{} // guarded by mu; ids being written
	unwritten     int64               // guarded by mu; bytes admitted, not yet written (free space does not show them)
	appended      int64               // guarded by mu; bytes written by writers since open (see write)
	compactWanted bool                // guarded by mu; a write was rejected while dead bytes existed
	compacting    bool                // guarded by mu; the compactor is running a pass
	idleDead      int64               // guarded by mu; dead bytes when the compactor last found no candidate
	kicks         int                 // guarded by mu; wake-ups sent, not yet taken
	kickClosed    bool                // guarded by mu
	kick          chan struct{}       // wakes the compactor; sends and close guarded by mu
	nextSeq       atomic.Uint64       // the next segment number
	stopping      atomic.Bool         // Close has begun: the compactor stops early

	qmu    sync.RWMutex
	closed bool         // guarded by qmu
	queue  chan putItem // sends guarded by qmu (never after close)

	pendMu   sync.Mutex
	pend     int        // guarded by pendMu; queued or being written
	pendSize int64      // guarded by pendMu: their bytes
	pendCond *sync.Cond // broadcast when pend or pendSize falls

	wg       sync.WaitGroup        // writers
	cwg      sync.WaitGroup        // compactor
	firstErr atomic.Pointer[error] // the error that turned writes off (logged once); nil while they are on

	// align is the record alignment of the segments this run creates
	// (0: back to back), set at open.
	align int64
	// direct: appends, and reads of aligned records, use O_DIRECT; cleared
	// for good when the file system refuses a direct write.
	direct atomic.Bool
	dio    dioBufs   // memory for direct reads
	heads  headCache // headers of records read in part (ReadPart)

	lastFull   atomic.Int64 // unix nanoseconds of the latest write the policy refused or evicted for; 0: none
	fullWarned atomic.Bool  // the file system's ENOSPC was logged
	fdsWarned  atomic.Bool  // running out of file descriptors was logged
	// corruptWarned: a record that failed its checksum was logged.
	corruptWarned atomic.Bool
}

// recLoc is where a live record sits.
type recLoc struct {
	seg *segment
	off int64
	n   int64 // record length
}

// recKey names a record across runs, for the dead list.
type recKey struct {
	seq uint64
	off int64
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
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stats == nil {
		opts.Stats = new(Stats)
	}
	d := &Disk{
		dir:       opts.Dir,
		max:       opts.MaxBytes,
		minFree:   opts.MinFreeFraction,
		freeSpace: FreeSpace,
		segTarget: min(max(opts.MaxBytes/64, minSegment), maxSegment),
		opts:      opts,
		log:       opts.Logger,
		stats:     opts.Stats,
		policy:    NewPolicy(),
		index:     make(map[uint64]recLoc),
		segs:      make(map[uint64]*segment),
		inflight:  make(map[uint64]struct{}),
		kick:      make(chan struct{}, 1),
		idleDead:  -1,
		heads:     headCache{maxBytes: headCacheBytes},
		queue:     make(chan putItem, opts.QueueLen),
	}
	d.pendCond = sync.NewCond(&d.pendMu)
	if err := d.open(); err != nil {
		var cfg *configError
		if errors.As(err, &cfg) {
			if d.lock != nil {
				d.lock.Close()
			}
			return nil, err
		}
		d.fail("open", err)
	}
	if d.opts.Writers <= 0 {
		// A direct write waits for the device: more writers keep it busy.
		d.opts.Writers = 2
		if d.direct.Load() {
			d.opts.Writers = 4
		}
	}
	for i := 0; i < d.opts.Writers; i++ {
		d.wg.Add(1)
		go d.writer()
	}
	d.cwg.Add(1)
	go d.compactor()
	d.mu.Lock()
	d.kickLocked(false) // dead bytes found at open
	d.mu.Unlock()
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
	// Read only: flock needs no more, and a file open for writing would
	// stop the file system from being remounted read-only.
	f, err := os.Open(marker)
	if err != nil {
		return fmt.Errorf("open cache marker: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return &configError{fmt.Errorf("new disk cache: %s: %w", d.dir, ErrInUse)}
		}
		return fmt.Errorf("lock cache dir: %w", err)
	}
	d.lock = f
	buf := make([]byte, markerMax)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read cache marker: %w", err)
	}
	switch content := string(buf[:n]); {
	case content == markerContent:
	case !unknownFormat(content):
		if err := d.convert(content == markerFormat1); err != nil {
			return err
		}
	default:
		return &configError{fmt.Errorf("new disk cache: %s holds an unknown cache format (%s says %q: a newer version's cache, or a damaged marker); "+
			"`dataccel cache purge --cache-dir %s` empties it for this version, or give another --cache-dir", d.dir, MarkerName, strings.TrimSpace(content), d.dir)}
	}
	d.probeDirect(marker)
	dead := d.loadState()
	if err := d.load(dead); err != nil {
		return err
	}
	// The bound may have shrunk since the last run: trim until live and
	// dead bytes fit (trimming the newest records first empties whole
	// segments, which frees their dead bytes too).
	d.mu.Lock()
	var drop []*segment
	for limit := d.max; ; limit = d.max - d.dead {
		victims := d.policy.Trim(limit)
		drop = d.evictLocked(victims, drop)
		if len(victims) == 0 || d.policy.Used()+d.dead <= d.max {
			break
		}
	}
	d.publish()
	d.mu.Unlock()
	d.removeSegments(drop)
	return nil
}

// dioAlign is the alignment of records written with direct I/O: a page,
// which suits the memory and offset alignment of common file systems.
const dioAlign = 4096

// probeDirect turns on direct I/O (and aligned records) when the file
// system of the cache reports direct I/O alignments that dioAlign meets.
func (d *Disk) probeDirect(file string) {
	if d.opts.Buffered {
		return
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, file, 0, unix.STATX_DIOALIGN, &st); err != nil ||
		st.Mask&unix.STATX_DIOALIGN == 0 || st.Dio_offset_align == 0 ||
		st.Dio_offset_align > dioAlign || st.Dio_mem_align > dioAlign {
		return
	}
	d.align = dioAlign
	d.direct.Store(true)
}

// convert removes the blocks of a format 1 cache (fan-out directories
// "00".."ff" of block files; not migrated: they are re-fetched on demand)
// and rewrites the marker. The blocks go first, so a crash midway leaves a
// format 1 marker and the next open finishes the job.
func (d *Disk) convert(format1 bool) error {
	blocks := 0
	for i := 0; i < 256; i++ {
		sub := filepath.Join(d.dir, fmt.Sprintf("%02x", i))
		ents, err := os.ReadDir(sub)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		blocks += len(ents)
		if err := os.RemoveAll(sub); err != nil {
			return fmt.Errorf("remove format 1 blocks: %w", err)
		}
	}
	// In place: the lock is on this file. A crash midway leaves it empty,
	// which the next open rewrites.
	if err := os.WriteFile(filepath.Join(d.dir, MarkerName), []byte(markerContent), 0o644); err != nil {
		return fmt.Errorf("rewrite cache marker: %w", err)
	}
	if format1 {
		d.log.Info("disk cache: converted a format 1 cache directory to format 2 (segment files); its blocks were dropped",
			"dir", d.dir, "blocks_dropped", blocks)
	}
	return nil
}

// load rebuilds the index from the record headers of every segment. dead
// lists records that the last clean Close knew to be dead.
func (d *Disk) load(dead map[recKey]struct{}) error {
	segDir := filepath.Join(d.dir, segDirName)
	if err := os.MkdirAll(segDir, 0o755); err != nil {
		return fmt.Errorf("create segment dir: %w", err)
	}
	found, err := scanSegments(segDir, true)
	if err != nil {
		return fmt.Errorf("read segment dir: %w", err)
	}
	resolve(found, dead)
	for _, sc := range found {
		if sc.err != nil {
			// Unreadable: leave the file alone, without its blocks.
			d.fail("open segment", sc.err)
		} else if sc.why == scanCorrupt {
			d.stats.DiskCorruptions.Add(1)
			d.log.Debug("disk cache: corrupt record ends a segment", "segment", sc.path, "at", sc.end)
		}
	}
	d.mu.Lock()
	var next uint64
	for _, sc := range found {
		next = max(next, sc.seq+1)
		if sc.err != nil {
			continue
		}
		s := &segment{seq: sc.seq, path: sc.path, f: sc.f, hdr: sc.hdr, size: sc.size, dead: sc.size, sealed: true}
		if d.direct.Load() && sc.hdr%dioAlign == 0 {
			// Aligned records (format 3 with direct I/O): read them directly.
			if df, err := os.OpenFile(sc.path, os.O_RDONLY|syscall.O_DIRECT, 0); err == nil {
				s.df = df
			}
		}
		s.refs.Store(1)
		for _, r := range sc.recs {
			if r.dead {
				if r.listed {
					s.deadOffs = append(s.deadOffs, r.off)
				}
				continue
			}
			d.index[r.id] = recLoc{seg: s, off: r.off, n: r.n}
			s.live += r.n
			s.dead -= r.n
		}
		d.segs[s.seq] = s
		d.dead += s.dead
	}
	d.nextSeq.Store(next)
	// Oldest segments first: Restore queues each entry behind the others,
	// so a shrunk bound trims the newest records, which empties whole
	// segments.
	for _, sc := range found {
		for _, r := range sc.recs {
			if !r.dead && sc.err == nil {
				d.policy.Restore(r.id, r.n)
			}
		}
		sc.recs = nil
	}
	var drop []*segment
	for _, s := range d.segs {
		drop = d.reclaimLocked(s, drop)
	}
	d.publish()
	d.mu.Unlock()
	d.removeSegments(drop)
	return nil
}

// publish copies the totals to the gauges. Caller holds mu.
func (d *Disk) publish() {
	d.stats.DiskEntries.Store(int64(d.policy.Len()))
	d.stats.DiskBytes.Store(d.policy.Used() + d.dead)
}

// outOfFiles reports whether err is the process or the system running out
// of file descriptors: a passing state, not a failing disk.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// fail counts a disk error and turns writes off; the first one is logged
// and kept (Err).
func (d *Disk) fail(op string, err error) {
	d.stats.DiskErrors.Add(1)
	werr := fmt.Errorf("%s: %w", op, err)
	if d.firstErr.CompareAndSwap(nil, &werr) {
		d.log.Warn("disk cache error; disk cache writes disabled", "dir", d.dir, "op", op, "err", err)
	}
}

// Disabled reports whether a disk error has turned writes off.
func (d *Disk) Disabled() bool { return d.firstErr.Load() != nil }

// Err returns the disk error that turned writes off, or nil.
func (d *Disk) Err() error {
	if p := d.firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Get returns the block for k if it is on disk and intact. The slice must
// not be modified.
func (d *Disk) Get(k Key) ([]byte, bool) {
	id := keyHash(k)
	d.mu.Lock()
	_, ok := d.policy.Access(id)
	loc, indexed := d.index[id]
	if ok && indexed {
		loc.seg.acquire()
	}
	d.mu.Unlock()
	if !ok || !indexed {
		d.stats.DiskMisses.Add(1)
		return nil, false
	}
	buf, pooled, direct := d.readDirect(loc)
	var err error
	if !direct {
		buf = make([]byte, loc.n)
		_, err = loc.seg.f.ReadAt(buf, loc.off)
	}
	loc.seg.release()
	if err != nil {
		d.readFailed(id, loc, err)
		d.stats.DiskMisses.Add(1)
		return nil, false
	}
	raw, err := decodeBlock(buf, k)
	if pooled {
		if err == nil && within(raw, buf) {
			raw = bytes.Clone(raw) // buf goes back to the pool; a decompressed block is its own
		}
		d.dio.put(buf)
	}
	if err != nil {
		d.corrupt(id, loc, err)
		d.stats.DiskMisses.Add(1)
		return nil, false
	}
	d.stats.DiskHits.Add(1)
	d.stats.DiskReadBytes.Add(int64(len(raw)))
	return raw, true
}

// corrupt counts a bad record and forgets it.
// The first of a mount is a warning: a disk that damages what it holds
// may be failing, and its owner should hear of it before the counter.
func (d *Disk) corrupt(id uint64, loc recLoc, err error) {
	d.stats.DiskCorruptions.Add(1)
	if d.corruptWarned.CompareAndSwap(false, true) {
		d.log.Warn("disk cache: a record failed its check and is fetched again (a damaged or failing disk?); further ones count in cache_corruptions_total",
			"segment", loc.seg.path, "offset", loc.off, "err", err)
	} else {
		d.log.Debug("corrupt disk cache record dropped", "segment", loc.seg.path, "offset", loc.off, "err", err)
	}
	d.forget(id, loc)
}

// forget drops id from the index and the policy if it is still the record
// at loc (a compaction may have moved it); its bytes become dead.
func (d *Disk) forget(id uint64, loc recLoc) {
	d.mu.Lock()
	var drop []*segment
	if cur, ok := d.index[id]; ok && cur == loc {
		delete(d.index, id)
		d.policy.Remove(id)
		drop = d.killLocked(loc, drop)
	}
	d.publish()
	d.mu.Unlock()
	d.removeSegments(drop)
}

// evictLocked drops the policy's victims from the index; their bytes
// become dead. A victim still being written is not indexed: its writer
// finds it evicted. Caller holds mu.
func (d *Disk) evictLocked(victims []Entry, drop []*segment) []*segment {
	for _, v := range victims {
		d.stats.DiskEvictions.Add(1)
		if loc, ok := d.index[v.ID]; ok {
			delete(d.index, v.ID)
			drop = d.killLocked(loc, drop)
		}
	}
	return drop
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
	if d.Disabled() {
		return
	}
	d.qmu.RLock()
	defer d.qmu.RUnlock()
	if d.closed {
		return
	}
	n := int64(len(b))
	d.pendMu.Lock()
	full := d.pendSize > 0 && d.pendSize+n > d.opts.QueueBytes
	if !full {
		d.pend++
		d.pendSize += n
	}
	d.pendMu.Unlock()
	if full {
		d.stats.DiskDropped.Add(1)
		return
	}
	select {
	case d.queue <- putItem{key: k, data: b}:
	default:
		d.stats.DiskDropped.Add(1)
		d.done(n)
	}
}

// putWait queues b for writing under k like Put, but waits for room in
// the queue rather than drop it (for Tiered.Drain). It reports false once
// the tier is closed or disabled.
func (d *Disk) putWait(k Key, b []byte, deadline time.Time) bool {
	if d.Disabled() {
		return false
	}
	d.qmu.RLock()
	defer d.qmu.RUnlock()
	if d.closed {
		return false
	}
	n := int64(len(b))
	d.pendMu.Lock()
	var wake *time.Timer // only once it waits: Drain puts every block RAM holds
	for d.pendSize > 0 && d.pendSize+n > d.opts.QueueBytes {
		if !time.Now().Before(deadline) { // a disk that hangs must not hold the exit
			d.pendMu.Unlock()
			return false
		}
		if wake == nil {
			wake = d.wakeAt(deadline)
			defer wake.Stop()
		}
		d.pendCond.Wait() // the writers drain the queue until Close, which waits for qmu
	}
	d.pend++
	d.pendSize += n
	d.pendMu.Unlock()
	select {
	case d.queue <- putItem{key: k, data: b}:
		return true
	default:
	}
	// The queue's count is full (small blocks): wait for a writer as
	// long as deadline allows.
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case d.queue <- putItem{key: k, data: b}:
		return true
	case <-t.C:
		d.done(n)
		return false
	}
}

// written counts the blocks the tier wrote (for Tiered.Drain).
func (d *Disk) written() int64 { return d.stats.DiskWrites.Load() }

// done ends a queued write of n bytes (written or not).
func (d *Disk) done(n int64) {
	d.pendMu.Lock()
	d.pend--
	d.pendSize -= n
	d.pendCond.Broadcast()
	d.pendMu.Unlock()
}

// Backlogged reports whether the write queue holds half of QueueBytes or
// more: the disk is behind, and work that only fills the cache (the
// sweep) should wait rather than have its blocks dropped.
func (d *Disk) Backlogged() bool { return d.queued(2) }

// queued reports whether the write queue, the blocks being written
// included, holds 1/frac of QueueBytes or more.
func (d *Disk) queued(frac int64) bool {
	d.pendMu.Lock()
	defer d.pendMu.Unlock()
	return frac*d.pendSize >= d.opts.QueueBytes
}

// Footprint is the most room a block of n bytes of k's object takes on
// disk, stored raw: its record's header and alignment. Planning by the
// bytes alone overfills a cache of small blocks.
func (d *Disk) Footprint(k Key, n int64) int64 {
	return alignUp(int64(blockHeaderLen(k, sumsOf(int(n), sumShift), 0))+n, d.align)
}

// Reserved is the room of a full disk cache that blocks do not take: the
// header of each of its segments, and of the ones its writers start as
// segments fill.
func (d *Disk) Reserved() int64 {
	return (d.max/d.segTarget + 1 + int64(2*d.opts.Writers)) * firstRecord(d.align)
}

// Full reports whether a block written now would push another out of the
// tier or be refused, as RAM.Full does: the tier is disabled, or within
// fullFor its policy refused a write (all it holds is in use) or evicted
// blocks to take one. A dropped write (queue full) does not count: it says
// the disk is busy, not that there is no room. Full turns false again once
// no block has been offered for fullFor, and the next one offered tells
// whether there is room yet.
func (d *Disk) Full() bool {
	if d.Disabled() {
		return true
	}
	return lately(d.lastFull.Load(), fullFor)
}

// Flush waits until every Put made before it has been written or dropped.
// It does not wait for a compaction.
func (d *Disk) Flush() {
	d.flushUntil(time.Time{})
}

// flushUntil is Flush that gives up at deadline (zero: never), and says
// whether the queue emptied.
func (d *Disk) flushUntil(deadline time.Time) bool {
	d.pendMu.Lock()
	defer d.pendMu.Unlock()
	if !deadline.IsZero() {
		wake := d.wakeAt(deadline)
		defer wake.Stop()
	}
	for d.pend > 0 {
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return false
		}
		d.pendCond.Wait()
	}
	return true
}

// wakeAt wakes the waiters on pendCond at deadline, so that they can give
// up. Called with pendMu held; the caller stops the timer.
func (d *Disk) wakeAt(deadline time.Time) *time.Timer {
	return time.AfterFunc(time.Until(deadline), func() {
		d.pendMu.Lock()
		d.pendCond.Broadcast()
		d.pendMu.Unlock()
	})
}

// Close drains the write queue, stops the writers and the compactor (a
// compaction stops after the record it is copying), saves the policy state
// and releases the directory. Get misses and Put is ignored afterwards.
// Close is idempotent.
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
	d.stopping.Store(true)
	d.mu.Lock()
	d.kickClosed = true
	close(d.kick)
	d.mu.Unlock()
	d.cwg.Wait()

	d.mu.Lock()
	mean, samples := d.policy.ReuseDistance()
	var dead []recKey
	segs := make([]*segment, 0, len(d.segs))
	for _, s := range d.segs {
		for _, off := range s.deadOffs {
			dead = append(dead, recKey{s.seq, off})
		}
		s.removed = true
		segs = append(segs, s)
	}
	// Readers after Close see an empty index.
	d.policy = NewPolicy()
	d.index = make(map[uint64]recLoc)
	d.segs = make(map[uint64]*segment)
	d.dead = 0
	d.mu.Unlock()
	for _, s := range segs {
		s.release()
	}
	if d.lock != nil {
		// Emptied from outside while in use (a cleaner of /tmp, a user's
		// rm): what it held is gone, and a file written now would make the
		// next open refuse a directory without a marker.
		if err := CheckDir(d.dir); err != nil {
			d.log.Warn("disk cache: its directory lost its marker while in use (emptied from outside?): what it held is gone, and nothing is saved there",
				"dir", d.dir, "err", err)
		} else if err := d.saveState(mean, samples, dead); err != nil {
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
	a := &appender{d: d}
	defer a.seal()
	var c compressor
	var batch []putItem
	var next putItem // taken from the queue, for the next batch
	have, open := false, true
	for have || open {
		if !have {
			if next, open = <-d.queue; !open {
				break
			}
		}
		batch, next, have, open = d.gather(append(batch[:0], next))
		d.write(a, &c, batch)
		for i := range batch {
			d.done(int64(len(batch[i].data)))
			batch[i] = putItem{} // let the blocks go
		}
	}
}

// Batches: blocks already queued when a writer takes one go with it, up to
// these bounds, in one write. One write per block would leave the queue
// full (and drop blocks) while each direct write waits for the device.
const (
	maxBatchBytes = 4 << 20
	maxBatchItems = 64
)

// gather adds to batch the blocks queued now while the batch stays within
// its bounds (a quarter of a segment, a sixteenth of the cache). The block
// that would not fit is returned as next (have); open is false once the
// queue is closed.
func (d *Disk) gather(batch []putItem) (_ []putItem, next putItem, have, open bool) {
	limit := min(maxBatchBytes, d.segTarget/4, d.max/16)
	bytes := int64(len(batch[0].data))
	for len(batch) < maxBatchItems {
		select {
		case it, ok := <-d.queue:
			if !ok {
				return batch, putItem{}, false, false
			}
			if bytes+int64(len(it.data)) > limit {
				return batch, it, true, true
			}
			batch = append(batch, it)
			bytes += int64(len(it.data))
		default:
			return batch, putItem{}, false, true
		}
	}
	return batch, putItem{}, false, true
}

// record is a block admitted for writing.
type record struct {
	id     uint64
	saved  int64
	offset int64 // in the batch
}

// write stores a batch of blocks: admission and eviction for each, then one
// append to the writer's segment; each record enters the index once
// written, so a crash at any moment leaves at worst a torn record at the
// end of a segment, which the next open ignores.
func (d *Disk) write(a *appender, c *compressor, batch []putItem) {
	if d.Disabled() {
		return
	}
	// Records another writer writes after this statfs are in neither
	// avail nor d.unwritten: counted from d.appended below. One written
	// between this read and the statfs counts twice, which errs on the
	// safe side.
	d.mu.Lock()
	appended0 := d.appended
	d.mu.Unlock()
	free, floor, err := d.freeSpace(d.dir, d.minFree)
	if err != nil {
		d.fail("statfs", err)
		return
	}
	avail := free - floor
	var recs []record
	var chunks []chunk
	var marked []uint64 // in d.inflight, for this batch
	var total int64
	defer func() {
		d.mu.Lock()
		for _, id := range marked {
			delete(d.inflight, id)
		}
		d.mu.Unlock()
	}()
	for _, it := range batch {
		id := keyHash(it.key)
		d.mu.Lock()
		_, busy := d.inflight[id]
		if busy || d.policy.Contains(id) {
			d.mu.Unlock()
			continue // content under one ETag never changes: nothing to do
		}
		d.inflight[id] = struct{}{}
		marked = append(marked, id)
		d.mu.Unlock()

		// Compression yields to a backlog: it costs the CPU a writer needs
		// to keep up, and a block written raw beats one dropped.
		compress := d.opts.Compress
		skipped := compress && d.queued(4)
		if skipped {
			compress = false
		}
		hdr, payload, saved := c.encodeBlock(it.key, it.data, compress)
		n := int64(len(hdr) + len(payload))
		span := alignUp(n, d.align)

		d.mu.Lock()
		// Segment bytes = live + dead: the policy gets what is left for
		// live records once dead bytes (until reclaimed) are counted.
		// avail is net of the floor (it may be negative); the records
		// admitted by every writer and not yet written take from it.
		limit := min(d.max, d.policy.Used()+d.dead+avail-d.unwritten-(d.appended-appended0))
		limit -= d.dead
		ok, victims := d.policy.Admit(id, span, limit)
		if !ok || len(victims) > 0 {
			d.lastFull.Store(time.Now().UnixNano())
		}
		drop := d.evictLocked(victims, nil)
		if ok {
			d.unwritten += span
		} else {
			d.kickLocked(true)
		}
		d.publish()
		d.mu.Unlock()
		d.removeSegments(drop)
		if !ok {
			d.stats.DiskRejected.Add(1)
			continue
		}
		if skipped { // counted once admitted: a refused block is not "written raw"
			d.stats.DiskCompressSkipped.Add(1)
		}
		recs = append(recs, record{id: id, saved: saved, offset: total})
		chunks = append(chunks, chunk{parts: [][]byte{hdr, payload}, span: span})
		total += span
	}
	if len(recs) == 0 {
		return
	}
	seg, off, err := a.append(chunks)
	var drop []*segment
	d.mu.Lock()
	d.unwritten -= total
	d.appended += total
	for i, r := range recs {
		if err != nil {
			d.policy.Remove(r.id)
		} else {
			drop = d.finishLocked(seg, off+r.offset, chunks[i].span, r.id, drop)
		}
	}
	d.publish()
	d.mu.Unlock()
	d.removeSegments(drop)
	if err != nil && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		// The file system filled past what statfs said (other writers, its
		// own overhead): refused blocks, as from a full cache; the next
		// batch's statfs sees what is left. Not a failing disk.
		d.stats.DiskRejected.Add(int64(len(recs)))
		d.lastFull.Store(time.Now().UnixNano())
		if d.fullWarned.CompareAndSwap(false, true) {
			d.log.Warn("disk cache: its file system is full; blocks are cached as space frees", "dir", d.dir, "err", err)
		}
		return
	}
	if err != nil && outOfFiles(err) {
		// The process is out of file descriptors (a data loader that opens
		// many files at once): the blocks are refused; a later segment is
		// created once descriptors free. The disk itself is fine.
		d.stats.DiskRejected.Add(int64(len(recs)))
		if d.fdsWarned.CompareAndSwap(false, true) {
			d.log.Warn("disk cache: out of file descriptors; blocks are not cached until some close (raise the open-files limit)", "dir", d.dir, "err", err)
		}
		return
	}
	if err != nil {
		d.fail("write", err)
		return
	}
	for i, r := range recs {
		d.stats.DiskWrites.Add(1)
		d.stats.DiskWriteBytes.Add(chunks[i].span)
		d.stats.DiskSavedBytes.Add(r.saved)
	}
}

// StateName is the file where Close saves the policy's learned reuse
// distance and the records that died (evicted, corrupt) in segments that
// remain. A missing or bad one (after a crash) only means re-learning the
// distance and finding those records live again.
const StateName = "policy-state"

const (
	stateMagicV1 = "DACP1" // reuse distance only (format 1)
	stateMagic   = "DACP2" // reuse distance, dead records, checksum
)

// encodeState lays out the state file: magic, mean (f64), samples (u64),
// dead record count (u64), (seq u64, offset u64) per dead record, xxhash64
// of all the bytes before it.
func encodeState(mean float64, samples uint64, dead []recKey) []byte {
	buf := make([]byte, 0, len(stateMagic)+24+16*len(dead)+8)
	buf = append(buf, stateMagic...)
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(mean))
	buf = binary.LittleEndian.AppendUint64(buf, samples)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(dead)))
	for _, r := range dead {
		buf = binary.LittleEndian.AppendUint64(buf, r.seq)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(r.off))
	}
	return binary.LittleEndian.AppendUint64(buf, xxhash.Sum64(buf))
}

// decodeState is the inverse of encodeState; it also reads a format 1
// state file (no dead records).
func decodeState(buf []byte) (mean float64, samples uint64, dead map[recKey]struct{}, ok bool) {
	m := len(stateMagic)
	switch {
	case len(buf) == m+16 && string(buf[:m]) == stateMagicV1:
	case len(buf) >= m+32 && string(buf[:m]) == stateMagic:
		body := buf[:len(buf)-8]
		if xxhash.Sum64(body) != binary.LittleEndian.Uint64(buf[len(body):]) {
			return 0, 0, nil, false
		}
		n := binary.LittleEndian.Uint64(body[m+16:])
		rest := body[m+24:]
		if uint64(len(rest)) != 16*n {
			return 0, 0, nil, false
		}
		dead = make(map[recKey]struct{}, n)
		for i := 0; i+16 <= len(rest); i += 16 {
			dead[recKey{binary.LittleEndian.Uint64(rest[i:]), int64(binary.LittleEndian.Uint64(rest[i+8:]))}] = struct{}{}
		}
	default:
		return 0, 0, nil, false
	}
	mean = math.Float64frombits(binary.LittleEndian.Uint64(buf[m:]))
	samples = binary.LittleEndian.Uint64(buf[m+8:])
	return mean, samples, dead, true
}

func (d *Disk) saveState(mean float64, samples uint64, dead []recKey) error {
	tmp := filepath.Join(d.dir, tempPrefix+StateName)
	if err := os.WriteFile(tmp, encodeState(mean, samples, dead), 0o644); err != nil {
		return fmt.Errorf("save policy state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, StateName)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save policy state: %w", err)
	}
	return nil
}

// loadState reads and then removes the saved state, so that a crash after
// this run never restores numbers older than its own learning. It returns
// the dead records.
func (d *Disk) loadState() map[recKey]struct{} {
	p := filepath.Join(d.dir, StateName)
	buf, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	os.Remove(p)
	mean, samples, dead, ok := decodeState(buf)
	if !ok {
		return nil
	}
	d.mu.Lock()
	d.policy.SetReuseDistance(mean, samples)
	d.mu.Unlock()
	return dead
}

// Remove drops the record for k, if any; its bytes become dead. A caller
// that found it of no use (a block of another length, written under
// another block size) removes it so that a Put of k is written: while k is
// held, Put skips it.
func (d *Disk) Remove(k Key) {
	id := keyHash(k)
	d.mu.Lock()
	loc, ok := d.index[id]
	d.mu.Unlock()
	if ok {
		d.forget(id, loc)
	}
}

// Contains reports whether k has an entry, from the index alone: no file is
// read and the eviction policy does not count it as an access.
func (d *Disk) Contains(k Key) bool {
	id := keyHash(k)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.policy.Contains(id)
}
