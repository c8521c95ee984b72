package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/s2"
)

// On-disk format 2: a cache directory holds the marker file (MarkerName),
// the policy state (StateName) and a directory "segments" of segment files
// named "<seq as 16 hex>.seg". Seq numbers only grow: each run starts new
// segments after the highest one found and never appends to an older one.
//
// Segment file layout (little endian):
//
//	0  magic "DACS"
//	4  version u8: 2, records back to back from offset 16; 3, aligned
//	5  version 3: log2 of the alignment A (12: 4 KiB); version 2: 0
//	6  reserved [2]
//	8  seq u64 (the number in the file name)
//	16 records: version 2 back to back; version 3 each at a multiple of A
//	   (the first at A), zero-padded to the next multiple
//
// Version 3 is what direct I/O needs (aligned offsets and lengths): its
// writes bypass the page cache, which would otherwise hold a second copy
// of every block the RAM tier holds. A record's length in the index and
// the policy (its span) includes its padding.
//
// Record layout, the block encoding of format 1 unchanged (version 1):
//
//	0  magic "DACB"
//	4  version u8
//	5  flags u8 (flagS2: payload is an s2 block; flagSums: chunk checksums;
//	   flagS2Chunks, with flagSums only: each chunk an s2 block of its own)
//	6  with flagSums, log2 of the chunk size C; else 0
//	7  reserved u8
//	8  raw length u64
//	16 payload length u64
//	24 xxhash64 of the raw bytes; with flagSums, of the chunk checksums
//	   (which the header checksum covers: not checked again)
//	32 block i64
//	40 object length u32
//	44 etag length u32
//	48 object bytes, etag bytes
//	.. with flagSums: xxhash64 of each C bytes of the raw bytes, in order
//	.. with flagS2Chunks: u32 stored length of each chunk, in order; a
//	   chunk stored as long as its raw bytes is raw, a shorter one s2
//	.. xxhash64 of all header bytes above
//	.. payload
//
// The key is stored in full: the index is rebuilt from the record headers,
// and a record is checked against the key asked for. The header checksum
// stops a flipped length from driving a huge allocation (or a scan running
// off into the payload) before the payload checksum runs.
//
// Chunk checksums (records longer than one chunk) let a read of a few KiB
// of a block check, and so read, only the chunks it covers
// (Disk.ReadPart): a reader at random offsets would otherwise read and
// hash a whole block from disk for each of its reads. For the same reason
// a compressed record of several chunks compresses each chunk on its own
// (flagS2Chunks): a part read decodes only the chunks it covers, not
// megabytes of block. A record without chunk checksums (one chunk long,
// compressed whole, or written before them) is only read whole.
const (
	blockMagic    = "DACB"
	formatVersion = 1 // of the record encoding
	flagS2        = 1 << 0
	flagSums      = 1 << 1
	flagS2Chunks  = 1 << 2
	fixedHeader   = 48
	// sumShift: chunks of 64 KiB, a few kernel reads; 1 KiB of checksums
	// per 8 MiB block.
	sumShift = 16
	// Bounds on a chunk size trusted from a header (log2).
	minSumShift = 12
	maxSumShift = 24
	// maxRawLen bounds the raw length trusted from a header.
	maxRawLen = 1 << 30
	// maxKeyLen bounds object + etag lengths trusted from a header (S3 keys
	// are at most 1024 bytes).
	maxKeyLen = 64 << 10

	segMagic        = "DACS"
	segVersion      = 2 // records back to back
	segVersionAlign = 3 // records aligned
	segHeaderLen    = 16
	// Alignment bounds for version 3 (log2).
	minAlignShift = 9
	maxAlignShift = 16
	segDirName    = "segments"
	segSuffix     = ".seg"
)

var errCorrupt = errors.New("corrupt cache block")

