package prefetch

import (
	"context"
	"sync"
	"sync/atomic"
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
// served to a read less than HandedKeep bytes ago (the kernel keeps what a
// read returns) is neither read back from disk nor pushed again by an
// announced epoch's prefetch; one served longer ago is, like a file the
// mount never handed over (after `dataccel warm`). Without a RAM tier, as
// with a dataset larger than it, every hit comes from disk.
func TestAnnouncedPrefetchSkipsHandedBlocks(t *testing.T) {
	const n, read, size = 40, 20, 5000
	tests := []struct {
		name string
		keep int64
		// want says whether file i (the first read are read before the
		// epoch, in order) is pushed; nil: either.
		want func(i int) *bool
	}{
		{"read lately: left to the kernel", 1 << 30, func(i int) *bool { return ptr(i >= read) }},
		{"read long ago: pushed again", 2 * size, func(i int) *bool {
			if i >= read-2 && i < read {
				return nil // within two files of the end of the reads
			}
			return ptr(true)
		}},
		{"nothing remembered", 0, func(int) *bool { return ptr(true) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			objs := addFiles(st, "h", n, size)
			disk, err := cache.NewDisk(cache.DefaultDiskOptions(t.TempDir(), 64<<20))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { disk.Close() })
			for _, o := range objs {
				disk.Put(cache.Key{Object: o.Key, ETag: o.ETag}, st.data(o.Key))
			}
			disk.Flush()
			stats := &Stats{}
			tier := &peekCounter{Tiered: cache.NewTiered(nil, disk), hits: map[cache.Key]int{}}
			l := newTestLoader(t, st, tier, Options{CrossFile: true, FileLead: 2 * n, Workers: 4,
				HandedKeep: tt.keep, Stats: stats})
			for _, o := range objs[:read] {
				if _, err := readAll(context.Background(), l, o, 64<<10); err != nil {
					t.Fatal(err)
				}
			}
			tier.count.Store(true)
			pc := newFakePageCache()
			l.SetPageCache(pc)
			l.Announce(objs)
			pushes := 0
			for i := range objs {
				if w := tt.want(i); w != nil && *w {
					pushes++
				}
			}
			for deadline := time.Now().Add(10 * time.Second); stats.Pushed.Load() < int64(pushes); {
				if time.Now().After(deadline) {
					t.Fatalf("%d files pushed, want at least %d", stats.Pushed.Load(), pushes)
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // let any wrong push land
			for i, o := range objs {
				w := tt.want(i)
				if w == nil {
					continue
				}
				held, peeked := pc.held(o), tier.peeks(l.key(o, 0))
				switch {
				case *w && held == 0:
					t.Errorf("%s: not pushed", o.Key)
				case !*w && held != 0:
					t.Errorf("%s: read lately, and pushed again (%d bytes)", o.Key, held)
				}
				if !*w && peeked != 0 {
					t.Errorf("%s: read lately, and read back from disk", o.Key)
				}
			}
			if g := st.gets.Load(); g != 0 {
				t.Errorf("%d GETs, want 0 (every file is on disk)", g)
			}
		})
	}
}

func ptr(b bool) *bool { return &b }

// peekCounter counts, once count is set, the blocks the loader reads from
// the tier without taking them (Peek), by key.
type peekCounter struct {
	*cache.Tiered
	count atomic.Bool
	mu    sync.Mutex
	hits  map[cache.Key]int // guarded by mu
}

func (p *peekCounter) Peek(k cache.Key) ([]byte, bool, bool) {
	b, inRAM, ok := p.Tiered.Peek(k)
	if ok && p.count.Load() {
		p.mu.Lock()
		p.hits[k]++
		p.mu.Unlock()
	}
	return b, inRAM, ok
}

func (p *peekCounter) peeks(k cache.Key) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[k]
}
