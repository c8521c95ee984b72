package cache

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiskReadPart(t *testing.T) {
	const big = 1<<20 + 12345 // 17 chunks, the last one short
	longKey := Key{Object: strings.Repeat("k", 5000), ETag: "e", Block: 1}
	layouts(t, func(t *testing.T, buffered bool) {
		dir := t.TempDir()
		opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, MinFreeFraction: -1, Buffered: buffered}
		d := openDisk(t, opts)
		raw := testKey("raw", 1)       // odd block: random bytes, stored raw
		packed := testKey("packed", 2) // even block: words, stored compressed
		small := testKey("small", 3)   // one chunk
		sizes := map[Key]int{raw: big, packed: big, small: 40 << 10, longKey: 300 << 10}
		for k, n := range sizes {
			d.Put(k, blockFor(k, n))
		}
		d.Flush()

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
			{"compressed", packed, 1000, 4096, false},
			{"one chunk", small, 1000, 4096, false},
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
				if tc.ok && !bytes.Equal(p, blockFor(tc.k, int(n))[tc.off:tc.off+tc.n]) {
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
		for k, n := range sizes {
			b, ok := d2.Get(k)
			if !ok {
				t.Fatalf("%s missed after a restart", k.Object[:min(10, len(k.Object))])
			}
			checkExact(t, k, b, n)
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

// A part read checks the chunks it reads: a flipped bit in one drops the
// record, which then misses; the chunks before it were served intact. A
// flipped chunk checksum fails the header's own checksum when the disk
// tier opens: the record is dropped then.
func TestDiskReadPartCorruption(t *testing.T) {
	const n = 1 << 20
	for _, tc := range []struct {
		name string
		at   func(hdrLen int) int // offset in the record of the flipped byte
	}{
		{"payload chunk 5", func(h int) int { return h + 5<<sumShift + 100 }},
		{"chunk checksum 5, caught at open", func(h int) int { return h - 8 - 16*8 + 5*8 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layouts(t, func(t *testing.T, buffered bool) {
				dir := t.TempDir()
				opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Buffered: buffered}
				d := openDisk(t, opts)
				k := testKey("c", 1)
				d.Put(k, blockFor(k, n))
				d.Flush()
				d.mu.Lock()
				loc := d.index[keyHash(k)]
				path := loc.seg.path
				d.mu.Unlock()
				d.Close()
				hdr, _, _ := new(compressor).encodeBlock(k, blockFor(k, n), false)
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				b := []byte{0}
				at := loc.off + int64(tc.at(len(hdr)))
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
				if strings.HasPrefix(tc.name, "payload") {
					// The header is intact: chunk 0 is served.
					if !d2.ReadPart(k, n, p, 0) || !bytes.Equal(p, blockFor(k, n)[:4096]) {
						t.Fatal("an intact chunk of the record was not served")
					}
				} else if !strings.HasSuffix(tc.name, "caught at open") || d2.Contains(k) {
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
// and does not promote it.
func TestTieredReadPart(t *testing.T) {
	ram, err := NewRAM(64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ram.Close)
	disk := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, MinFreeFraction: -1})
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
	if tt.ReadPart(inRAM, n, p, 300000) {
		t.Fatal("a block in RAM was read in part, not whole from RAM")
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