// keyHash names a key in the index. Lengths are hashed in so that
// ("a\x00", "b") and ("a", "\x00b") differ.
func keyHash(k Key) uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(len(k.Object)))
	_, _ = d.Write(buf[:])
	_, _ = d.WriteString(k.Object)
	binary.LittleEndian.PutUint64(buf[:], uint64(len(k.ETag)))
	_, _ = d.Write(buf[:])
	_, _ = d.WriteString(k.ETag)
	binary.LittleEndian.PutUint64(buf[:], uint64(k.Block))
	_, _ = d.Write(buf[:])
	return d.Sum64()
}

// keyHashBytes is keyHash of a key held in a record header, without
// allocating strings.
func keyHashBytes(object, etag []byte, block int64) uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(len(object)))
	_, _ = d.Write(buf[:])
	_, _ = d.Write(object)
	binary.LittleEndian.PutUint64(buf[:], uint64(len(etag)))
	_, _ = d.Write(buf[:])
	_, _ = d.Write(etag)
	binary.LittleEndian.PutUint64(buf[:], uint64(block))
	_, _ = d.Write(buf[:])
	return d.Sum64()
}

// segmentName is the file name of segment seq.
func segmentName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, segSuffix) }

// parseSegmentName is the inverse of segmentName.
func parseSegmentName(name string) (uint64, bool) {
	h, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(h) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(h, 16, 64)
	return seq, err == nil
}

// segmentHeader returns the header of segment seq whose records are
// aligned to align bytes (0: back to back). With alignment, the header is
// zero-padded to the first record, align bytes.
func segmentHeader(seq uint64, align int64) []byte {
	hdr := make([]byte, firstRecord(align))
	copy(hdr, segMagic)
	hdr[4] = segVersion
	if align > 0 {
		hdr[4] = segVersionAlign
		hdr[5] = byte(bits.TrailingZeros64(uint64(align)))
	}
	binary.LittleEndian.PutUint64(hdr[8:], seq)
	return hdr
}

// firstRecord is the offset of a segment's first record.
func firstRecord(align int64) int64 { return max(segHeaderLen, align) }

// alignUp rounds n up to a multiple of align (a power of two; 0: n).
func alignUp(n, align int64) int64 {
	if align <= 1 {
		return n
	}
	return (n + align - 1) &^ (align - 1)
}

// parseSegmentHeader checks a segment header against seq and returns the
// records' alignment (0: back to back).
func parseSegmentHeader(sh []byte, seq uint64) (align int64, ok bool) {
	if len(sh) < segHeaderLen || string(sh[0:4]) != segMagic || binary.LittleEndian.Uint64(sh[8:]) != seq {
		return 0, false
	}
	switch sh[4] {
	case segVersion:
		return 0, true
	case segVersionAlign:
		if sh[5] < minAlignShift || sh[5] > maxAlignShift {
			return 0, false
		}
		return 1 << sh[5], true
	}
	return 0, false
}

// compressor decides whether a block is worth compressing and does it. It
// holds scratch buffers, so each writer goroutine owns one.
type compressor struct {
	sample []byte
	chunk  []byte // s2.MaxEncodedLen of one chunk
	// chunkShift is log2 of the chunk size of the records it encodes (0:
	// sumShift); tests set it to make small records of many chunks.
	chunkShift uint8
}

func (c *compressor) shift() uint8 {
	if c.chunkShift == 0 {
		return sumShift
	}
	return c.chunkShift
}

const (
	// minSaving: store compressed only if the block shrinks by at least 12%;
	// below that, decoding costs more than the bytes saved.
	minSavingPct = 12
	sampleChunk  = 8 << 10
	sampleCount  = 4
	// incompressiblePct: a first sample that shrinks by less ends the test.
	incompressiblePct = 2
	// minCompressLen: tiny blocks are not worth the CPU.
	minCompressLen = 4 << 10
)

