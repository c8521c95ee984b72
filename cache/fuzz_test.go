package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// FuzzDecodeRecord feeds records read back from a damaged disk to the
// decoder. The header checksum is set right before parsing, so that the
// fuzzer reaches the fields behind it (lengths, flags, chunk lengths) as a
// flipped bit past the checksum would. Nothing may panic or allocate past
// its bounds; a record that decodes whole must decode the same chunk by
// chunk, as ReadPart reads it, and a chunk that fails alone must fail the
// whole record.
func FuzzDecodeRecord(f *testing.F) {
	k := testKey("f", 2)
	// Small records (the fuzzer minimises every input it finds
	// interesting, at a cost that grows with its length) of a few chunks.
	words := blockFor(k, 14<<10)
	random := blockFor(testKey("f", 3), 14<<10)
	mixed := append(bytes.Clone(words[:8<<10]), random[:5<<10]...)
	c := &compressor{chunkShift: 12} // 4 KiB chunks: many chunks in small records
	for _, seed := range []struct {
		b        []byte
		compress bool
	}{
		{words[:3000], false}, {words[:3000], true}, {random, false}, {words, true}, {mixed, true}, {words[:4096], true},
	} {
		hdr, payload, _ := c.encodeBlock(k, seed.b, seed.compress)
		f.Add(append(hdr, payload...))
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		rec = bytes.Clone(rec) // a fuzz function must not change its input
		if len(rec) >= fixedHeader {
			if hl, err := headerLen(rec); err == nil && hl <= len(rec) && hl >= fixedHeader+8 {
				binary.LittleEndian.PutUint64(rec[hl-8:], xxhash.Sum64(rec[:hl-8]))
			}
		}
		h, err := parseHeader(rec)
		if err != nil {
			if !errors.Is(err, errCorrupt) && !errors.Is(err, errShortHeader) {
				t.Fatalf("parseHeader: %v, want corrupt or short", err)
			}
			return
		}
		// A record compressed whole that claims up to maxRawLen is decoded
		// into that much memory (its s2 stream says the same length): fine
		// once, too slow for a fuzzer.
		if h.flags&flagS2 != 0 && h.rawLen > 1<<20 {
			return
		}
		raw, werr := decodePayload(rec, &h)
		if werr == nil && uint64(len(raw)) != h.rawLen {
			t.Fatalf("decoded %d bytes, header says %d", len(raw), h.rawLen)
		}
		if h.sums == nil || h.rawLen > 1<<20 {
			return // a record of chunks that claims more fails checkStoredChunks
		}
		// Chunk by chunk, as ReadPart reads them.
		payload := rec[h.headerLen:]
		size := int64(1) << h.sumShift
		nc := numChunks(h.rawLen, h.sumShift)
		failed := false
		for i := range nc {
			lo := int64(i) * size
			part := make([]byte, min(size, int64(h.rawLen)-lo))
			stored := payload[min(lo, int64(len(payload))):min(lo+int64(len(part)), int64(len(payload)))]
			if h.clens != nil {
				off, n := h.chunkSpan(i, i)
				if off+n > int64(len(payload)) {
					failed = true
					continue
				}
				stored = payload[off : off+n]
			}
			var err error
			if h.clens != nil {
				err = decodeChunks(part, stored, i, &h)
			} else if len(stored) < len(part) {
				err = errCorrupt
			} else {
				copy(part, stored)
			}
			if err == nil {
				err = checkChunks(part, i, &h)
			}
			if err != nil {
				failed = true
				continue
			}
			if werr == nil && !bytes.Equal(part, raw[lo:lo+int64(len(part))]) {
				t.Fatalf("chunk %d decodes alone to other bytes than in the whole record", i)
			}
		}
		if werr == nil && failed {
			t.Fatal("a chunk failed alone in a record that decodes whole")
		}
	})
}
