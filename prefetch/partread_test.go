package prefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// A reader at random offsets of a file whose blocks only the disk tier
// holds reads the chunks it wants from disk, not whole blocks, and no GET;
// a reader that streams the file from its start reads whole blocks.
func TestRandomReaderReadsPartsFromDisk(t *testing.T) {
	const bs = 1 << 20
	st := newFakeStore()
	obj := st.add("records.bin", 32*bs+12345)
	src := st.data(obj.Key)
	disk, ram, cstats := newDiskTiers(t, 64<<20, 64<<20)
	stats := &Stats{}
	l := newTestLoader(t, st, cache.NewTiered(ram, disk), Options{BlockSize: bs, ReadAhead: 4, Stats: stats})
	putBlocks(l, disk, obj, src, bs, 33)
	ctx := context.Background()

	// A reader that comes back to offset 0 (a header or meta page: LMDB,
	// HDF5) jumped there: it reads part of block 0, as it did elsewhere.
	r0 := l.Open(obj)
	for _, off := range []int64{20*bs + 100, 0} {
		if n, err := r0.ReadAt(ctx, make([]byte, 4096), off); err != nil || n != 4096 {
			t.Fatalf("ReadAt(4096 at %d) = %d, %v", off, n, err)
		}
	}
	r0.Close()
	if s := cstats.Snapshot(); s.DiskPartHits != 2 || s.DiskHits != 0 {
		t.Fatalf("a jump, then back to offset 0: %d part reads and %d whole blocks from disk, want 2 and 0", s.DiskPartHits, s.DiskHits)
	}

	r := l.Open(obj)
	rng := rand.New(rand.NewPCG(1, 2))
	const reads = 300
	for range reads {
		p := make([]byte, 1+rng.IntN(100<<10))
		off := 1 + rng.Int64N(obj.Size-int64(len(p)))
		if n, err := r.ReadAt(ctx, p, off); err != nil || n != len(p) || !bytes.Equal(p, src[off:off+int64(n)]) {
			t.Fatalf("ReadAt(%d bytes at %d) = %d, %v, or wrong bytes", len(p), off, n, err)
		}
	}
	r.Close()
	s := cstats.Snapshot()
	t.Logf("random reads: %d part reads, %d whole blocks from disk, %d RAM hits", s.DiskPartHits, s.DiskHits, s.RAMHits)
	// Three reads in a row near each other now and then: a few whole blocks.
	if s.DiskPartHits < reads*9/10+2 || s.DiskHits > 3 {
		t.Fatalf("random reads: %d part reads and %d whole blocks from disk, want >= %d part reads",
			s.DiskPartHits, s.DiskHits, reads*9/10)
	}
	if g := stats.Gets.Load(); g != 0 {
		t.Fatalf("%d GETs for blocks on disk", g)
	}

	// A stream from the start takes whole blocks (then served from RAM).
	got, err := readAll(ctx, l, obj, 128<<10)
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("sequential read: %d bytes, %v", len(got), err)
	}
	s2 := cstats.Snapshot()
	if s2.DiskPartHits != s.DiskPartHits || s2.DiskHits-s.DiskHits < 30 {
		t.Fatalf("sequential read: %d part reads and %d whole blocks from disk, want none and >= 30",
			s2.DiskPartHits-s.DiskPartHits, s2.DiskHits-s.DiskHits)
	}
}

// fullTier is a mapTier that says whether it is full.
type fullTier struct {
	*mapTier
	full bool
}

func (t fullTier) Full() bool { return t.full }