// worthCompressing compresses a few small samples spread over b with s2 and
// says whether they shrank; on JPEG or random data this costs a few µs per
// block instead of compressing the whole block for nothing.
func (c *compressor) worthCompressing(b []byte) bool {
	if len(b) < minCompressLen {
		return false
	}
	if need := s2.MaxEncodedLen(sampleChunk); cap(c.sample) < need {
		c.sample = make([]byte, need)
	}
	in, out := 0, 0
	step := len(b) / sampleCount
	// The middle first: it is the most typical part (headers are not), and
	// when it does not shrink at all (JPEG, video, packed tensors) the other
	// samples would not change the answer.
	for i := range sampleCount {
		off := ((i + sampleCount/2) % sampleCount) * step
		end := min(off+sampleChunk, len(b))
		enc := s2.Encode(c.sample[:cap(c.sample)], b[off:end])
		in += end - off
		out += len(enc)
		if i == 0 && out*100 > in*(100-incompressiblePct) {
			return false
		}
	}
	// Slightly laxer than minSavingPct: samples are noisy.
	return out*100 <= in*(100-minSavingPct+4)
}

// sumsOf is how many chunk checksums a block of n bytes carries: one per
// chunk of 1<<shift bytes, none for a block of one chunk.
func sumsOf(n int, shift uint8) int {
	if n > 1<<shift {
		return numChunks(uint64(n), shift)
	}
	return 0
}

// blockHeaderLen is the length of a block record's header for k, with
// nsums checksums and clens bytes of stored chunk lengths.
func blockHeaderLen(k Key, nsums, clens int) int {
	return fixedHeader + len(k.Object) + len(k.ETag) + 8*nsums + clens + 8
}

// encodeBlock returns the header and payload of the record for k and b,
// and how many bytes compression saved (0 when stored raw). A raw payload
// is b itself.
func (c *compressor) encodeBlock(k Key, b []byte, compress bool) (hdr, payload []byte, saved int64) {
	shift := c.shift()
	payload, flags := b, byte(0)
	nsums := sumsOf(len(b), shift)
	if nsums > 0 {
		flags = flagSums
	}
	var clens []byte // with flagS2Chunks: each chunk's stored length
	if compress && c.worthCompressing(b) {
		var enc []byte
		if nsums > 0 {
			enc, clens = c.encodeChunks(b)
		} else {
			enc = s2.Encode(nil, b)
		}
		if len(enc)*100 <= len(b)*(100-minSavingPct) {
			payload = enc
			saved = int64(len(b) - len(enc))
			if flags = flagS2; nsums > 0 {
				flags = flagSums | flagS2Chunks
			}
		}
	}
	if flags&flagS2Chunks == 0 {
		clens = nil
	}
	hdr = make([]byte, blockHeaderLen(k, nsums, len(clens)))
	copy(hdr[0:4], blockMagic)
	hdr[4] = formatVersion
	hdr[5] = flags
	binary.LittleEndian.PutUint64(hdr[8:], uint64(len(b)))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(payload)))
	binary.LittleEndian.PutUint64(hdr[32:], uint64(k.Block))
	binary.LittleEndian.PutUint32(hdr[40:], uint32(len(k.Object)))
	binary.LittleEndian.PutUint32(hdr[44:], uint32(len(k.ETag)))
	n := fixedHeader + copy(hdr[fixedHeader:], k.Object)
	n += copy(hdr[n:], k.ETag)
	if nsums > 0 {
		hdr[6] = shift
		sums := hdr[n : n+8*nsums]
		for i := range nsums {
			lo := i << shift
			binary.LittleEndian.PutUint64(sums[8*i:], xxhash.Sum64(b[lo:min(lo+1<<shift, len(b))]))
		}
		binary.LittleEndian.PutUint64(hdr[24:], xxhash.Sum64(sums))
		n += len(sums)
		n += copy(hdr[n:], clens)
	} else {
		binary.LittleEndian.PutUint64(hdr[24:], xxhash.Sum64(b))
	}
	binary.LittleEndian.PutUint64(hdr[n:], xxhash.Sum64(hdr[:n]))
	return hdr, payload, saved
}

