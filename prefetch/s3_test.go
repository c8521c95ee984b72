package prefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
)

// srv is the real S3 server (versitygw) shared by the package's tests.
var srv *testenv.Server

func TestMain(m *testing.M) { os.Exit(testenv.Run(m, &srv)) }

// Against the real server: byte-exact reads of small and multi-block
// objects with read-ahead and announced order, 64 readers of one block
// costing one GET, and an overwritten object surfacing ErrChanged.
func TestS3(t *testing.T) {
	s3st := srv.NewBucket(t)
	// Counting sits above Hedged: it counts the loader's GETs, which
	// singleflight governs (duplicates are counted in Stats.Hedges).
	st := store.NewCounting(NewHedged(s3st, HedgeOptions{}))
	rng := rand.New(rand.NewPCG(3, 4))
	var objs []store.Object
	var want [][]byte
	for i, size := range []int{0, 1, 110 << 10, 256 << 10, 1<<20 + 17} {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		objs = append(objs, testenv.Put(t, s3st, fmt.Sprintf("ds/%03d.bin", i), data))
		want = append(want, data)
	}
	ctx := context.Background()
	stats := &Stats{}
	l := newTestLoader(t, st, newMapTier(), Options{BlockSize: 256 << 10, SmallObject: 128 << 10, CrossFile: true, Stats: stats})
	l.Announce(objs)

	t.Run("byte exact", func(t *testing.T) {
		for i, obj := range objs {
			got, err := readAll(ctx, l, obj, 100<<10)
			if err != nil {
				t.Fatalf("%s: %v", obj.Key, err)
			}
			if !bytes.Equal(got, want[i]) {
				t.Fatalf("%s: %d bytes differ from the %d put", obj.Key, len(got), len(want[i]))
			}
		}
	})

	t.Run("64 readers one GET", func(t *testing.T) {
		data := bytes.Repeat([]byte("dataccel"), 12<<10) // one block: fetched whole
		obj := testenv.Put(t, s3st, "one/block", data)
		before := st.C.Gets.Load()
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				p := make([]byte, 1000)
				if _, err := l.Open(obj).ReadAt(ctx, p, 5000); err != nil || !bytes.Equal(p, data[5000:6000]) {
					t.Errorf("err %v or wrong bytes", err)
				}
			})
		}
		wg.Wait()
		if n := st.C.Gets.Load() - before; n != 1 {
			t.Errorf("64 readers of one block cost %d GETs, want 1", n)
		}
	})

	t.Run("changed object", func(t *testing.T) {
		old := testenv.Put(t, s3st, "chg/obj", []byte("version one"))
		testenv.Put(t, s3st, "chg/obj", []byte("version two, longer"))
		_, err := l.Open(old).ReadAt(ctx, make([]byte, 5), 0)
		if !errors.Is(err, store.ErrChanged) {
			t.Fatalf("err %v, want ErrChanged", err)
		}
	})
	t.Logf("GETs %d, shared %d, prefetch issued %d used %d", stats.Gets.Load(), stats.Shared.Load(), stats.PrefetchIssued.Load(), stats.PrefetchUsed.Load())
}

// BenchmarkS3GetCPU: this process's CPU (user + system) per whole GET of a
// ~110 KB object from the real server, 16 at a time, through the store
// stacks a mount uses: the S3 store alone and behind Hedged. The server's
// CPU is not counted: it runs in its own process.
func BenchmarkS3GetCPU(b *testing.B) {
	s3st := srv.NewBucket(b)
	data := bytes.Repeat([]byte("0123456789abcdef"), 110<<10/16)
	var objs []store.Object
	for i := range 64 {
		objs = append(objs, testenv.Put(b, s3st, fmt.Sprintf("cpu/%02d", i), data))
	}
	for _, tc := range []struct {
		name string
		st   store.Store
	}{
		{"s3", s3st},
		{"hedged", NewHedged(s3st, HedgeOptions{})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var next atomic.Int64
			cpu0 := cpuTime()
			b.SetParallelism(8) // 16 GETs at a time on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, len(data))
				for pb.Next() {
					obj := objs[next.Add(1)%int64(len(objs))]
					rc, err := tc.st.ReadRange(context.Background(), obj, 0, obj.Size)
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := io.ReadFull(rc, buf); err != nil {
						b.Error(err)
					}
					rc.Close()
				}
			})
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/GET")
		})
	}
}

// cpuTime is this process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestHedgedS3: a whole-object GET the server holds back is hedged on a
// real connection to the real server: the duplicate's bytes come back,
// exact, long before the held-back GET would have answered, and the store
// serves the next reads of it and of another object on the connections it
// keeps (the held-back one was given up, not handed out again).
func TestHedgedS3(t *testing.T) {
	direct := srv.NewBucket(t)
	rng := rand.New(rand.NewPCG(5, 6))
	data := map[string][]byte{}
	var objs []store.Object
	for _, k := range []string{"h/slow", "h/other"} {
		b := make([]byte, 200<<10+int(rng.IntN(1000)))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		data[k] = b
		objs = append(objs, testenv.Put(t, direct, k, b))
	}
	fp, st := srv.BehindFaultProxy(t, direct)
	stats := &Stats{}
	h := NewHedged(st, HedgeOptions{InitialDelay: 20 * time.Millisecond, Stats: stats})
	fp.Add(testenv.Rule{Fault: testenv.StallFirstByte, Method: "GET", PathContains: "h/slow", Count: 1, Stall: time.Hour})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	read := func(obj store.Object) {
		t.Helper()
		rc, err := h.ReadRange(ctx, obj, 0, obj.Size)
		if err != nil {
			t.Fatalf("%s: %v", obj.Key, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(b, data[obj.Key]) {
			t.Fatalf("%s: %d of %d bytes, %v", obj.Key, len(b), len(data[obj.Key]), err)
		}
	}
	read(objs[0])
	if fp.Injected(testenv.StallFirstByte) != 1 || stats.Hedges.Load() != 1 || stats.HedgeWins.Load() != 1 {
		t.Fatalf("held back %d GETs, hedged %d, duplicates won %d; want 1 each",
			fp.Injected(testenv.StallFirstByte), stats.Hedges.Load(), stats.HedgeWins.Load())
	}
	for range 20 {
		read(objs[0])
		read(objs[1])
	}
}
