package store

import (
	"context"
	"io"
	"sync/atomic"
	"time"
)

// Counts are request counters kept by Counting; read them with Load.
type Counts struct {
	Stats, Lists, Gets, Bytes atomic.Int64
}

// Counting wraps a Store and counts the requests that pass through it and
// the body bytes read. Tests use it to prove how many requests a read cost;
// metrics read the same counters.
type Counting struct {
	Store
	C *Counts
	// GetLatency, if set, is told how long each GET took to answer
	// (headers, or the error), for a latency histogram.
	GetLatency func(time.Duration)
}

// NewCounting wraps s with fresh counters.
func NewCounting(s Store) *Counting { return &Counting{Store: s, C: &Counts{}} }

func (c *Counting) Stat(ctx context.Context, key string) (Object, error) {
	c.C.Stats.Add(1)
	return c.Store.Stat(ctx, key)
}

func (c *Counting) List(ctx context.Context, prefix string, recursive bool, fn func(Object) error) error {
	c.C.Lists.Add(1)
	return c.Store.List(ctx, prefix, recursive, fn)
}

func (c *Counting) ReadRange(ctx context.Context, obj Object, off, n int64) (io.ReadCloser, error) {
	c.C.Gets.Add(1)
	start := time.Now()
	rc, err := c.Store.ReadRange(ctx, obj, off, n)
	if c.GetLatency != nil {
		c.GetLatency(time.Since(start))
	}
	if err != nil {
		return nil, err
	}
	return &countingBody{ReadCloser: rc, n: &c.C.Bytes}, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