// encodeChunks compresses each chunk of b (1<<c.shift() bytes) on its own
// with s2, keeping a chunk raw where s2 would not shrink it, and returns
// the chunks back to back and the stored length of each (u32s).
func (c *compressor) encodeChunks(b []byte) (payload, clens []byte) {
	shift := c.shift()
	if need := s2.MaxEncodedLen(1 << shift); len(c.chunk) < need {
		c.chunk = make([]byte, need)
	}
	nc := numChunks(uint64(len(b)), shift)
	payload = make([]byte, 0, len(b)) // no chunk is stored longer than raw
	clens = make([]byte, 4*nc)
	for i := range nc {
		raw := b[i<<shift : min((i+1)<<shift, len(b))]
		stored := s2.Encode(c.chunk, raw)
		if len(stored) >= len(raw) {
			stored = raw
		}
		payload = append(payload, stored...)
		binary.LittleEndian.PutUint32(clens[4*i:], uint32(len(stored)))
	}
	return payload, clens
}

// numChunks is how many chunks of 1<<shift bytes hold n bytes.
func numChunks(n uint64, shift uint8) int { return int((n + 1<<shift - 1) >> shift) }

// recHeader is the parsed, checked header of a record. object and etag
// alias the buffer it was parsed from.
type recHeader struct {
	flags      byte
	rawLen     uint64
	payloadLen uint64
	sum        uint64
	block      int64
	object     []byte
	etag       []byte
	sumShift   uint8  // with flagSums: log2 of the chunk size
	sums       []byte // with flagSums: the chunk checksums
	clens      []byte // with flagS2Chunks: the chunks' stored lengths (u32s)
	headerLen  int
}

// recordLen is the length of the whole record (header and payload).
func (h *recHeader) recordLen() int64 { return int64(h.headerLen) + int64(h.payloadLen) }

// errShortHeader: buf ends inside the header; more bytes may make it valid.
var errShortHeader = errors.New("short record header")

// parseHeader checks magic, version, the header checksum and the fields of
// the record header at the start of buf. It returns errShortHeader when
// buf ends inside a header that looks valid so far, and an error wrapping
// errCorrupt when the bytes are not a record header.
func parseHeader(buf []byte) (recHeader, error) {
	var h recHeader
	if len(buf) < fixedHeader {
		if len(buf) >= 5 && (string(buf[0:4]) != blockMagic || buf[4] != formatVersion) {
			return h, fmt.Errorf("%w: bad magic or version", errCorrupt)
		}
		return h, errShortHeader
	}
	if string(buf[0:4]) != blockMagic || buf[4] != formatVersion {
		return h, fmt.Errorf("%w: bad magic or version", errCorrupt)
	}
	hl, err := headerLen(buf)
	if err != nil {
		return h, err
	}
	if hl > len(buf) {
		return h, errShortHeader
	}
	n := hl - 8
	if binary.LittleEndian.Uint64(buf[n:]) != xxhash.Sum64(buf[:n]) {
		return h, fmt.Errorf("%w: header checksum", errCorrupt)
	}
	ol := uint64(binary.LittleEndian.Uint32(buf[40:]))
	el := uint64(binary.LittleEndian.Uint32(buf[44:]))
	h.flags = buf[5]
	h.rawLen = binary.LittleEndian.Uint64(buf[8:])
	h.payloadLen = binary.LittleEndian.Uint64(buf[16:])
	h.sum = binary.LittleEndian.Uint64(buf[24:])
	h.block = int64(binary.LittleEndian.Uint64(buf[32:]))
	h.object = buf[fixedHeader : fixedHeader+ol]
	h.etag = buf[fixedHeader+ol : fixedHeader+ol+el]
	if h.flags&flagSums != 0 {
		h.sumShift = buf[6]
		sums := fixedHeader + ol + el
		h.sums = buf[sums : sums+8*uint64(numChunks(h.rawLen, h.sumShift))]
		if h.flags&flagS2Chunks != 0 {
			h.clens = buf[sums+uint64(len(h.sums)) : n]
		}
	}
	h.headerLen = hl
	// A compressed payload is stored only when smaller than the raw bytes;
	// compressed whole, it has no chunk checksums.
	compressed := h.flags&(flagS2|flagS2Chunks) != 0
	if h.flags&^(flagS2|flagSums|flagS2Chunks) != 0 || h.flags&flagS2 != 0 && h.flags != flagS2 ||
		h.flags&flagS2Chunks != 0 && h.flags&flagSums == 0 ||
		(!compressed && h.payloadLen != h.rawLen) || h.payloadLen > h.rawLen {
		return h, fmt.Errorf("%w: header fields", errCorrupt)
	}
	if h.clens != nil {
		if err := checkChunkLens(&h); err != nil {
			return h, err
		}
	}
	return h, nil
}

