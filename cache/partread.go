package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"unsafe"
)

// partHead is what ReadPart reads first: one page, which holds the header
// of a block of up to 8 MiB with a key of up to 2 KiB.
const partHead = dioAlign

// ReadPart copies into p the raw bytes of block k from off on, reading (through
// the page cache: see readRecord), decoding when compressed, and checking only
// the chunks of the record that hold them, instead of the whole block. n is the block's length: a record
// of another length (written under another block size) is not read.
// ReadPart reports false, leaving p alone, when k is not on disk, the range
// is not within the block, or the record has no chunk checksums
// (compressed whole, one chunk long, or written before them): the caller then
// reads the block whole, and that read counts the hit or the miss. A
// corrupt record is dropped, as Get drops it.
func (d *Disk) ReadPart(k Key, n int64, p []byte, off int64) bool {
	if len(p) == 0 || off < 0 || off+int64(len(p)) > n {
		return false
	}
	id := keyHash(k)
	d.mu.Lock()
	loc, ok := d.index[id]
	if ok {
		loc.seg.acquire()
	}
	d.mu.Unlock()
	if !ok {
		return false
	}
	defer loc.seg.release()

	h, ok := d.heads.get(id, loc, k)
	if !ok {
		var err error
		if h, err = d.readHeader(id, loc, k); err != nil {
			return false
		}
		d.heads.put(id, loc, k, h)
	}
	if h.sums == nil || int64(h.rawLen) != n {
		return false
	}

	// The chunks that hold [off, off+len(p)).
	first := int(off >> h.sumShift)
	lo := int64(first) << h.sumShift
	hi := min(((off+int64(len(p))-1)>>h.sumShift+1)<<h.sumShift, n)
	stOff, stLen := lo, hi-lo
	if h.clens != nil {
		stOff, stLen = h.chunkSpan(first, int((hi-1)>>h.sumShift))
	}
	chunks, err := d.readRecord(loc, int64(h.headerLen)+stOff, stLen)
	if err != nil {
		d.readFailed(id, loc, err)
		return false
	}
	defer d.dio.put(chunks)
	if h.clens != nil {
		stored := chunks
		chunks = d.dio.get(hi - lo)
		defer d.dio.put(chunks)
		err = decodeChunks(chunks, stored, first, &h)
	}
	if err == nil {
		err = checkChunks(chunks, first, &h)
	}
	if err != nil {
		d.corrupt(id, loc, err)
		return false
	}
	copy(p, chunks[off-lo:])

	d.mu.Lock()
	d.policy.Access(id)
	d.mu.Unlock()
	d.stats.DiskPartHits.Add(1)
	d.stats.DiskReadBytes.Add(int64(len(p)))
	return true
}

// readHeader reads and checks the header of the record for k at loc (id),
// dropping the record when it is corrupt. The header it returns holds its
// own copy of the chunk checksums, and no key.
func (d *Disk) readHeader(id uint64, loc recLoc, k Key) (recHeader, error) {
	head, err := d.readRecord(loc, 0, min(loc.n, partHead))
	if err != nil {
		d.readFailed(id, loc, err)
		return recHeader{}, err
	}
	h, err := parseHeader(head)
	if errors.Is(err, errShortHeader) {
		// A long key: read the whole header.
		hl, herr := headerLen(head)
		d.dio.put(head)
		if herr != nil || int64(hl) > loc.n {
			err = fmt.Errorf("%w: header length", errCorrupt)
			d.corrupt(id, loc, err)
			return recHeader{}, err
		}
		if head, err = d.readRecord(loc, 0, int64(hl)); err != nil {
			d.readFailed(id, loc, err)
			return recHeader{}, err
		}
		h, err = parseHeader(head)
	}
	defer d.dio.put(head)
	if err == nil && (string(h.object) != k.Object || string(h.etag) != k.ETag || h.block != k.Block) {
		err = fmt.Errorf("%w: key mismatch", errCorrupt)
	}
	if err == nil && h.recordLen() > loc.n {
		err = fmt.Errorf("%w: record length", errCorrupt)
	}
	if err != nil {
		d.corrupt(id, loc, err)
		return recHeader{}, err
	}
	h.object, h.etag = nil, nil
	h.sums, h.clens = bytes.Clone(h.sums), bytes.Clone(h.clens)
	return h, nil
}

// headCache keeps the checked headers (chunk checksums) of the records
// ReadPart read lately, up to maxBytes of memory, so that a part read
// of a record costs one disk read instead of two. An entry holds for the
// record at one place only: a record moved or written again is read anew.
// Its lock is a leaf.
type headCache struct {
	mu       sync.Mutex
	m        map[uint64]headEntry // guarded by mu
	bytes    int64                // guarded by mu: memory held (headEntry.cost)
	maxBytes int64
}

type headEntry struct {
	loc recLoc
	key Key
	h   recHeader // object and etag nil; sums and clens their own copies
}

// headCacheBytes: the headers of about 6,000 blocks of 8 MiB (48 GiB of
// cache), or 20,000 small ones.
const headCacheBytes = 8 << 20

func (c *headCache) get(id uint64, loc recLoc, k Key) (recHeader, bool) {
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if !ok || e.loc != loc || e.key != k {
		return recHeader{}, false
	}
	return e.h, true
}

// put keeps h (from readHeader: it aliases no read buffer).
func (c *headCache) put(id uint64, loc recLoc, k Key, h recHeader) {
	e := headEntry{loc: loc, key: k, h: h}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[uint64]headEntry)
	}
	if old, ok := c.m[id]; ok { // a record moved by compaction
		c.bytes -= old.cost()
		delete(c.m, id)
	}
	// Random replacement (map order): part reads go to random records.
	for victim, v := range c.m {
		if c.bytes+e.cost() <= c.maxBytes {
			break
		}
		delete(c.m, victim)
		c.bytes -= v.cost()
	}
	c.m[id] = e
	c.bytes += e.cost()
}

// cost is the memory an entry holds: its checksums, the entry itself and
// about as much again for its map slot.
func (e headEntry) cost() int64 {
	return int64(len(e.h.sums)+len(e.h.clens)) + 2*int64(unsafe.Sizeof(e))
}

// readRecord reads n bytes at off within the record at loc, into memory
// from d.dio that the caller gives back (d.dio.put) once done with it. It
// reads through the page cache, unlike Get (see dioread.go): RAM does not
// hold a block read in part (Tiered.ReadPart), and a random reader's
// chunks then stay in memory the kernel has to spare, for its next reads
// nearby, where a direct read would go to the disk each time
// (bench/RESULTS.md). The kernel gives those pages back when memory is
// short.
func (d *Disk) readRecord(loc recLoc, off, n int64) ([]byte, error) {
	buf := d.dio.get(n)
	if _, err := loc.seg.f.ReadAt(buf, loc.off+off); err != nil {
		d.dio.put(buf)
		return nil, err
	}
	return buf, nil
}

// readFailed handles a failed read of the record at loc, as Get does: a
// segment cut short is corrupt, any other error a failing disk.
func (d *Disk) readFailed(id uint64, loc recLoc, err error) {
	if errors.Is(err, io.EOF) {
		d.corrupt(id, loc, err)
		return
	}
	d.fail("read", err)
	d.forget(id, loc)
}