// A reader at random offsets fetches whole blocks while the cache has room
// (and keeps none ready: the tier holds them); once the cache is full, a
// block it fetched whole before and lost is fetched in part, the bytes it
// reads.
func TestRandomReaderFetchesParts(t *testing.T) {
	const bs, blocks = 1 << 20, 16
	for _, tc := range []struct {
		name   string
		tier   func() cache.Tier
		budget int64
		parts  bool
	}{
		{"cache with room", func() cache.Tier { return fullTier{newMapTier(), false} }, 0, false},
		{"full cache", func() cache.Tier {
			m := newMapTier()
			m.drop = true
			return fullTier{m, true}
		}, 0, true},
		{"no cache, budget of 4 blocks", func() cache.Tier { return nil }, 4 * (bs + blockOverhead), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			obj := st.add("records.bin", blocks*bs)
			src := st.data(obj.Key)
			stats := &Stats{}
			l := newTestLoader(t, st, tc.tier(), Options{BlockSize: bs, MemoryBudget: tc.budget, Stats: stats})
			ctx := context.Background()
			r := l.Open(obj)
			defer r.Close()
			rng := rand.New(rand.NewPCG(3, 4))
			var read int64
			for range 400 {
				p := make([]byte, 1+rng.IntN(64<<10))
				off := 1 + rng.Int64N(obj.Size-int64(len(p)))
				if n, err := r.ReadAt(ctx, p, off); err != nil || n != len(p) || !bytes.Equal(p, src[off:off+int64(n)]) {
					t.Fatalf("ReadAt(%d bytes at %d) = %d, %v, or wrong bytes", len(p), off, n, err)
				}
				read += int64(len(p))
			}
			parts, got := stats.PartGets.Load(), stats.GetBytes.Load()
			t.Logf("%d GETs, %d of them parts, %d bytes fetched for %d read", stats.Gets.Load(), parts, got, read)
			if !tc.parts {
				if parts != 0 || got > blocks*bs {
					t.Fatalf("%d part GETs and %d bytes fetched, want no part and each block once", parts, got)
				}
				// Only blocks of reads next to the one before stay ready.
				if m := stats.MemInUse.Load(); m > blocks/2*bs {
					t.Fatalf("%d bytes held ready after random reads, want the tier to hold them", m)
				}
				return
			}
			// Each block once whole, then parts (a few reads in a row next
			// to each other take whole blocks too).
			if parts < 200 || got > (blocks+4)*bs+read {
				t.Fatalf("%d part GETs and %d bytes fetched for %d read, want parts after each block's first fetch", parts, got, read)
			}
			// A part fetch is pinned to the ETag like a block's.
			st.add(obj.Key, obj.Size)
			var err error
			for i := 0; i < 50 && err == nil; i++ {
				_, err = r.ReadAt(ctx, make([]byte, 100), 1+rng.Int64N(obj.Size-100))
			}
			if !errors.Is(err, store.ErrChanged) {
				t.Fatalf("read of a changed object: %v, want store.ErrChanged", err)
			}
		})
	}
}

// A disk cache full of another dataset's blocks, all read lately, refuses
// new ones: a reader at random offsets of a new file then fetches parts,
// not a whole block per read. Those fetches count as accesses for the disk
// policy, so the old blocks, no longer read, grow stale and make room once
// a block is offered again.
func TestRandomReaderFetchesPartsPastAFullDisk(t *testing.T) {
	const bs, blocks = 1 << 20, 24
	st := newFakeStore()
	old := st.add("old.bin", 16*bs)
	obj := st.add("records.bin", blocks*bs)
	src := st.data(obj.Key)
	disk, ram, cstats := newDiskTiers(t, 17*bs, 4*bs)
	stats := &Stats{}
	l := newTestLoader(t, st, cache.NewTiered(ram, disk), Options{BlockSize: bs, Stats: stats})
	putBlocks(l, disk, old, st.data(old.Key), bs, 16)
	held := cstats.Snapshot().DiskEntries
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	readRandom := func(reads int) (read int64) {
		r := l.Open(obj)
		defer r.Close()
		for range reads {
			p := make([]byte, 1+rng.IntN(64<<10))
			off := 1 + rng.Int64N(obj.Size-int64(len(p)))
			if n, err := r.ReadAt(ctx, p, off); err != nil || n != len(p) || !bytes.Equal(p, src[off:off+int64(n)]) {
				t.Fatalf("ReadAt(%d bytes at %d) = %d, %v, or wrong bytes", len(p), off, n, err)
			}
			read += int64(len(p))
		}
		return read
	}

	read := readRandom(400)
	parts, got := stats.PartGets.Load(), stats.GetBytes.Load()
	t.Logf("%d old blocks on disk; %d GETs, %d of them parts, %d bytes fetched for %d read; %d refused by the disk",
		held, stats.Gets.Load(), parts, got, read, cstats.DiskRejected.Load())
	// Each block whole once or twice (its chance, and a few reads in a row
	// near each other), then parts; a whole block per read would be 400.
	// (How many reads the tiers serve, and so how many parts and whole
	// blocks, moves with when the disk writer refuses.)
	if parts == 0 || got > 2*blocks*bs+read {
		t.Fatalf("%d part GETs and %d bytes fetched for %d read, want parts once the disk refuses blocks", parts, got, read)
	}

	// Once nothing has been refused for a while, blocks fetched whole are
	// offered again, and take the place of the stale old ones.
	time.Sleep(2100 * time.Millisecond)
	readRandom(100)
	disk.Flush()
	kept := 0
	for b := range int64(blocks) {
		if disk.Contains(l.key(obj, b)) {
			kept++
		}
	}
	if ev := cstats.DiskEvictions.Load(); ev == 0 || kept == 0 {
		t.Fatalf("%d old blocks evicted and %d new ones on disk, want the new file's blocks in place of the old", ev, kept)
	}
}