// checkChunkLens checks the stored chunk lengths of a flagS2Chunks header:
// each at most its chunk's raw length, none empty, all adding up to the
// payload length.
func checkChunkLens(h *recHeader) error {
	var sum uint64
	size := uint64(1) << h.sumShift
	for i := 0; i < len(h.clens)/4; i++ {
		c := uint64(binary.LittleEndian.Uint32(h.clens[4*i:]))
		if c == 0 || c > min(size, h.rawLen-uint64(i)*size) {
			return fmt.Errorf("%w: chunk %d length", errCorrupt, i)
		}
		sum += c
	}
	if sum != h.payloadLen {
		return fmt.Errorf("%w: chunk lengths", errCorrupt)
	}
	return nil
}

// chunkSpan returns where chunks [first, last] lie in the payload of a
// flagS2Chunks record: the offset of the first and the length of them all.
func (h *recHeader) chunkSpan(first, last int) (off, n int64) {
	for i := range last + 1 {
		c := int64(binary.LittleEndian.Uint32(h.clens[4*i:]))
		if i < first {
			off += c
		} else {
			n += c
		}
	}
	return off, n
}

// checkStoredChunks checks, before anything is allocated for the raw
// bytes, that every chunk of the payload of a flagS2Chunks record is there
// and, compressed, says it decodes to its chunk's raw length.
func checkStoredChunks(payload []byte, h *recHeader) error {
	size := uint64(1) << h.sumShift
	for c := range len(h.clens) / 4 {
		chunk, _, err := storedChunk(payload, c, int(min(size, h.rawLen-uint64(c)*size)), h)
		if err != nil {
			return err
		}
		payload = payload[len(chunk):]
	}
	return nil
}

// storedChunk returns chunk c of a flagS2Chunks record from stored, which
// starts with it, and whether it is compressed: stored at its raw length
// want it is raw, shorter it must say it decodes to want bytes.
func storedChunk(stored []byte, c, want int, h *recHeader) (chunk []byte, compressed bool, err error) {
	n := int(binary.LittleEndian.Uint32(h.clens[4*c:]))
	if n > len(stored) {
		return nil, false, fmt.Errorf("%w: chunk %d short", errCorrupt, c)
	}
	if n == want {
		return stored[:n], false, nil
	}
	if l, err := s2.DecodedLen(stored[:n]); err != nil || l != want {
		return nil, false, fmt.Errorf("%w: chunk %d compressed length", errCorrupt, c)
	}
	return stored[:n], true, nil
}

// decodeChunks decodes the stored chunks from first on, back to back in
// stored, into raw, which ends at a chunk boundary or at the end of the
// block.
func decodeChunks(raw, stored []byte, first int, h *recHeader) error {
	size := 1 << h.sumShift
	for i := 0; i < len(raw); i += size {
		c := first + i>>h.sumShift
		want := raw[i:min(i+size, len(raw))]
		chunk, compressed, err := storedChunk(stored, c, len(want), h)
		if err != nil {
			return err
		}
		if !compressed {
			copy(want, chunk)
		} else if _, err := s2.Decode(want, chunk); err != nil {
			return fmt.Errorf("%w: chunk %d: decompress: %w", errCorrupt, c, err)
		}
		stored = stored[len(chunk):]
	}
	return nil
}

