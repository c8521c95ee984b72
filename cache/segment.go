package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// segment is one segment file: an append-only run of records. Its fd stays
// open while the segment is in use; readers, appenders and the compactor
// hold a reference for each pread or pwrite, so the fd is closed only after
// the last one, never under a reader's feet.
type segment struct {
	seq  uint64
	path string
	f    *os.File
	hdr  int64 // bytes before the first record: the header and its padding
	// df is f's twin opened with O_DIRECT, while direct I/O works: for
	// appends on segments this run creates, and for reads of aligned
	// records (readDirect) of those and of earlier runs' aligned segments;
	// nil otherwise.
	df *os.File
	// refs: one for the Disk's table (dropped when the segment is removed
	// or the Disk closes) plus one per I/O in progress; the last release
	// closes f.
	refs atomic.Int32

	// The rest is guarded by Disk.mu. Invariant: size = live + dead + pendBytes.
	size      int64   // bytes in the file, counting appends reserved and not yet written
	live      int64   // bytes of the records in the index
	dead      int64   // bytes of records not in the index, of a torn tail, of the segment header
	pending   int     // appends reserved and not finished
	pendBytes int64   // their bytes
	sealed    bool    // no more appends: from an earlier run, full, or picked for compaction
	busy      bool    // being compacted
	removed   bool    // out of the table (deleted, or the Disk closed)
	deadOffs  []int64 // offsets of complete records that died, saved at Close
}

// acquire takes a reference for one I/O. The caller holds Disk.mu and the
// segment is not removed, so the table's reference is still held.
func (s *segment) acquire() { s.refs.Add(1) }

// release drops a reference; the last one closes the file.
func (s *segment) release() {
	if s.refs.Add(-1) == 0 && s.f != nil {
		s.f.Close()
		if s.df != nil {
			s.df.Close()
		}
	}
}

// appender appends records to its own active segment. Each writer
// goroutine and the compactor own one, so appends never contend for a
// file offset.
type appender struct {
	d      *Disk
	active *segment // nil until the first append
	// stage is page-aligned memory (mmap) where a batch of records is put
	// together for one write (direct I/O needs the alignment); reused, so
	// writes touch no fresh memory.
	stage []byte
}

// staged returns n bytes of a's staging buffer, growing it as needed.
func (a *appender) staged(n int64) ([]byte, error) {
	if int64(len(a.stage)) < n {
		a.freeStage()
		size := int(alignUp(n, 1<<20))
		b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("staging buffer: %w", err)
		}
		a.stage = b
	}
	return a.stage[:n], nil
}

func (a *appender) freeStage() {
	if a.stage != nil {
		_ = unix.Munmap(a.stage)
		a.stage = nil
	}
}

// chunk is one record to append: its bytes (header, payload) and its span,
// the bytes it takes in the segment, padding included.
type chunk struct {
	parts [][]byte
	span  int64
}

// append reserves the chunks' spans at the end of the active segment
// (rotating to a new segment when the active one is sealed or would grow
// past the target), writes them there in one write and, with Options.Sync,
// fdatasyncs it. On success the caller must end each record's append
// (finishLocked, or the compactor's equivalent) with the returned segment
// and the record's offset. On error the append is undone here: the segment
// is sealed and cut back to off (or, if that fails, the bytes are dead).
func (a *appender) append(chunks []chunk) (seg *segment, off int64, err error) {
	d := a.d
	var n int64
	for _, c := range chunks {
		n += c.span
	}
	count := len(chunks)
	for {
		d.mu.Lock()
		s := a.active
		if s != nil && !s.sealed && (s.size == firstRecord(d.align) || s.size+n <= d.segTarget) {
			off = s.size
			s.size += n
			s.pendBytes += n
			s.pending += count
			s.acquire()
			d.mu.Unlock()
			seg = s
			break
		}
		var drop []*segment
		if s != nil {
			s.sealed = true
			drop = d.reclaimLocked(s, drop)
			a.active = nil
		}
		d.mu.Unlock()
		d.removeSegments(drop)
		ns, err := d.createSegment()
		if err != nil {
			return nil, 0, err
		}
		d.mu.Lock()
		d.segs[ns.seq] = ns
		d.dead += ns.dead
		a.active = ns
		d.mu.Unlock()
	}
	defer seg.release()
	err = a.write(seg, off, n, chunks)
	if err == nil && d.opts.Sync {
		if err = syscall.Fdatasync(int(seg.f.Fd())); err != nil {
			err = fmt.Errorf("sync %s: %w", seg.path, err)
		}
	}
	if err != nil {
		cut := seg.f.Truncate(off) == nil
		d.mu.Lock()
		seg.pending -= count
		seg.pendBytes -= n
		seg.sealed = true
		if cut {
			seg.size -= n
		} else {
			seg.dead += n
			d.dead += n
		}
		drop := d.reclaimLocked(seg, nil)
		d.publish()
		d.mu.Unlock()
		d.removeSegments(drop)
		return nil, 0, err
	}
	return seg, off, nil
}

