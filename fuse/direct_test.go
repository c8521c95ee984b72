package fuse

import (
	"context"
	"fmt"
	"io"

	"github.com/dataccel/dataccel/store"
)

// DirectOpener reads straight from the store, one ranged GET per read, with
// no cache and no prefetch: a Reader with no moving parts for the tests of
// this package (the mount uses the prefetch loader).
type DirectOpener struct{ Store store.Store }

// Open implements Opener.
func (d DirectOpener) Open(obj store.Object) Reader { return &directReader{st: d.Store, obj: obj} }

type directReader struct {
	st  store.Store
	obj store.Object
}

func (r *directReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= r.obj.Size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.obj.Size-off)
	rc, err := r.st.ReadRange(ctx, r.obj, off, n)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	got, err := io.ReadFull(rc, p[:n])
	if err != nil {
		return got, fmt.Errorf("read %q at %d: %w", r.obj.Key, off, err)
	}
	if n < int64(len(p)) {
		return got, io.EOF
	}
	return got, nil
}

func (r *directReader) Close() error { return nil }
