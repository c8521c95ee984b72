package cache

import (
	"bytes"
	"testing"
	"time"
)

// TestTieredVictims: over a RAM tier, the disk tier is written with what
// RAM gives up, not with every block: blocks that fit in RAM cost no disk
// write until Drain saves them; blocks RAM evicts land on disk, so every
// block is in one tier or the other; a block promoted from disk is not
// written again; and a restart finds every drained block.
func TestTieredVictims(t *testing.T) {
	const size = 64 << 10
	dir := t.TempDir()
	stats := &Stats{}
	r, err := NewRAM(4<<20, stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 256 << 20, QueueLen: 1024, MinFreeFraction: -1, Stats: stats})
	tt := NewTiered(r, d)

	fit := make([]Key, 8) // 512 KiB: fits in RAM
	for i := range fit {
		fit[i] = testKey("fit", int64(i))
		tt.Put(fit[i], blockFor(fit[i], size))
	}
	tt.Flush()
	if n := stats.DiskWrites.Load(); n != 0 {
		t.Fatalf("%d blocks written to disk that fit in RAM", n)
	}
	if saved, left := tt.Drain(time.Now().Add(10 * time.Second)); saved != len(fit) || left != 0 {
		t.Fatalf("Drain saved %d, left %d; want %d, 0", saved, left, len(fit))
	}
	for _, k := range fit {
		if !d.Contains(k) {
			t.Fatalf("%v not on disk after Drain", k)
		}
	}
	if saved, _ := tt.Drain(time.Now().Add(10 * time.Second)); saved != 0 {
		t.Fatalf("a second Drain saved %d blocks again", saved)
	}

	// Promote the drained blocks (a disk hit goes to RAM), then overflow
	// RAM: the evicted blocks land on disk.
	for _, k := range fit {
		if _, ok := tt.Get(k); !ok {
			t.Fatalf("%v missed", k)
		}
	}
	written := stats.DiskWrites.Load()
	over := make([]Key, 200) // 12.5 MiB through a 4 MiB RAM tier
	for i := range over {
		over[i] = testKey("over", int64(i))
		tt.Put(over[i], blockFor(over[i], size))
	}
	tt.Flush()
	onDisk := 0
	for _, k := range over {
		inRAM := r.Contains(k)
		if d.Contains(k) {
			onDisk++
		} else if !inRAM {
			t.Fatalf("%v in neither tier", k)
		}
	}
	if onDisk < len(over)-64 {
		t.Fatalf("%d of %d blocks on disk with room for 64 in RAM", onDisk, len(over))
	}
	if got := stats.DiskWrites.Load() - written; got != int64(onDisk) {
		t.Fatalf("%d blocks written for %d evicted blocks on disk", got, onDisk)
	}
	// RAM may keep the promoted blocks (they were read twice): give them
	// up as an eviction would.
	written = stats.DiskWrites.Load()
	for _, k := range fit {
		tt.toDisk(k, blockFor(k, size))
	}
	tt.Flush()
	if n := stats.DiskWrites.Load() - written; n != 0 {
		t.Fatalf("%d blocks written again that RAM gave up and the disk holds", n)
	}
	tt.Drain(time.Now().Add(10 * time.Second))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d2 := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 256 << 20, MinFreeFraction: -1})
	for _, k := range append(fit, over...) {
		b, ok := d2.Get(k)
		if !ok {
			t.Fatalf("%v lost across the restart", k)
		}
		checkExact(t, k, b, size)
	}
}

// TestTieredPeek: Peek answers from RAM, then disk, like Get, says which
// tier answered, and leaves a disk block out of RAM.
func TestTieredPeek(t *testing.T) {
	const size = 64 << 10
	r, err := NewRAM(4<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 256 << 20, MinFreeFraction: -1})
	tt := NewTiered(r, d)
	inRAM, onDisk, absent := testKey("ram", 0), testKey("disk", 0), testKey("none", 0)
	r.Put(inRAM, blockFor(inRAM, size))
	d.Put(onDisk, blockFor(onDisk, size))
	tt.Flush()
	for _, c := range []struct {
		k           Key
		ok, fromRAM bool
	}{{inRAM, true, true}, {onDisk, true, false}, {absent, false, false}} {
		b, fromRAM, ok := tt.Peek(c.k)
		if ok != c.ok || fromRAM != c.fromRAM {
			t.Errorf("Peek(%v): ok %v, in RAM %v; want %v, %v", c.k, ok, fromRAM, c.ok, c.fromRAM)
		}
		if ok && !bytes.Equal(b, blockFor(c.k, size)) {
			t.Errorf("Peek(%v): wrong bytes", c.k)
		}
	}
	tt.Flush()
	if r.Contains(onDisk) {
		t.Error("Peek promoted a disk block to RAM")
	}
}