// write puts the chunks (n bytes in all) together in the staging buffer,
// each zero-padded to its span, and writes them at off: one direct write
// where the segment allows it, else one write through the page cache.
func (a *appender) write(seg *segment, off, n int64, chunks []chunk) error {
	buf, err := a.staged(n)
	if err != nil {
		return err
	}
	var pos int64
	for _, c := range chunks {
		end := pos + c.span
		for _, p := range c.parts {
			pos += int64(copy(buf[pos:end], p))
		}
		clear(buf[pos:end])
		pos = end
	}
	if seg.df != nil && a.d.direct.Load() {
		_, err := seg.df.WriteAt(buf, off)
		if !errors.Is(err, syscall.EINVAL) {
			if err != nil {
				return fmt.Errorf("write %s: %w", seg.path, err)
			}
			return nil
		}
		// The file system took O_DIRECT at open but refuses the write:
		// go on through the page cache (same layout).
		a.d.direct.Store(false)
		a.d.log.Debug("disk cache: direct I/O refused; writing through the page cache", "dir", a.d.dir, "err", err)
	}
	if _, err := seg.f.WriteAt(buf, off); err != nil {
		return fmt.Errorf("write %s: %w", seg.path, err)
	}
	return nil
}

// seal ends the appender's active segment (at Close).
func (a *appender) seal() {
	defer a.freeStage()
	d := a.d
	d.mu.Lock()
	var drop []*segment
	if s := a.active; s != nil {
		s.sealed = true
		drop = d.reclaimLocked(s, drop)
		a.active = nil
	}
	d.mu.Unlock()
	d.removeSegments(drop)
}

// createSegment creates the next segment file with its header.
func (d *Disk) createSegment() (*segment, error) {
	for {
		seq := d.nextSeq.Add(1) - 1
		path := filepath.Join(d.dir, segDirName, segmentName(seq))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue // not ours to touch; take the next number
		}
		if err != nil {
			return nil, fmt.Errorf("create segment: %w", err)
		}
		// The header goes through the page cache, direct writes only ever
		// touch the records after it.
		hdr := segmentHeader(seq, d.align)
		if _, err := f.WriteAt(hdr, 0); err != nil {
			f.Close()
			os.Remove(path)
			return nil, fmt.Errorf("write segment header %s: %w", path, err)
		}
		s := &segment{seq: seq, path: path, f: f, hdr: int64(len(hdr)), size: int64(len(hdr)), dead: int64(len(hdr))}
		if d.align > 0 && d.direct.Load() {
			if df, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0); err == nil {
				s.df = df
			} else if !outOfFiles(err) { // out of descriptors: this segment goes through the page cache
				d.direct.Store(false)
				d.log.Debug("disk cache: no direct I/O; writing through the page cache", "dir", d.dir, "err", err)
			}
		}
		s.refs.Store(1)
		return s, nil
	}
}

// finishLocked ends a successful append of n bytes at off in seg: the
// record for id enters the index if the policy still holds id (it may have
// been evicted while it was written), else its bytes are dead. It returns
// the segments to remove. Caller holds mu.
func (d *Disk) finishLocked(seg *segment, off, n int64, id uint64, drop []*segment) []*segment {
	seg.pending--
	seg.pendBytes -= n
	if _, indexed := d.index[id]; !indexed && d.policy.Contains(id) {
		d.index[id] = recLoc{seg: seg, off: off, n: n}
		seg.live += n
	} else {
		seg.dead += n
		d.dead += n
		seg.deadOffs = append(seg.deadOffs, off)
		d.kickLocked(false)
	}
	if seg.sealed && seg.pending == 0 {
		drop = d.reclaimLocked(seg, drop)
		d.kickLocked(false) // it may now be compacted
	}
	return drop
}