// With the cache full, a reader that opens a file, reads its header at
// offset 0 and jumps away (HDF5, LMDB) takes no read-ahead from offset 0: a
// first read at 0 is a stream only once the next read follows it.
func TestFirstReadAtZeroWithFullCache(t *testing.T) {
	const bs, blocks = 1 << 20, 16
	far := int64(5*bs + 12345)
	for _, tc := range []struct {
		name string
		full bool
		offs []int64
		want []access
	}{
		{"room, header then a jump", false, []int64{0, far}, []access{streams, jumped}},
		{"full, header then a jump", true, []int64{0, far}, []access{begins, jumped}},
		{"room, sequential", false, []int64{0, 128 << 10, 256 << 10}, []access{streams, streams, streams}},
		{"full, sequential", true, []int64{0, 128 << 10, 256 << 10}, []access{begins, streams, streams}},
		{"full, back at 0 after a jump", true, []int64{far, 0, 128 << 10}, []access{jumped, jumped, nearby}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			obj := st.add("records.bin", blocks*bs)
			l := newTestLoader(t, st, fullTier{newMapTier(), tc.full}, Options{BlockSize: bs})
			r := l.Open(obj).(*reader)
			for i, off := range tc.offs {
				end := off + 4096
				if got := r.readAhead(off, end, l.blockOf(obj, end-1)); got != tc.want[i] {
					t.Fatalf("read %d at %d: access %d, want %d", i, off, got, tc.want[i])
				}
			}
		})
	}

	// Headers of fresh files, the cache full: block 0 of each, whole (its
	// chance to stay), and nothing ahead of it.
	st := newFakeStore()
	m := newMapTier()
	m.drop = true
	stats := &Stats{}
	l := newTestLoader(t, st, fullTier{m, true}, Options{BlockSize: bs, Stats: stats})
	ctx := context.Background()
	const files = 10
	for i := range files {
		obj := st.add(fmt.Sprintf("f%d.h5", i), blocks*bs)
		r := l.Open(obj)
		if n, err := r.ReadAt(ctx, make([]byte, 4096), 0); err != nil || n != 4096 {
			t.Fatalf("header of %s: %d, %v", obj.Key, n, err)
		}
		r.Close()
	}
	for i := 0; i < 100 && stats.Inflight.Load() > 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if g := stats.Gets.Load(); g != files {
		t.Fatalf("%d GETs for the headers of %d files, want one each", g, files)
	}

	// Files read through from offset 0, pass after pass, the cache full:
	// the first read of a pass fetches its block whole, as the stream that
	// follows wants it, never a part and then the block.
	one := st.add("one.jpg", 900<<10)
	four := st.add("four.bin", 4*bs)
	const passes = 3
	gets, parts := stats.Gets.Load(), stats.PartGets.Load()
	for range passes {
		for _, obj := range []store.Object{one, four} {
			all, err := readAll(ctx, l, obj, 128<<10)
			if err != nil || !bytes.Equal(all, st.data(obj.Key)) {
				t.Fatalf("sequential read of %s: %d bytes, %v", obj.Key, len(all), err)
			}
		}
	}
	gets, parts = stats.Gets.Load()-gets, stats.PartGets.Load()-parts
	if parts != 0 || gets != passes*(1+4) {
		t.Fatalf("%d passes over a file of one block and one of four: %d GETs, %d of them parts, want %d whole blocks",
			passes, gets, parts, passes*5)
	}
}

