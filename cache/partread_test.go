package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestDiskReadPart(t *testing.T) {
	const big = 1<<20 + 12345 // 17 chunks, the last one short
	longKey := Key{Object: strings.Repeat("k", 5000), ETag: "e", Block: 1}
	layouts(t, func(t *testing.T, buffered bool) {
		dir := t.TempDir()
		opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, MinFreeFraction: -1, Buffered: buffered}
		d := openDisk(t, opts)
		raw := testKey("raw", 1)       // odd block: random bytes, stored raw
		packed := testKey("packed", 2) // even block: words, each chunk compressed
		small := testKey("small", 3)   // one chunk
		smallPacked := testKey("small packed", 4)
		mixed := testKey("mixed", 6) // words, but chunks 1-3 random: stored raw among compressed ones
		sizes := map[Key]int{raw: big, packed: big, small: 40 << 10, smallPacked: 40 << 10, longKey: 300 << 10, mixed: big}
		blocks := map[Key][]byte{}
		for k, n := range sizes {
			blocks[k] = blockFor(k, n)
		}
		copy(blocks[mixed][1<<sumShift:], blockFor(testKey("mixed", 7), 3<<sumShift))
		for k, b := range blocks {
			d.Put(k, b)
		}
		d.Flush()
		if st, err := StatDir(dir); err != nil || st.Compressed != 3 {
			t.Fatalf("StatDir = %+v, %v: want 3 records compressed (packed, small packed, mixed)", st, err)
		}

		cases := []struct {
			name   string
			k      Key
			off, n int
			ok     bool
		}{
			{"first byte", raw, 0, 1, true},
			{"first chunk", raw, 0, 1 << sumShift, true},
			{"across a chunk boundary", raw, 1<<sumShift - 1, 2, true},
			{"several chunks", raw, 100, 200000, true},
			{"chunk 5", raw, 5 << sumShift, 1 << sumShift, true},
			{"the short last chunk", raw, big - 70000, 70000, true},
			{"last byte", raw, big - 1, 1, true},
			{"whole block", raw, 0, big, true},
			{"past the end", raw, big - 10, 20, false},
			{"compressed: first byte", packed, 0, 1, true},
			{"compressed: across a chunk boundary", packed, 1<<sumShift - 1, 2, true},
			{"compressed: several chunks", packed, 100, 200000, true},
			{"compressed: the short last chunk", packed, big - 70000, 70000, true},
			{"compressed: whole block", packed, 0, big, true},
			{"compressed: past the end", packed, big - 10, 20, false},
			{"raw chunks among compressed ones", mixed, 1<<sumShift - 100, 3 << sumShift, true},
			{"a raw chunk among compressed ones", mixed, 2<<sumShift + 5, 5000, true},
			{"a compressed chunk after raw ones", mixed, 4<<sumShift + 5, 5000, true},
			{"one chunk", small, 1000, 4096, false},
			{"one chunk, compressed whole", smallPacked, 1000, 4096, false},
			{"a header longer than the first read", longKey, 200000, 5000, true},
			{"missing", testKey("missing", 1), 0, 10, false},
		}
		check := func(t *testing.T, d *Disk, stats *Stats) {
			for _, tc := range cases {
				p := make([]byte, tc.n)
				before := stats.DiskPartHits.Load()
				n := int64(sizes[tc.k])
				if n == 0 {
					n = big
				}
				if got := d.ReadPart(tc.k, n, p, int64(tc.off)); got != tc.ok {
					t.Fatalf("%s: ReadPart = %v, want %v", tc.name, got, tc.ok)
				}
				if hits := stats.DiskPartHits.Load() - before; hits != map[bool]int64{true: 1}[tc.ok] {
					t.Fatalf("%s: %d part hits counted", tc.name, hits)
				}
				if tc.ok && !bytes.Equal(p, blocks[tc.k][tc.off:tc.off+tc.n]) {
					t.Fatalf("%s: bytes differ", tc.name)
				}
			}
			// A block of another length (another block size) is not read.
			if d.ReadPart(raw, big+1, make([]byte, 10), 0) {
				t.Fatal("ReadPart served a record of another length")
			}
			if c := stats.DiskCorruptions.Load(); c != 0 {
				t.Fatalf("%d corruptions", c)
			}
		}
		// Twice: the second round finds the headers in memory.
		check(t, d, d.stats)
		check(t, d, d.stats)
		checkAccounting(t, d)
		d.Close()

		// After a restart (the scan reads headers with chunk checksums).
		opts.Stats = new(Stats)
		d2 := openDisk(t, opts)
		check(t, d2, opts.Stats)
		for k, want := range blocks {
			b, ok := d2.Get(k)
			if !ok || !bytes.Equal(b, want) {
				t.Fatalf("%s after a restart: hit %v, bytes equal %v", k.Object[:min(12, len(k.Object))], ok, bytes.Equal(b, want))
			}
		}
	})
}

