package prefetch

import (
	"context"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
)

func TestHandedSet(t *testing.T) {
	a := cache.Key{Object: "a", ETag: "e", Block: 0}
	b := cache.Key{Object: "b", ETag: "e", Block: 0}
	a1 := cache.Key{Object: "a", ETag: "e", Block: 1}
	tests := []struct {
		name  string
		keep  int64
		marks []cache.Key // each 64 KiB
		key   cache.Key
		want  bool
	}{
		{"nothing kept", 0, []cache.Key{a}, a, false},
		{"never handed", 1 << 20, []cache.Key{b}, a, false},
		{"just handed", 1 << 20, []cache.Key{a}, a, true},
		{"another block of the object", 1 << 20, []cache.Key{a}, a1, false},
		{"within keep", 1 << 20, []cache.Key{a, b, b, b}, a, true},
		{"handed longer ago than keep", 128 << 10, []cache.Key{a, b, b, b}, a, false},
		{"handed again", 128 << 10, []cache.Key{a, b, b, b, a}, a, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newHandedSet(tt.keep)
			for _, k := range tt.marks {
				s.mark(k, 64<<10)
			}
			if got := s.has(tt.key); got != tt.want {
				t.Errorf("has(%v) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

// TestAnnouncedPrefetchSkipsHandedBlocks: a file on disk that this loader
// served to a read a short while ago (the kernel keeps what a read returns)
// is neither read back from disk nor pushed again by an announced epoch's
// prefetch; one served longer ago than HandedKeep is, like a file the mount
// never handed over (after `dataccel warm`). Without a RAM tier, as with a
// dataset larger than it, every hit comes from disk.
func TestAnnouncedPrefetchSkipsHandedBlocks(t *testing.T) {
	const n, read, size = 40, 20, 5000
	st := newFakeStore()
	objs := addFiles(st, "h", n, size)
	diskStats := &cache.Stats{}
	opts := cache.DefaultDiskOptions(t.TempDir(), 64<<20)
	opts.Stats = diskStats
	disk, err := cache.NewDisk(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	for _, o := range objs {
		disk.Put(key(o, 0), st.data(o.Key))
	}
	disk.Flush()
	stats := &Stats{}
	// Keep about the last ten files read.
	l := newTestLoader(t, st, cache.NewTiered(nil, disk), Options{CrossFile: true, FileLead: 2 * n, Workers: 4,
		HandedKeep: 10 * size, Stats: stats})
	for _, o := range objs[:read] {
		if _, err := readAll(context.Background(), l, o, 64<<10); err != nil {
			t.Fatal(err)
		}
	}
	hitsBefore := diskStats.DiskHits.Load()
	pc := newFakePageCache()
	l.SetPageCache(pc)
	l.Announce(objs)
	// Files read early, and files never read, are pushed: at least n-read+5.
	for deadline := time.Now().Add(10 * time.Second); stats.Pushed.Load() < n-read+5; {
		if time.Now().After(deadline) {
			t.Fatalf("%d files pushed, want at least %d", stats.Pushed.Load(), n-read+5)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let any wrong push land
	for i, o := range objs {
		held := pc.held(o)
		switch {
		case i < 5 && held == 0:
			t.Errorf("%s: read long ago, and not pushed again", o.Key)
		case i >= read-5 && i < read && held != 0:
			t.Errorf("%s: read just now, and pushed again (%d bytes)", o.Key, held)
		case i >= read && held == 0:
			t.Errorf("%s: never read, and not pushed", o.Key)
		}
	}
	if got, max := diskStats.DiskHits.Load()-hitsBefore, int64(n-read+read/2+1); got > max {
		t.Errorf("announced epoch read %d blocks from disk, want at most %d (no read for a block not pushed)", got, max)
	}
	if g := st.gets.Load(); g != 0 {
		t.Errorf("%d GETs, want 0", g)
	}
}