// A reader streaming a file that only the disk tier holds reads each block
// from disk once: read-ahead leaves disk blocks in place for the reader
// (read ahead into a small RAM tier, they would be pushed out again before
// the reader came), and with no budget to hold a block, the reader reads
// its pieces in part rather than the whole block for each piece; nor does
// a reader whose block was given up before it read the rest of it.
func TestStreamFromDiskReadsEachBlockOnce(t *testing.T) {
	const bs, blocks = 1 << 20, 16
	for _, tc := range []struct {
		name  string
		busy  bool // other readers hold the whole budget
		evict bool // the blocks held ready are given up after each read
	}{
		{"budget with room", false, false},
		{"budget held by others", true, false},
		{"ready blocks given up after each read", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			obj := st.add("shard.tar", blocks*bs)
			src := st.data(obj.Key)
			disk, ram, cstats := newDiskTiers(t, 64<<20, 2*bs) // RAM: room for two blocks
			stats := &Stats{}
			l := newTestLoader(t, st, cache.NewTiered(ram, disk), Options{BlockSize: bs, ReadAhead: 4, MemoryBudget: 8 * (bs + blockOverhead), Stats: stats})
			putBlocks(l, disk, obj, src, bs, blocks)
			if tc.busy && !l.mem.tryAcquire(l.mem.limit) {
				t.Fatal("budget not free at the start")
			}
			r := l.Open(obj)
			got := make([]byte, obj.Size)
			for off := int64(0); off < obj.Size; off += 128 << 10 {
				if n, err := r.ReadAt(context.Background(), got[off:off+128<<10], off); err != nil || n != 128<<10 {
					t.Fatalf("ReadAt(128 KiB at %d) = %d, %v", off, n, err)
				}
				for tc.evict && l.evictWhere(1<<20, func(*flight) bool { return true }) {
				}
			}
			r.Close()
			if !bytes.Equal(got, src) {
				t.Fatal("sequential read: wrong bytes")
			}
			s := cstats.Snapshot()
			t.Logf("%d whole blocks and %d parts from disk, %d bytes read; %d GETs", s.DiskHits, s.DiskPartHits, s.DiskReadBytes, stats.Gets.Load())
			// Given up after each read, a block was read whole about once
			// (a read-ahead given up as it lands is read whole again now
			// and then, 1 run in 20 under load), and its rest in parts:
			// whole for each piece, it was 8 times a block.
			limit, wholeLimit := int64(blocks+1)*bs, int64(blocks)
			if tc.evict {
				limit, wholeLimit = 2*blocks*bs, 2*blocks
			}
			if s.DiskHits > wholeLimit || s.DiskReadBytes > limit || stats.Gets.Load() != 0 {
				t.Fatalf("%d whole blocks, %d bytes read from disk and %d GETs for a file of %d bytes (%d blocks) on disk, want at most %d whole, at most %d bytes, no GET",
					s.DiskHits, s.DiskReadBytes, stats.Gets.Load(), obj.Size, blocks, wholeLimit, limit)
			}
		})
	}
}