// headerLen returns the length of the record header that starts with the
// fixed header in buf, checksum included, from its key lengths and, with
// chunk checksums, its raw length and chunk size, each checked against its
// bound first.
func headerLen(buf []byte) (int, error) {
	ol := uint64(binary.LittleEndian.Uint32(buf[40:]))
	el := uint64(binary.LittleEndian.Uint32(buf[44:]))
	if ol+el > maxKeyLen {
		return 0, fmt.Errorf("%w: key length", errCorrupt)
	}
	raw := binary.LittleEndian.Uint64(buf[8:])
	if raw > maxRawLen {
		return 0, fmt.Errorf("%w: raw length", errCorrupt)
	}
	n := fixedHeader + ol + el + 8
	if buf[5]&flagSums != 0 {
		if buf[6] < minSumShift || buf[6] > maxSumShift {
			return 0, fmt.Errorf("%w: chunk size", errCorrupt)
		}
		n += 8 * uint64(numChunks(raw, buf[6]))
		if buf[5]&flagS2Chunks != 0 {
			n += 4 * uint64(numChunks(raw, buf[6]))
		}
	}
	return int(n), nil
}

// decodeBlock checks the whole record buf against k and returns the raw
// bytes. A raw block is returned as a sub-slice of buf (no copy).
func decodeBlock(buf []byte, k Key) ([]byte, error) {
	h, err := parseHeader(buf)
	if errors.Is(err, errShortHeader) {
		return nil, fmt.Errorf("%w: truncated header", errCorrupt)
	}
	if err != nil {
		return nil, err
	}
	if string(h.object) != k.Object || string(h.etag) != k.ETag || h.block != k.Block {
		return nil, fmt.Errorf("%w: key mismatch", errCorrupt)
	}
	return decodePayload(buf, &h)
}

// decodePayload checks the payload of the record buf, whose header is h,
// and returns the raw bytes.
func decodePayload(buf []byte, h *recHeader) ([]byte, error) {
	payload := buf[h.headerLen:]
	// Up to one alignment of padding may follow the payload.
	if uint64(len(payload)) < h.payloadLen || uint64(len(payload))-h.payloadLen >= 1<<maxAlignShift {
		return nil, fmt.Errorf("%w: payload length", errCorrupt)
	}
	payload = payload[:h.payloadLen]
	raw := payload
	if h.clens != nil {
		if err := checkStoredChunks(payload, h); err != nil {
			return nil, err // before allocating what the header claims
		}
		raw = make([]byte, h.rawLen)
		if err := decodeChunks(raw, payload, 0, h); err != nil {
			return nil, err
		}
	} else if h.flags&flagS2 != 0 {
		n, err := s2.DecodedLen(payload)
		if err != nil || uint64(n) != h.rawLen {
			return nil, fmt.Errorf("%w: compressed length", errCorrupt)
		}
		raw, err = s2.Decode(make([]byte, n), payload)
		if err != nil {
			return nil, fmt.Errorf("%w: decompress: %w", errCorrupt, err)
		}
	}
	if uint64(len(raw)) != h.rawLen {
		return nil, fmt.Errorf("%w: checksum", errCorrupt)
	}
	if h.sums != nil {
		if err := checkChunks(raw, 0, h); err != nil {
			return nil, err
		}
	} else if xxhash.Sum64(raw) != h.sum {
		return nil, fmt.Errorf("%w: checksum", errCorrupt)
	}
	return raw, nil
}

// checkChunks checks b, the raw bytes of a record with chunk checksums
// (header h) from chunk first on, each against its checksum. b ends at a
// chunk boundary or at the end of the raw bytes.
func checkChunks(b []byte, first int, h *recHeader) error {
	size := 1 << h.sumShift
	for i := 0; i < len(b); i += size {
		c := first + i>>h.sumShift
		if 8*c+8 > len(h.sums) || binary.LittleEndian.Uint64(h.sums[8*c:]) != xxhash.Sum64(b[i:min(i+size, len(b))]) {
			return fmt.Errorf("%w: chunk %d checksum", errCorrupt, c)
		}
	}
	return nil
}

// recInfo is one record found by scanSegment.
type recInfo struct {
	id  uint64
	off int64
	n   int64 // record length, with its padding (its span)
	// From the header, for StatDir and Records.
	recLen             int64 // header and payload
	rawLen, payloadLen uint64
	flags              byte
	// Set by resolve.
	dead   bool // superseded by a newer record of the id, or listed dead
	listed bool // in the dead list saved by the last Close
}