// killLocked turns the live record at loc into dead bytes and returns the
// segments to remove. The caller has deleted it from the index.
func (d *Disk) killLocked(loc recLoc, drop []*segment) []*segment {
	s := loc.seg
	s.live -= loc.n
	s.dead += loc.n
	d.dead += loc.n
	s.deadOffs = append(s.deadOffs, loc.off)
	d.kickLocked(false)
	return d.reclaimLocked(s, drop)
}

// reclaimLocked takes s out of the table and adds it to drop if it is a
// sealed segment with nothing live, nothing pending and no compaction
// running. Caller holds mu.
func (d *Disk) reclaimLocked(s *segment, drop []*segment) []*segment {
	if s.removed || !s.sealed || s.busy || s.live > 0 || s.pending > 0 {
		return drop
	}
	s.removed = true
	delete(d.segs, s.seq)
	d.dead -= s.dead
	return append(drop, s)
}

// removeSegments deletes the files of segments taken out of the table and
// drops the table's reference (readers in flight keep the fd open).
func (d *Disk) removeSegments(drop []*segment) {
	for _, s := range drop {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.fail("remove segment", err)
		}
		s.release()
	}
}

// kickLocked wakes the compactor if dead bytes call for a compaction;
// rejected says a write was just refused for lack of space. Caller holds mu.
func (d *Disk) kickLocked(rejected bool) {
	if d.dead == d.idleDead {
		return // the compactor found nothing to do at these dead bytes
	}
	if rejected && d.dead > 0 {
		d.compactWanted = true
	}
	if d.kickClosed || !(d.compactWanted || d.dead > d.deadLimit()) {
		return
	}
	select {
	case d.kick <- struct{}{}:
		d.kicks++
	default:
	}
}

// deadLimit is the dead bytes above which the compactor runs.
func (d *Disk) deadLimit() int64 { return d.max / 4 }

// compactor reclaims dead bytes: it copies the live records of the sealed
// segment with the most dead bytes into its own active segment and deletes
// the old one. It runs when dead bytes exceed a quarter of MaxBytes, or when
// a write was rejected while dead bytes existed (then only segments at
// least half dead qualify, so a copy never costs more than it frees).
func (d *Disk) compactor() {
	defer d.cwg.Done()
	a := &appender{d: d}
	defer a.seal()
	var buf []byte
	for range d.kick {
		d.mu.Lock()
		d.kicks--
		d.compacting = true
		d.mu.Unlock()
		for !d.stopping.Load() && !d.Disabled() {
			s := d.pickCompaction()
			if s == nil {
				break
			}
			var ok bool
			if buf, ok = d.compact(a, s, buf); !ok {
				break // no room to copy now; try again at the next wake-up
			}
		}
		d.mu.Lock()
		d.compacting = false
		d.mu.Unlock()
	}
}

// pickCompaction returns a segment to compact, marked busy, or nil. When
// the best candidate is still active it is sealed and picked once its
// appender is done with it.
func (d *Disk) pickCompaction() *segment {
	d.mu.Lock()
	defer d.mu.Unlock()
	over := d.dead > d.deadLimit()
	if !over && !d.compactWanted {
		return nil
	}
	// Above the threshold a quarter of all bytes is dead, so some segment
	// is at least a quarter dead; on a rejected write, ask for half.
	qualifies := func(s *segment) bool {
		if over {
			return s.dead*4 >= s.size
		}
		return s.dead*2 >= s.size
	}
	var best, bestActive *segment
	for _, s := range d.segs {
		if s.removed || s.busy || s.dead <= s.hdr || !qualifies(s) {
			continue
		}
		if s.sealed {
			if s.pending == 0 && (best == nil || s.dead > best.dead) {
				best = s
			}
		} else if bestActive == nil || s.dead > bestActive.dead {
			bestActive = s
		}
	}
	if best != nil {
		best.busy = true
		best.acquire()
		return best
	}
	if bestActive != nil {
		// Its appender rotates at its next append; finish kicks us once
		// the appends in flight are done.
		bestActive.sealed = true
		if bestActive.pending == 0 {
			bestActive.busy = true
			bestActive.acquire()
			return bestActive
		}
		return nil
	}
	d.compactWanted = false
	d.idleDead = d.dead
	return nil
}

