package prefetch

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// BenchmarkColdSmallFiles reads 1,000 ~110 KB objects (ImageNet-like) from a
// store with 10 ms to first byte, with 4 readers taking every 4th file of
// the epoch order, on a cold loader each iteration. It reports files/s.
func BenchmarkColdSmallFiles(b *testing.B) {
	const (
		files   = 1000
		readers = 4
		size    = 110 << 10
	)
	st := newFakeStore()
	st.latency = func(string) time.Duration { return 10 * time.Millisecond }
	order := addFiles(st, "imagenet/train/n01440764", files, size)
	for _, tc := range []struct {
		name string
		opts Options
		prep func(*Loader)
	}{
		{"crossfile=off", Options{}, func(*Loader) {}},
		{"announced", Options{CrossFile: true, FileLead: 512},
			func(l *Loader) { l.Announce(order) }},
		{"directory", Options{CrossFile: true, FileLead: 512},
			func(l *Loader) { l.SetSiblings(dirSiblings{objs: order}) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var gets int64
			for b.Loop() {
				opts := tc.opts
				opts.Stats = &Stats{}
				l := NewLoader(st, nil, opts)
				tc.prep(l)
				var wg sync.WaitGroup
				for r := range readers {
					wg.Go(func() { readEvery(b, l, order, r, readers) })
				}
				wg.Wait()
				l.Close()
				gets += opts.Stats.Gets.Load()
			}
			b.ReportMetric(float64(files*b.N)/b.Elapsed().Seconds(), "files/s")
			b.ReportMetric(float64(gets)/float64(files*b.N), "GETs/file")
		})
	}
}

// readEvery reads order[first], order[first+step], ... whole, like one
// data-loader worker.
func readEvery(b *testing.B, l *Loader, order []store.Object, first, step int) {
	p := make([]byte, 128<<10)
	for i := first; i < len(order); i += step {
		r := l.Open(order[i])
		if _, err := r.ReadAt(context.Background(), p, 0); err != nil && !errors.Is(err, io.EOF) {
			b.Error(err)
		}
		r.Close()
	}
}