// typicalHeader is read first for each record header in a scan: a key of
// up to 256 bytes and the chunk checksums and stored chunk lengths of an
// 8 MiB block.
const typicalHeader = fixedHeader + 256 + (8+4)*(8<<20>>sumShift) + 8

// scanEnd says why scanSegment stopped.
type scanEnd int

const (
	scanComplete scanEnd = iota // every byte up to size is a valid record
	scanTorn                    // the last record is incomplete: a write cut short
	scanCorrupt                 // bytes that are not a record (or a bad segment header)
	scanStopped                 // fn returned false
)

// scanSegment reads the segment header and then the record headers of the
// segment r holds in its first size bytes, without reading payloads, and
// calls fn for each valid record in order until fn returns false. A torn or
// invalid record ends the scan: the records before it stay valid. It
// returns where the valid records end and why it stopped; err is an I/O
// error. A record's length (recInfo.n) includes its padding. hdr is the
// bytes before the first record (the header and its padding; 0 when the
// header is not valid).
func scanSegment(r io.ReaderAt, seq uint64, size int64, fn func(recInfo) bool) (hdr, end int64, why scanEnd, err error) {
	var sh [segHeaderLen]byte
	if size < segHeaderLen {
		return 0, 0, scanTorn, nil
	}
	if _, err := r.ReadAt(sh[:], 0); err != nil {
		return 0, 0, scanTorn, ioErr(err)
	}
	align, ok := parseSegmentHeader(sh[:], seq)
	if !ok {
		return 0, 0, scanCorrupt, nil
	}
	hdr = firstRecord(align)
	// Headers are read through a window: one pread per header for large
	// records, several headers per pread for small ones.
	var (
		buf  = make([]byte, 64<<10)
		wOff = int64(-1)
		wLen = 0
	)
	chunk := typicalHeader
	// get returns the n bytes at off (fewer at the end of the segment).
	get := func(off int64, n int) ([]byte, error) {
		if wOff >= 0 && off >= wOff && off+int64(n) <= wOff+int64(wLen) {
			return buf[off-wOff : off-wOff+int64(n)], nil
		}
		want := max(n, chunk)
		if want > len(buf) {
			buf = make([]byte, want)
		}
		want = int(min(int64(want), size-off))
		m, err := r.ReadAt(buf[:want], off)
		if m < want {
			wOff = -1
			return nil, ioErr(err)
		}
		wOff, wLen = off, m
		return buf[:min(n, m)], nil
	}
	off := hdr
	if off > size {
		return hdr, segHeaderLen, scanTorn, nil
	}
	for off < size {
		b, err := get(off, typicalHeader)
		if err != nil {
			return hdr, off, scanTorn, err
		}
		h, perr := parseHeader(b)
		if errors.Is(perr, errShortHeader) && len(b) >= fixedHeader {
			// The key or the chunk checksums run past the first read:
			// read the whole header.
			want, err := headerLen(b)
			if err == nil && want > len(b) {
				if b, err = get(off, want); err != nil {
					return hdr, off, scanTorn, err
				}
				h, perr = parseHeader(b)
			}
		}
		if errors.Is(perr, errShortHeader) {
			return hdr, off, scanTorn, nil
		}
		if perr != nil {
			return hdr, off, scanCorrupt, nil
		}
		n := alignUp(h.recordLen(), align)
		if off+n > size {
			return hdr, off, scanTorn, nil
		}
		ri := recInfo{id: keyHashBytes(h.object, h.etag, h.block), off: off, n: n, recLen: h.recordLen(),
			rawLen: h.rawLen, payloadLen: h.payloadLen, flags: h.flags}
		if !fn(ri) {
			return hdr, off + n, scanStopped, nil
		}
		off += n
		if n < 16<<10 {
			chunk = 64 << 10 // small records: read many headers at once
		} else {
			chunk = typicalHeader // large ones: one header per read
		}
	}
	return hdr, off, scanComplete, nil
}

// ioErr drops io.EOF, which in a scan means a short file, not an error.
func ioErr(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// tempPrefix names the temporary file of a state file being saved.
const tempPrefix = ".tmp-"
