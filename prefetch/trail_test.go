package prefetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// TestTrailing: a trailing reader fetches nothing. It follows another
// reader of the object to the end (every byte exact, no GET of its own);
// it gives up, after its stall time, at the first block no one read.
func TestTrailing(t *testing.T) {
	const block = 64 << 10
	for _, tc := range []struct {
		name    string
		readTo  int64 // the job reads the object's bytes up to here
		wantErr error
	}{
		{name: "read whole", readTo: -1},
		{name: "read in part", readTo: block + 10, wantErr: ErrNotRead},
		{name: "not read", readTo: 0, wantErr: ErrNotRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			tier := indexedTier{newMapTier()}
			l := newTestLoader(t, st, tier, Options{BlockSize: block, ReadAhead: 1})
			obj := st.add("f", 5*block+123)
			want := st.data("f")
			readTo := tc.readTo
			if readTo < 0 {
				readTo = obj.Size
			}
			ctx := context.Background()
			got := make([]byte, obj.Size)
			trailed := make(chan error, 1)
			var n int
			go func() {
				var err error
				n, err = l.OpenTrailing(obj, 300*time.Millisecond).ReadAt(ctx, got, 0)
				trailed <- err
			}()
			// The job reads in pieces, with pauses shorter than the stall.
			job := l.Open(obj)
			for off := int64(0); off < readTo; off += 20 << 10 {
				p := make([]byte, min(20<<10, readTo-off))
				if _, err := job.ReadAt(ctx, p, off); err != nil && !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			gets := st.gets.Load()
			err := <-trailed
			switch {
			case tc.wantErr == nil && (err != nil && !errors.Is(err, io.EOF) || n != len(want) || !bytes.Equal(got, want)):
				t.Fatalf("trailing read: %d bytes, %v; want all %d, exact", n, err, len(want))
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("trailing read: %v, want %v", err, tc.wantErr)
			case tc.wantErr != nil && !bytes.Equal(got[:n], want[:n]):
				t.Fatalf("trailing read: the %d bytes before it gave up differ", n)
			}
			if after := st.gets.Load(); after != gets {
				t.Errorf("%d GETs after the job's reads, want none (the trailing reader fetches nothing)", after-gets)
			}
		})
	}
}