// TestTieredForget: a forgotten block leaves RAM and never reaches the
// disk tier, neither by eviction nor by Drain; its neighbours still do,
// and a block already on disk stays there.
func TestTieredForget(t *testing.T) {
	const size = 64 << 10
	tt, r, d, stats := newTiered(t, 4<<20)
	onDisk := testKey("disk", 0)
	d.Put(onDisk, blockFor(onDisk, size))
	d.Flush()
	kept, gone := testKey("kept", 0), testKey("gone", 0)
	for _, k := range []Key{kept, gone} {
		tt.Put(k, blockFor(k, size))
	}
	tt.Flush()
	ramBefore := stats.RAMBytes.Load()
	tt.Forget(gone)
	tt.Forget(onDisk)
	tt.Flush()
	if _, ok := r.Get(gone); ok {
		t.Fatal("a forgotten block is still in RAM")
	}
	if got := stats.RAMBytes.Load(); got != ramBefore-size {
		t.Errorf("RAM bytes %d after Forget, want %d", got, ramBefore-size)
	}
	if saved, left := tt.Drain(time.Now().Add(10 * time.Second)); saved != 1 || left != 0 {
		t.Fatalf("Drain saved %d, left %d; want the one block not forgotten", saved, left)
	}
	if d.Contains(gone) || !d.Contains(kept) || !d.Contains(onDisk) {
		t.Errorf("on disk after Drain: forgotten %v, kept %v, on disk before %v; want false, true, true",
			d.Contains(gone), d.Contains(kept), d.Contains(onDisk))
	}
}

// A block put a moment ago is found at once, by Get and by Contains:
// ristretto applies a Set later (it buffers them), and a block not found
// would be fetched again.
func TestTieredPutThenGet(t *testing.T) {
	tt, _, _, _ := newTiered(t, 64<<20)
	for i := range 5000 {
		k := testKey("fresh", int64(i))
		b := blockFor(k, 4<<10)
		tt.Put(k, b)
		if !tt.Contains(k) {
			t.Fatalf("block %d not contained right after its Put", i)
		}
		if got, ok := tt.Get(k); !ok || !bytes.Equal(got, b) {
			t.Fatalf("block %d not served right after its Put (found %v)", i, ok)
		}
	}
}

// newTiered returns a RAM tier of ramBytes over a disk tier of 256 MiB,
// sharing one Stats.
func newTiered(t *testing.T, ramBytes int64) (*Tiered, *RAM, *Disk, *Stats) {
	return tieredOver(t, ramBytes, DiskOptions{MaxBytes: 256 << 20, QueueLen: 1024})
}

// tieredOver is newTiered over a disk tier of opts, in a directory of its
// own, with no free-space floor.
func tieredOver(t *testing.T, ramBytes int64, opts DiskOptions) (*Tiered, *RAM, *Disk, *Stats) {
	t.Helper()
	stats := &Stats{}
	r, err := NewRAM(ramBytes, stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	opts.Dir, opts.MinFreeFraction, opts.Stats = t.TempDir(), -1, stats
	d := openDisk(t, opts)
	return NewTiered(r, d), r, d, stats
}

// TestTieredDrainFullDisk: Drain counts as saved the blocks the disk tier
// wrote, not those it queued and then refused for want of room.
func TestTieredDrainFullDisk(t *testing.T) {
	const size, blocks = 64 << 10, 32
	tt, _, d, _ := tieredOver(t, 4<<20, DiskOptions{MaxBytes: 8 * size, QueueLen: 1024})
	keys := make([]Key, blocks) // 2 MiB: fits in RAM, not on disk
	for i := range keys {
		keys[i] = testKey("k", int64(i))
		tt.Put(keys[i], blockFor(keys[i], size))
	}
	tt.Flush()
	saved, left := tt.Drain(time.Now().Add(10 * time.Second))
	onDisk := 0
	for _, k := range keys {
		if d.Contains(k) {
			onDisk++
		}
	}
	if saved+left != blocks || left == 0 || saved != onDisk {
		t.Fatalf("Drain saved %d, left %d, with %d of %d blocks on a disk with room for 8; want saved = on disk, saved + left = %d",
			saved, left, onDisk, blocks, blocks)
	}
}

// TestTieredDrainHungDisk: a disk whose writes hang (here its statfs)
// holds Drain no longer than its deadline, whether it waits for room in
// the queue (its bytes or, with small blocks, its count) or for the queued
// writes; what was not written counts as left.
func TestTieredDrainHungDisk(t *testing.T) {
	const size, blocks = 64 << 10, 32
	for _, tc := range []struct {
		name  string
		queue DiskOptions
	}{
		{"the queue's bytes", DiskOptions{QueueBytes: 4 * size}},
		{"the queue's count", DiskOptions{QueueLen: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.queue
			opts.MaxBytes = 256 << 20
			tt, _, d, _ := tieredOver(t, 4<<20, opts)
			hung := make(chan struct{})
			t.Cleanup(func() { close(hung) }) // before the disk's Close, which waits for its writers
			d.freeSpace = func(string, float64) (int64, int64, error) {
				<-hung
				return 1 << 40, 0, nil
			}
			for i := range blocks { // 2 MiB: fits in RAM
				k := testKey("k", int64(i))
				tt.Put(k, blockFor(k, size))
			}
			tt.Flush()
			start := time.Now()
			saved, left := tt.Drain(start.Add(200 * time.Millisecond))
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("Drain took %s on a hung disk with a deadline of 200ms", took)
			}
			if saved != 0 || left != blocks {
				t.Fatalf("Drain saved %d, left %d on a hung disk; want 0, %d", saved, left, blocks)
			}
		})
	}
}
