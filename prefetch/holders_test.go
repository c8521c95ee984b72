package prefetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/store"
)

// checkingPageCache is a fakePageCache that checks every push against the
// object's bytes as it arrives: a block whose memory was reused for another
// block before its push would put the wrong bytes in the page cache.
type checkingPageCache struct {
	*fakePageCache
	t  testing.TB
	st *fakeStore
}

func (c *checkingPageCache) Store(obj store.Object, off int64, data []byte) error {
	if want := c.st.data(obj.Key)[off : off+int64(len(data))]; !bytes.Equal(data, want) {
		c.t.Errorf("push of %s at %d (%d bytes): wrong bytes", obj.Key, off, len(data))
	}
	return c.fakePageCache.Store(obj, off, data)
}

// heldView is the bytes a read returned, kept as a FUSE reply keeps them
// (go-fuse writes the reply after Read returns, from the slice ReadView
// gave, and then calls its done, if any), with where they came from.
type heldView struct {
	obj store.Object
	off int64
	b   []byte
}

// TestBytesStayWithEveryHolder reads two epochs through a loader whose
// blocks pass through the holders the loader has: flights joined by
// readers, the ready map under a tight budget, pushes into the page cache,
// a RAM tier small enough to evict (and a disk tier it hands its victims
// to), tier hits kept ready for their next pieces (large blocks), and the
// sweep. It checks every byte: as a read returns it, again after later
// reads and after the loader closes (a reply is written after the read
// returns; a view of a pool buffer until its done), and as each push
// arrives. The blocks are received into buffers of the loader's pool (the
// RAM tier copies what it keeps), which the test loader poisons as each is
// given back: a holder that reads a block after its release, or a release
// before the last holder lets go, fails the checks. (Block buffers taken
// from a ring of up to 16 MiB with no reference counts failed them too.)
func TestBytesStayWithEveryHolder(t *testing.T) {
	const (
		files   = 120
		readers = 6
		keep    = 32 // views each reader holds and checks again
	)
	for _, tc := range []struct {
		name     string
		bs       int64 // block size: above keepHitsAbove, tier hits are kept ready
		announce bool  // else directory order (the sweep and directory prefetch)
		disk     bool
		pool     int64 // the loader's RecvPool, in blocks (0: the default)
	}{
		{"announced, RAM tier", 64 << 10, true, false, 0},
		{"announced, RAM and disk tiers", 64 << 10, true, true, 0},
		{"announced, RAM and disk tiers, one-block pool", 64 << 10, true, true, 1},
		{"announced, large blocks, RAM and disk tiers", 256 << 10, true, true, 0},
		{"directory order, RAM and disk tiers", 64 << 10, false, true, 0},
	} {
		bs := tc.bs
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			st.latency = func(string) time.Duration { return 200 * time.Microsecond }
			rng := rand.New(rand.NewPCG(11, uint64(len(tc.name))))
			objs := make([]store.Object, files)
			for i := range objs {
				objs[i] = st.add(fmt.Sprintf("d%d/%05d.jpg", i%4, i), 1+rng.Int64N(3*bs))
			}
			slices.SortFunc(objs, func(a, b store.Object) int { return strings.Compare(a.Key, b.Key) })
			ram, err := cache.NewRAM(8*bs, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ram.Close)
			var tier *cache.Tiered
			if tc.disk {
				disk, err := cache.NewDisk(cache.DefaultDiskOptions(t.TempDir(), 64<<20))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { disk.Close() })
				tier = cache.NewTiered(ram, disk)
			} else {
				tier = cache.NewTiered(ram, nil)
			}
			stats := &Stats{}
			l := newTestLoader(t, st, tier, Options{
				BlockSize: bs, SmallObject: bs, CrossFile: true, FileLead: 16,
				ReadAhead: 4, Workers: 4, MemoryBudget: 12 * (bs + blockOverhead), Stats: stats,
				SweepBytes: 64 << 20, SweepPushBytes: 64 << 20, RecvPool: tc.pool * bs,
			})
			pc := &checkingPageCache{fakePageCache: newFakePageCache(), t: t, st: st}
			l.SetPageCache(pc)
			if !tc.announce {
				l.SetSiblings(dirSiblings{objs: objs})
			}

			check := func(v heldView, when string) bool {
				want := st.data(v.obj.Key)[v.off : v.off+int64(len(v.b))]
				if !bytes.Equal(v.b, want) {
					t.Errorf("%s: %s at %d (%d bytes): wrong bytes", when, v.obj.Key, v.off, len(v.b))
					return false
				}
				return true
			}
			var heldMu sync.Mutex
			var lentViews atomic.Int64 // views of pool buffers, held until done
			var allHeld []heldView     // every reader's views at the end of its epoch
			for epoch := range 2 {
				order := slices.Clone(objs)
				if tc.announce {
					rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
					l.Announce(order)
				}
				var wg sync.WaitGroup
				for r := range readers {
					seed := rng.Uint64()
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(seed, uint64(epoch)))
						var held []heldView
						// readFile reads obj to its end in reads of random
						// sizes, half of them views, checking each as read and
						// one held view again; false once a check failed. A
						// view held until done is checked again after the
						// next read, and then let go.
						readFile := func(obj store.Object) bool {
							rd := l.Open(obj)
							defer rd.Close()
							var lent heldView
							var lentDone func()
							defer func() {
								if lentDone != nil {
									lentDone()
								}
							}()
							for off := int64(0); off < obj.Size; {
								p := make([]byte, 4<<10+rng.IntN(int(2*bs)))
								var got []byte
								var done func()
								var err error
								if rng.IntN(2) == 0 {
									var n int
									n, err = rd.ReadAt(context.Background(), p, off)
									got = p[:n]
								} else {
									got, done, err = rd.(viewReader).ReadView(context.Background(), p, off)
								}
								if lentDone != nil {
									if !check(lent, "held across the next read") {
										return false
									}
									lentDone()
									lentDone = nil
								}
								switch {
								case err != nil && err != io.EOF:
									t.Errorf("read %s at %d: %v", obj.Key, off, err)
									return false
								case len(got) == 0:
									t.Errorf("read %s at %d: no bytes before the end (%d)", obj.Key, off, obj.Size)
									return false
								}
								v := heldView{obj, off, got}
								if done != nil {
									lent, lentDone = v, done
									lentViews.Add(1)
								}
								if !check(v, "as read") {
									return false
								}
								if done != nil {
									off += int64(len(got))
									continue
								}
								if len(held) < keep {
									held = append(held, v)
								} else if j := rng.IntN(keep); !check(held[j], "read earlier") {
									return false
								} else {
									held[j] = v
								}
								off += int64(len(got))
							}
							return true
						}
						for i := r; i < len(order); i += readers {
							if !readFile(order[i]) {
								return
							}
						}
						for _, v := range held {
							if !check(v, "at the end of the epoch") {
								return
							}
						}
						heldMu.Lock()
						allHeld = append(allHeld, held...)
						heldMu.Unlock()
					})
				}
				wg.Wait()
			}
			l.Close() // the pushes in flight end, each checked as it arrived
			for _, v := range allHeld {
				if !check(v, "after the loader closed") {
					break
				}
			}
			t.Logf("pushed %d, ready hits %d, shared fetches %d, cache hits %d, prefetched %d, pool reused %d made %d missed %d",
				stats.Pushed.Load(), stats.ReadyHits.Load(), stats.Shared.Load(), stats.CacheHits.Load(), stats.PrefetchIssued.Load(),
				stats.PoolReused.Load(), stats.PoolMade.Load(), stats.PoolMissed.Load())
			for _, c := range []struct {
				what string
				n    int64
			}{
				{"pushes", pc.pushedBytes()},
				{"reads from the ready map", stats.ReadyHits.Load()},
				{"reads joining a fetch", stats.Shared.Load()},
				{"reads from the cache tier", stats.CacheHits.Load()},
				{"bodies received into a buffer given back before", stats.PoolReused.Load()},
				{"views of pool buffers", lentViews.Load()},
			} {
				if c.n == 0 {
					t.Errorf("no %s: the test no longer covers them", c.what)
				}
			}
		})
	}
}

// viewReader is the zero-copy read the fuse layer uses (reader.ReadView).
type viewReader interface {
	ReadView(ctx context.Context, p []byte, off int64) (data []byte, done func(), err error)
}