// checkChunks takes a chunk only with its own checksum, at its own index.
func TestCheckChunks(t *testing.T) {
	k := testKey("c", 1)
	raw := blockFor(k, 1<<20+5000) // 17 chunks, the last one short
	hdr, payload, _ := new(compressor).encodeBlock(k, raw, false)
	h, err := parseHeader(append(hdr, payload...))
	if err != nil || h.sums == nil {
		t.Fatalf("parseHeader: %v, %d checksum bytes", err, len(h.sums))
	}
	c5 := raw[5<<sumShift : 7<<sumShift]
	if err := checkChunks(c5, 5, &h); err != nil {
		t.Fatalf("intact chunks 5-6: %v", err)
	}
	if err := checkChunks(raw[16<<sumShift:], 16, &h); err != nil {
		t.Fatalf("intact short last chunk: %v", err)
	}
	if err := checkChunks(c5, 4, &h); err == nil {
		t.Fatal("chunks 5-6 passed as chunks 4-5")
	}
	flipped := bytes.Clone(c5)
	flipped[70000] ^= 1
	if err := checkChunks(flipped, 5, &h); err == nil {
		t.Fatal("a flipped byte in chunk 6 passed")
	}
	bad := h
	bad.sums = bytes.Clone(h.sums)
	bad.sums[8*6] ^= 1
	if err := checkChunks(c5, 5, &bad); err == nil {
		t.Fatal("a wrong checksum for chunk 6 passed")
	}
	if err := checkChunks(raw[16<<sumShift:], 17, &h); err == nil {
		t.Fatal("a chunk past the last checksum passed")
	}
}

// A block of several chunks compresses each chunk on its own, keeping raw
// the chunks s2 would not shrink; the header's chunk lengths are checked
// before any is trusted.
func TestEncodeChunks(t *testing.T) {
	k := testKey("c", 2)
	const n = 1<<20 + 5000 // 17 chunks, the last one short
	raw := blockFor(k, n)
	copy(raw[1<<sumShift:], blockFor(testKey("c", 3), 3<<sumShift)) // chunks 1-3 random
	hdr, payload, saved := new(compressor).encodeBlock(k, raw, true)
	rec := append(bytes.Clone(hdr), payload...)
	h, err := parseHeader(rec)
	if err != nil {
		t.Fatal(err)
	}
	if h.flags != flagSums|flagS2Chunks || len(h.clens) != 4*17 || saved != int64(n-len(payload)) || saved < n/2 {
		t.Fatalf("flags %b, %d length bytes, saved %d of %d", h.flags, len(h.clens), saved, n)
	}
	for i := range 17 {
		c := int(binary.LittleEndian.Uint32(h.clens[4*i:]))
		if rawChunk := i >= 1 && i <= 3; rawChunk != (c == 1<<sumShift) {
			t.Errorf("chunk %d stored in %d bytes (random: %v)", i, c, rawChunk)
		}
	}
	if off, l := h.chunkSpan(1, 3); l != 3<<sumShift || !bytes.Equal(payload[off:off+l], raw[1<<sumShift:4<<sumShift]) {
		t.Errorf("chunkSpan(1, 3) = %d, %d: not the raw chunks", off, l)
	}
	if got, err := decodeBlock(rec, k); err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("decodeBlock: %v, equal %v", err, bytes.Equal(got, raw))
	}

	// Damage to the header, its checksum made right again: caught by parseHeader.
	lens := len(hdr) - 8 - 4*17 // the chunk lengths' offset
	setLen := func(b []byte, i int, v uint32) { binary.LittleEndian.PutUint32(b[lens+4*i:], v) }
	for _, tc := range []struct {
		name   string
		damage func(h []byte)
	}{
		{"an empty chunk", func(b []byte) { setLen(b, 4, 0) }},
		{"lengths over the payload", func(b []byte) { setLen(b, 0, binary.LittleEndian.Uint32(b[lens:])+1) }},
		{"a chunk longer than raw", func(b []byte) { setLen(b, 16, 5001) }},
		{"chunks compressed without checksums", func(b []byte) { b[5] = flagS2Chunks }},
		{"compressed whole and in chunks", func(b []byte) { b[5] = flagSums | flagS2Chunks | flagS2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(hdr)
			tc.damage(b)
			binary.LittleEndian.PutUint64(b[len(b)-8:], xxhash.Sum64(b[:len(b)-8]))
			if _, err := parseHeader(append(b, payload...)); !errors.Is(err, errCorrupt) {
				t.Fatalf("parseHeader: %v, want corrupt", err)
			}
		})
	}
	// A flipped byte in a compressed chunk fails its decoding or its checksum.
	off, _ := h.chunkSpan(5, 5)
	bad := bytes.Clone(rec)
	bad[len(hdr)+int(off)+10] ^= 0x10
	if _, err := decodeBlock(bad, k); !errors.Is(err, errCorrupt) {
		t.Fatalf("decodeBlock of a flipped chunk: %v, want corrupt", err)
	}
}

