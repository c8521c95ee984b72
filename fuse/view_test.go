package fuse

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// viewingOpener hands out views held until done, as the prefetch loader
// hands out a block of its pool: done poisons the view, so a reply written
// after done would carry garbage to the reader.
type viewingOpener struct {
	DirectOpener
	given, done atomic.Int64
}

func (o *viewingOpener) Open(obj store.Object) Reader {
	return viewingReader{o.DirectOpener.Open(obj), o}
}

type viewingReader struct {
	Reader
	o *viewingOpener
}

func (r viewingReader) ReadView(ctx context.Context, p []byte, off int64) ([]byte, func(), error) {
	v := make([]byte, len(p))
	n, err := r.ReadAt(ctx, v, off)
	v = v[:n]
	r.o.given.Add(1)
	var once sync.Once
	return v, func() {
		once.Do(func() {
			for i := range v {
				v[i] = 0xdb
			}
			r.o.done.Add(1)
		})
	}, err
}

// TestViewHeldUntilReplyWritten: a view handed out with a done reaches the
// reader intact (go-fuse calls done only once the reply is written), and
// every view is let go.
func TestViewHeldUntilReplyWritten(t *testing.T) {
	st := srv.NewBucket(t)
	rng := rand.New(rand.NewPCG(8, 9))
	objs := map[string][]byte{}
	for i := range 24 {
		objs[fmt.Sprintf("v/%02d.bin", i)] = randBytes(rng, 1+rng.IntN(600<<10))
	}
	putAll(t, st, objs)
	op := &viewingOpener{DirectOpener: DirectOpener{Store: st}}
	m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Opener: op})
	var wg sync.WaitGroup
	for name, want := range objs {
		wg.Go(func() {
			got, err := os.ReadFile(filepath.Join(m.Dir, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: read %d bytes (%v), want the object's %d intact", name, len(got), err, len(want))
			}
		})
	}
	wg.Wait()
	if op.given.Load() == 0 {
		t.Fatal("no view handed out")
	}
	// done runs right after the reply's write, which may be after the
	// reader has the bytes.
	for deadline := time.Now().Add(5 * time.Second); op.done.Load() != op.given.Load() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if g, d := op.given.Load(), op.done.Load(); g != d {
		t.Fatalf("%d views handed out, %d let go", g, d)
	}
}
