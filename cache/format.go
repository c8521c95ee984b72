package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/s2"
)

// Block file layout (little endian), version 1:
//
//	0  magic "DACB"
//	4  version u8
//	5  flags u8 (flagS2: payload is an s2 block)
//	6  reserved u16
//	8  raw length u64
//	16 payload length u64
//	24 xxhash64 of the raw bytes
//	32 block i64
//	40 object length u32
//	44 etag length u32
//	48 object bytes, etag bytes
//	.. xxhash64 of all header bytes above
//	.. payload
//
// The key is stored in full so that a file named by a hash of the key can be
// checked against the key asked for; the header checksum stops a flipped
// length from driving a huge allocation before the payload checksum runs.
const (
	blockMagic    = "DACB"
	formatVersion = 1
	flagS2        = 1 << 0
	fixedHeader   = 48
	// maxRawLen bounds the raw length trusted from a header.
	maxRawLen = 1 << 30
)

var errCorrupt = errors.New("corrupt cache block")

// keyHash names a key on disk. Lengths are hashed in so that ("a\x00", "b")
// and ("a", "\x00b") differ.
func keyHash(k Key) uint64 {
	var buf [8]byte
	d := xxhash.New()
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

// blockName is "<hash as 16 hex>-<file size in hex>": the size in the name lets
// a restart rebuild the index from a directory listing without a stat per file.
func blockName(id uint64, size int64) string {
	return fmt.Sprintf("%016x-%x", id, size)
}

// parseBlockName is the inverse of blockName.
func parseBlockName(name string) (id uint64, size int64, ok bool) {
	h, s, found := strings.Cut(name, "-")
	if !found || len(h) != 16 || s == "" || len(s) > 15 {
		return 0, 0, false
	}
	id, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, 0, false
	}
	size, err = strconv.ParseInt(s, 16, 64)
	if err != nil || size < fixedHeader+8 {
		return 0, 0, false
	}
	return id, size, true
}

// subdirName is the fan-out directory of id: 256 directories keep each one
// small enough for fast lookups at millions of blocks.
func subdirName(id uint64) string { return fmt.Sprintf("%02x", id>>56) }

// compressor decides whether a block is worth compressing and does it. It
// holds scratch buffers, so each writer goroutine owns one.
type compressor struct {
	sample []byte
}

const (
	// minSaving: store compressed only if the block shrinks by at least 12%;
	// below that, decoding costs more than the bytes saved.
	minSavingPct = 12
	sampleChunk  = 8 << 10
	sampleCount  = 4
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
	for i := 0; i < sampleCount; i++ {
		off := i * step
		end := min(off+sampleChunk, len(b))
		enc := s2.Encode(c.sample[:cap(c.sample)], b[off:end])
		in += end - off
		out += len(enc)
	}
	// Slightly laxer than minSavingPct: samples are noisy.
	return out*100 <= in*(100-minSavingPct+4)
}

// encodeBlock returns the header and payload of the block file for k and b,
// and how many bytes compression saved (0 when stored raw).
func (c *compressor) encodeBlock(k Key, b []byte, compress bool) (hdr, payload []byte, saved int64) {
	payload, flags := b, byte(0)
	if compress && c.worthCompressing(b) {
		enc := s2.Encode(nil, b)
		if len(enc)*100 <= len(b)*(100-minSavingPct) {
			payload, flags = enc, flagS2
			saved = int64(len(b) - len(enc))
		}
	}
	hl := fixedHeader + len(k.Object) + len(k.ETag) + 8
	hdr = make([]byte, hl)
	copy(hdr[0:4], blockMagic)
	hdr[4] = formatVersion
	hdr[5] = flags
	binary.LittleEndian.PutUint64(hdr[8:], uint64(len(b)))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(payload)))
	binary.LittleEndian.PutUint64(hdr[24:], xxhash.Sum64(b))
	binary.LittleEndian.PutUint64(hdr[32:], uint64(k.Block))
	binary.LittleEndian.PutUint32(hdr[40:], uint32(len(k.Object)))
	binary.LittleEndian.PutUint32(hdr[44:], uint32(len(k.ETag)))
	n := fixedHeader + copy(hdr[fixedHeader:], k.Object)
	n += copy(hdr[n:], k.ETag)
	binary.LittleEndian.PutUint64(hdr[n:], xxhash.Sum64(hdr[:n]))
	return hdr, payload, saved
}

// blockHeader is the parsed, checked header of a block file.
type blockHeader struct {
	flags      byte
	rawLen     uint64
	payloadLen uint64
	sum        uint64
	key        Key
	headerLen  int
}

// parseHeader checks magic, version and the header checksum of buf, which
// holds at least the header.
func parseHeader(buf []byte) (blockHeader, error) {
	var h blockHeader
	if len(buf) < fixedHeader+8 || string(buf[0:4]) != blockMagic || buf[4] != formatVersion {
		return h, fmt.Errorf("%w: bad magic or version", errCorrupt)
	}
	ol := uint64(binary.LittleEndian.Uint32(buf[40:]))
	el := uint64(binary.LittleEndian.Uint32(buf[44:]))
	n := fixedHeader + ol + el
	if n+8 > uint64(len(buf)) {
		return h, fmt.Errorf("%w: header length", errCorrupt)
	}
	if binary.LittleEndian.Uint64(buf[n:]) != xxhash.Sum64(buf[:n]) {
		return h, fmt.Errorf("%w: header checksum", errCorrupt)
	}
	h.flags = buf[5]
	h.rawLen = binary.LittleEndian.Uint64(buf[8:])
	h.payloadLen = binary.LittleEndian.Uint64(buf[16:])
	h.sum = binary.LittleEndian.Uint64(buf[24:])
	h.key = Key{
		Object: string(buf[fixedHeader : fixedHeader+ol]),
		ETag:   string(buf[fixedHeader+ol : n]),
		Block:  int64(binary.LittleEndian.Uint64(buf[32:])),
	}
	h.headerLen = int(n + 8)
	if h.rawLen > maxRawLen || h.flags&^flagS2 != 0 {
		return h, fmt.Errorf("%w: header fields", errCorrupt)
	}
	return h, nil
}

// decodeBlock checks the whole file buf against k and returns the raw bytes.
// A raw block is returned as a sub-slice of buf (no copy).
func decodeBlock(buf []byte, k Key) ([]byte, error) {
	h, err := parseHeader(buf)
	if err != nil {
		return nil, err
	}
	if h.key != k {
		return nil, fmt.Errorf("%w: key mismatch", errCorrupt)
	}
	payload := buf[h.headerLen:]
	if uint64(len(payload)) != h.payloadLen {
		return nil, fmt.Errorf("%w: payload length", errCorrupt)
	}
	raw := payload
	if h.flags&flagS2 != 0 {
		n, err := s2.DecodedLen(payload)
		if err != nil || uint64(n) != h.rawLen {
			return nil, fmt.Errorf("%w: compressed length", errCorrupt)
		}
		raw, err = s2.Decode(make([]byte, n), payload)
		if err != nil {
			return nil, fmt.Errorf("%w: decompress: %v", errCorrupt, err)
		}
	}
	if uint64(len(raw)) != h.rawLen || xxhash.Sum64(raw) != h.sum {
		return nil, fmt.Errorf("%w: checksum", errCorrupt)
	}
	return raw, nil
}

// isTempName reports whether name is a temporary file of an unfinished write.
func isTempName(name string) bool { return strings.HasPrefix(name, tempPrefix) }

const tempPrefix = ".tmp-"