// A block of several chunks compressed as one s2 stream, as dataccel
// wrote compressed blocks before it compressed them chunk by chunk, is
// still served whole, and never read in part.
func TestDiskReadsOneStreamRecords(t *testing.T) {
	dir := t.TempDir()
	writeMarker(t, dir, markerContent)
	k := testKey("one stream", 2)
	const n = 300 << 10
	b := blockFor(k, n)
	// Chunks larger than the block: no chunk checksums, one stream.
	hdr, payload, _ := (&compressor{chunkShift: maxSumShift}).encodeBlock(k, b, true)
	rec := append(hdr, payload...)
	if h, err := parseHeader(rec); err != nil || h.flags != flagS2 {
		t.Fatalf("parseHeader: flags %b, %v; want one s2 stream", h.flags, err)
	}
	writeSegment(t, dir, 1, rec)
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Stats: stats})
	if d.ReadPart(k, n, make([]byte, 4096), 70000) {
		t.Fatal("a record of one s2 stream was read in part")
	}
	if got, ok := d.Get(k); !ok || !bytes.Equal(got, b) {
		t.Fatalf("Get: hit %v, bytes equal %v", ok, bytes.Equal(got, b))
	}
	if c := stats.DiskCorruptions.Load(); c != 0 {
		t.Fatalf("%d corruptions", c)
	}
}

// A part read checks the chunks it reads: a flipped bit in one drops the
// record, which then misses; the chunks before it were served intact. A
// flipped chunk checksum fails the header's own checksum when the disk
// tier opens: the record is dropped then.
func TestDiskReadPartCorruption(t *testing.T) {
	const n = 1 << 20
	for _, tc := range []struct {
		name   string
		packed bool                   // the block compresses: its chunks are stored compressed
		at     func(h *recHeader) int // offset in the record of the flipped byte
	}{
		{"payload chunk 5", false, func(h *recHeader) int { return h.headerLen + 5<<sumShift + 100 }},
		{"compressed payload chunk 5", true, func(h *recHeader) int {
			off, _ := h.chunkSpan(5, 5)
			return h.headerLen + int(off) + 100
		}},
		{"chunk checksum 5, caught at open", false, func(h *recHeader) int { return h.headerLen - 8 - 16*8 + 5*8 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layouts(t, func(t *testing.T, buffered bool) {
				dir := t.TempDir()
				opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Buffered: buffered, Compress: tc.packed}
				d := openDisk(t, opts)
				k := testKey("c", 1)
				if tc.packed {
					k = testKey("c", 2)
				}
				d.Put(k, blockFor(k, n))
				d.Flush()
				d.mu.Lock()
				loc := d.index[keyHash(k)]
				path := loc.seg.path
				d.mu.Unlock()
				d.Close()
				hdr, payload, _ := new(compressor).encodeBlock(k, blockFor(k, n), tc.packed)
				h, err := parseHeader(append(hdr, payload...))
				if err != nil || (h.clens != nil) != tc.packed {
					t.Fatalf("parseHeader: %v, chunks compressed %v", err, h.clens != nil)
				}
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				b := []byte{0}
				at := loc.off + int64(tc.at(&h))
				if _, err := f.ReadAt(b, at); err != nil {
					t.Fatal(err)
				}
				b[0] ^= 0x10
				if _, err := f.WriteAt(b, at); err != nil {
					t.Fatal(err)
				}
				f.Close()

				opts.Stats = new(Stats)
				d2 := openDisk(t, opts)
				p := make([]byte, 4096)
				if !strings.HasSuffix(tc.name, "caught at open") {
					// The header is intact: chunk 0 is served.
					if !d2.ReadPart(k, n, p, 0) || !bytes.Equal(p, blockFor(k, n)[:4096]) {
						t.Fatal("an intact chunk of the record was not served")
					}
				} else if d2.Contains(k) {
					t.Fatal("a record with a wrong chunk checksum was kept at open")
				}
				if d2.ReadPart(k, n, p, 5<<sumShift) {
					t.Fatal("ReadPart served a corrupt chunk")
				}
				if c := opts.Stats.DiskCorruptions.Load(); c != 1 {
					t.Fatalf("%d corruptions counted, want 1", c)
				}
				if _, ok := d2.Get(k); ok {
					t.Fatal("the corrupt record is still served")
				}
				checkAccounting(t, d2)
			})
		})
	}
}