// newDiskTiers returns a disk tier of diskBytes (no free-space floor) and a
// RAM tier of ramBytes sharing one Stats, closed at the end of the test.
func newDiskTiers(t *testing.T, diskBytes, ramBytes int64) (*cache.Disk, *cache.RAM, *cache.Stats) {
	t.Helper()
	cstats := new(cache.Stats)
	dopts := cache.DefaultDiskOptions(t.TempDir(), diskBytes)
	dopts.MinFreeFraction, dopts.Stats = -1, cstats
	disk, err := cache.NewDisk(dopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	ram, err := cache.NewRAM(ramBytes, cstats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ram.Close)
	return disk, ram, cstats
}

// putBlocks writes blocks [0, n) of obj (bs bytes each, from src) to disk,
// one at a time, under l's keys: none dropped from the write queue.
func putBlocks(l *Loader, disk *cache.Disk, obj store.Object, src []byte, bs, n int64) {
	for b := range n {
		disk.Put(l.key(obj, b), src[b*bs:min((b+1)*bs, int64(len(src)))])
		disk.Flush()
	}
}

// TestManyRandomReadersTightBudget: more readers at random offsets than the
// memory budget holds blocks, no cache, a slow store. Each block's one
// chance to be fetched whole would have every reader wait for room for a
// whole block to read a piece of it, in line behind all the others; while
// readers wait for room, a random read fetches its part instead.
func TestManyRandomReadersTightBudget(t *testing.T) {
	const bs, blocks, readers, reads, piece = 256 << 10, 64, 16, 12, 16 << 10
	st := newFakeStore()
	st.latency = func(string) time.Duration { return 5 * time.Millisecond }
	stats := &Stats{}
	l := newTestLoader(t, st, nil, Options{BlockSize: bs, MemoryBudget: 2 * (bs + blockOverhead), Stats: stats})
	var wg sync.WaitGroup
	for i := range readers {
		obj := st.add(fmt.Sprintf("r/%d", i), blocks*bs)
		wg.Go(func() {
			r := l.Open(obj)
			defer r.Close()
			src := st.data(obj.Key)
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			p := make([]byte, piece)
			for range reads {
				off := 1 + rng.Int64N(obj.Size-piece)
				if n, err := r.ReadAt(t.Context(), p, off); err != nil || !bytes.Equal(p[:n], src[off:off+int64(n)]) {
					t.Errorf("%s: ReadAt(%d) = %d, %v, or wrong bytes", obj.Key, off, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	read := int64(readers * reads * piece)
	got := stats.GetBytes.Load()
	t.Logf("%d GETs, %d of them parts, %.2fx the bytes read fetched", stats.Gets.Load(), stats.PartGets.Load(), float64(got)/float64(read))
	if got > 2*read {
		t.Fatalf("fetched %d bytes for %d read (%.1fx): whole blocks while readers waited for room", got, read, float64(got)/float64(read))
	}
}

// TestStreamFromRAMNotLost: a stream that reads a block from a RAM tier in
// a memory file piece by piece (no block held for it) has not lost it: its
// next block, in no tier, is fetched whole once memory has room, not by a
// part GET per read (a helper's review found the regression).
func TestStreamFromRAMNotLost(t *testing.T) {
	const bs = 256 << 10
	st := newFakeStore()
	obj := st.add("f.bin", 4*bs)
	src := st.data(obj.Key)
	ram, err := cache.NewRAM(64<<20, new(cache.Stats))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ram.Close)
	if !ram.PutCopies() {
		t.Skip("the RAM tier keeps its blocks on the heap here")
	}
	stats := &Stats{}
	l := newTestLoader(t, st, cache.NewTiered(ram, nil), Options{BlockSize: bs, MemoryBudget: 2 * bs, Stats: stats})
	for b := range int64(2) {
		ram.Put(l.key(obj, b), src[b*bs:(b+1)*bs])
	}
	ram.Flush()
	hold := int64(bs + 1) // no room for a block for a while
	if !l.mem.tryAcquire(hold) {
		t.Fatal("no budget")
	}
	go func() { time.Sleep(300 * time.Millisecond); l.mem.release(hold) }()
	got, err := readAll(context.Background(), l, obj, 64<<10)
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("read %d bytes (%v), want the object's %d", len(got), err, len(src))
	}
	if p := stats.PartGets.Load(); p != 0 {
		t.Fatalf("%d part GETs: the stream took a block read from RAM for lost", p)
	}
}