// compact copies the live records of s into a's segment, updating the
// index after each copy, and deletes s. It stops early (leaving s sealed,
// with what is left) when the Disk closes or on an error. It returns false,
// doing nothing, when the file system has no room for the copies (they
// exist beside the originals until s is deleted). buf is scratch.
func (d *Disk) compact(a *appender, s *segment, buf []byte) ([]byte, bool) {
	d.mu.Lock()
	size, live := s.size, s.live
	d.mu.Unlock()
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.dir, &st); err == nil && int64(st.Bavail)*int64(st.Bsize) < live+minSegment {
		d.mu.Lock()
		s.busy = false
		drop := d.reclaimLocked(s, nil)
		d.mu.Unlock()
		s.release()
		d.removeSegments(drop)
		return buf, false
	}
	var copied, reclaimed int64
	_, _, why, err := scanSegment(s.f, s.seq, size, func(r recInfo) bool {
		if d.stopping.Load() || d.Disabled() {
			return false
		}
		d.mu.Lock()
		cur, ok := d.index[r.id]
		d.mu.Unlock()
		if !ok || cur.seg != s || cur.off != r.off {
			return true // dead
		}
		if int64(cap(buf)) < r.n {
			buf = make([]byte, r.n)
		}
		rec := buf[:r.n]
		if _, err := s.f.ReadAt(rec, r.off); err != nil {
			d.fail("compact: read", err)
			return false
		}
		// Copy only intact records; a bad one is dropped as Get would.
		if h, err := parseHeader(rec); err != nil || keyHashBytes(h.object, h.etag, h.block) != r.id {
			d.corrupt(r.id, cur, err)
			return true
		} else if _, err := decodePayload(rec, &h); err != nil {
			d.corrupt(r.id, cur, err)
			return true
		} else if alignUp(h.recordLen(), d.align) != r.n {
			// From a segment of the other layout: its span here would
			// differ from the one the policy holds. Dropped, not copied.
			d.forget(r.id, cur)
			return true
		}
		seg, off, err := a.append([]chunk{{parts: [][]byte{rec}, span: r.n}})
		if err != nil {
			if !outOfFiles(err) { // else the next compaction tries again
				d.fail("compact: write", err)
			}
			return false
		}
		d.mu.Lock()
		seg.pending--
		seg.pendBytes -= r.n
		if now, ok := d.index[r.id]; ok && now == cur {
			// Moved: the old copy is dead, s keeps it until deleted.
			d.index[r.id] = recLoc{seg: seg, off: off, n: r.n}
			seg.live += r.n
			s.live -= r.n
			s.dead += r.n
			s.deadOffs = append(s.deadOffs, r.off)
			d.dead += r.n
			copied += r.n
		} else {
			// Evicted or dropped during the copy.
			seg.dead += r.n
			d.dead += r.n
			seg.deadOffs = append(seg.deadOffs, off)
		}
		var drop []*segment
		if seg.sealed && seg.pending == 0 {
			drop = d.reclaimLocked(seg, drop)
		}
		d.publish()
		d.mu.Unlock()
		d.removeSegments(drop)
		return true
	})
	if err != nil {
		d.fail("compact: scan", err)
	}
	d.mu.Lock()
	s.busy = false
	if why != scanStopped && err == nil && s.live > 0 {
		// The scan ended at a bad record: what the index still points to
		// behind it is unreachable. Forget it.
		for id, loc := range d.index {
			if loc.seg == s {
				delete(d.index, id)
				d.policy.Remove(id)
				s.live -= loc.n
				s.dead += loc.n
				d.dead += loc.n
			}
		}
	}
	drop := d.reclaimLocked(s, nil)
	if len(drop) > 0 {
		reclaimed = s.size
	}
	d.publish()
	d.mu.Unlock()
	s.release()
	d.removeSegments(drop)
	d.log.Debug("disk cache: compacted segment", "segment", s.path, "copied", copied, "reclaimed", reclaimed)
	return buf, true
}