// The header cache holds for a record at one place and stays within its bound.
func TestHeadCache(t *testing.T) {
	seg := &segment{path: filepath.Join(t.TempDir(), "s")}
	k := testKey("a", 1)
	h := recHeader{sums: make([]byte, 1024), sumShift: sumShift, rawLen: 1 << 20}
	c := headCache{maxBytes: 10 * headEntry{h: h}.cost()}
	held := func() (n int64) {
		for _, e := range c.m {
			n += e.cost()
		}
		return n
	}
	c.put(1, recLoc{seg: seg, off: 4096, n: 8192}, k, h)
	if _, ok := c.get(1, recLoc{seg: seg, off: 4096, n: 8192}, k); !ok {
		t.Fatal("miss for the record put")
	}
	if _, ok := c.get(1, recLoc{seg: seg, off: 8192, n: 8192}, k); ok {
		t.Fatal("hit for a record moved elsewhere")
	}
	if _, ok := c.get(1, recLoc{seg: seg, off: 4096, n: 8192}, testKey("b", 1)); ok {
		t.Fatal("hit for another key")
	}
	for i := range uint64(300) {
		// Records moved and put again, with headers of several sizes.
		hi := h
		hi.sums = make([]byte, 512*(1+i%5))
		c.put(i%20+2, recLoc{seg: seg, off: int64(i) * 8192, n: 8192}, k, hi)
	}
	if len(c.m) > 10 || c.bytes > c.maxBytes || c.bytes != held() {
		t.Fatalf("%d entries, %d bytes counted, %d held: over the bound of %d bytes, or miscounted",
			len(c.m), c.bytes, held(), c.maxBytes)
	}
	// A record moved, put again with a larger header than the bound: the
	// old entry is counted out once.
	c = headCache{maxBytes: headEntry{h: h}.cost()}
	c.put(1, recLoc{seg: seg, off: 4096, n: 8192}, k, h)
	big := h
	big.sums = make([]byte, 4096)
	c.put(1, recLoc{seg: seg, off: 8192, n: 8192}, k, big)
	if c.bytes != held() {
		t.Fatalf("%d bytes counted, %d held", c.bytes, held())
	}
}

// Tiered reads part of a block from disk only when RAM does not hold it,
// and does not promote it; a block in RAM is read in part from a RAM tier
// in a memory file, and whole (Get, no copy) from one on the heap.
func TestTieredReadPart(t *testing.T) {
	for _, heap := range []bool{false, true} {
		t.Run(fmt.Sprintf("heap=%v", heap), func(t *testing.T) {
			stats := new(Stats)
			ram := newRAMOf(t, heap, 64<<20, stats)
			disk := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, MinFreeFraction: -1, Stats: stats})
			tt := NewTiered(ram, disk)
			const n = 1 << 20
			onDisk, inRAM := testKey("disk", 1), testKey("ram", 1)
			disk.Put(onDisk, blockFor(onDisk, n))
			tt.Put(inRAM, blockFor(inRAM, n))
			tt.Flush()
			p := make([]byte, 1000)
			if !tt.ReadPart(onDisk, n, p, 300000) || !bytes.Equal(p, blockFor(onDisk, n)[300000:301000]) {
				t.Fatal("part of a block on disk not served")
			}
			ram.Flush()
			if ram.Contains(onDisk) {
				t.Fatal("a part read promoted the block to RAM")
			}
			diskParts := stats.DiskPartHits.Load()
			got := tt.ReadPart(inRAM, n, p, 300000)
			switch {
			case heap && got:
				t.Fatal("a block in RAM on the heap was read in part, not whole from RAM")
			case !heap && ram.PutCopies() && (!got || !bytes.Equal(p, blockFor(inRAM, n)[300000:301000])):
				t.Fatalf("part of a block in RAM's file: served %v, or wrong bytes", got)
			case stats.DiskPartHits.Load() != diskParts:
				t.Fatal("a block in RAM was read in part from disk")
			}
			if !heap && (tt.ReadPart(inRAM, n, make([]byte, 10), n-5) || tt.ReadPart(inRAM, 2*n, p, 0)) {
				t.Fatal("a part past the block's end, or of a longer block, was served")
			}
		})
	}
}

// RAM is full once it gives a block up; Tiered is full with RAM alone only.
func TestRAMFull(t *testing.T) {
	r, err := NewRAM(4<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	for i := range 3 {
		r.Put(testKey("a", int64(i)), make([]byte, 1<<20))
		r.Flush()
	}
	if r.Full() || NewTiered(r, nil).Full() {
		t.Fatal("full with 3 MiB of 4")
	}
	for i := range 20 {
		r.Put(testKey("b", int64(i)), make([]byte, 1<<20))
		r.Flush()
	}
	if !r.Full() || !NewTiered(r, nil).Full() {
		t.Fatal("not full after 23 MiB put into 4")
	}
	disk := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, MinFreeFraction: -1})
	if disk.Full() || NewTiered(r, disk).Full() {
		t.Fatal("full with a disk tier with room behind RAM")
	}
	if !NewTiered(nil, nil).Full() {
		t.Fatal("no tier at all is not full")
	}
}

// A disk tier is full once its policy refuses blocks: all it holds is in
// use (here, just written). A cache with RAM in front is full when both are.
func TestDiskFull(t *testing.T) {
	stats := new(Stats)
	disk := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 8 << 20, MinFreeFraction: -1, Stats: stats})
	putMiBs(disk, "old", 7)
	if disk.Full() || stats.DiskRejected.Load() != 0 {
		t.Fatalf("full (%d refused) with 7 MiB of 8", stats.DiskRejected.Load())
	}
	putMiBs(disk, "new", 4)
	if stats.DiskRejected.Load() == 0 || !disk.Full() || !NewTiered(nil, disk).Full() {
		t.Fatalf("%d of 4 blocks refused, Full() = %v, want refusals and full", stats.DiskRejected.Load(), disk.Full())
	}
	r, err := NewRAM(4<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	if NewTiered(r, disk).Full() {
		t.Fatal("full with room in RAM")
	}
	for i := range 20 {
		r.Put(testKey("ram", int64(i)), make([]byte, 1<<20))
		r.Flush()
	}
	if !NewTiered(r, disk).Full() {
		t.Fatal("RAM evicting and disk refusing: not full")
	}
}

// A disk tier that evicts blocks nobody reads any more to take new ones is
// full too: a new block pushes another out.
func TestDiskFullEvicting(t *testing.T) {
	stats := new(Stats)
	disk := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 8 << 20, MinFreeFraction: -1, Stats: stats})
	putMiBs(disk, "old", 7)
	for i := range 200 { // accesses to other blocks: the old ones grow stale
		disk.Touch(testKey("other", int64(i)))
	}
	if disk.Full() {
		t.Fatal("full before a block was offered")
	}
	disk.Put(testKey("new", 0), make([]byte, 1<<20))
	disk.Flush()
	if stats.DiskEvictions.Load() == 0 || stats.DiskRejected.Load() != 0 || !disk.Full() {
		t.Fatalf("%d evicted, %d refused, Full() = %v: want stale blocks evicted for the new one, and full",
			stats.DiskEvictions.Load(), stats.DiskRejected.Load(), disk.Full())
	}
}

// putMiBs writes blocks 0 to n-1 of obj, 1 MiB each, one at a time: none
// dropped from the write queue.
func putMiBs(disk *Disk, obj string, n int) {
	for i := range n {
		disk.Put(testKey(obj, int64(i)), make([]byte, 1<<20))
		disk.Flush()
	}
}
