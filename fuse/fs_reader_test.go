package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/dataccel/dataccel/store"
)

// sliceReader reads from a byte slice.
type sliceReader struct{ b []byte }

func (s *sliceReader) ReadAt(_ context.Context, p []byte, off int64) (int, error) {
	n := copy(p, s.b[off:])
	if off+int64(n) >= int64(len(s.b)) {
		return n, io.EOF
	}
	return n, nil
}

func (s *sliceReader) Close() error { return nil }

// TestReaderDroppedAtEnd: a pass that reads the end of a file leaves no
// reader behind (a node per file of the dataset would keep one each); a
// later read still gets exact bytes from a fresh reader.
func TestReaderDroppedAtEnd(t *testing.T) {
	content := []byte("0123456789")
	opens := 0
	fsys := newFS(Config{Opener: OpenerFunc(func(store.Object) Reader {
		opens++
		return &sliceReader{content}
	})})
	t.Cleanup(fsys.stop)
	n := &fileNode{fsys: fsys, obj: store.Object{Key: "f", Size: int64(len(content))}}
	read := func(off, size int) []byte {
		t.Helper()
		res, errno := n.Read(context.Background(), nil, make([]byte, size), int64(off))
		if errno != 0 {
			t.Fatalf("read %d+%d: %v", off, size, errno)
		}
		b, _ := res.Bytes(make([]byte, size))
		return b
	}
	held := func() bool { n.mu.Lock(); defer n.mu.Unlock(); return n.r != nil }
	for _, c := range []struct {
		off, size int
		held      bool
	}{
		{0, 4, true},   // a pass starts
		{4, 6, false},  // and reads the end
		{5, 3, true},   // a read in the middle gets a fresh reader
		{8, 10, false}, // which is dropped at the end too
	} {
		if got := read(c.off, c.size); !bytes.Equal(got, content[c.off:min(c.off+c.size, len(content))]) {
			t.Fatalf("read %d+%d = %q", c.off, c.size, got)
		}
		if held() != c.held {
			t.Fatalf("after read %d+%d: reader held %v, want %v", c.off, c.size, held(), c.held)
		}
	}
	if opens != 2 {
		t.Fatalf("%d readers opened, want 2", opens)
	}
}

// errorReader fails every read with err.
type errorReader struct{ err error }

func (r errorReader) ReadAt(context.Context, []byte, int64) (int, error) { return 0, r.err }
func (r errorReader) Close() error                                       { return nil }

// TestReadFailureLogs: a read that fails is logged as a warning, but not
// one the mount's end stopped (its loader closed first: hundreds of reads
// in flight at a stop each logged one); both fail EIO.
func TestReadFailureLogs(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		warn bool
	}{
		{"a failing store", errors.New("injected: connection reset"), true},
		// As the loader's close wraps it: the fetch's own context ended too.
		{"the mount ending", fmt.Errorf("prefetch-like: loader closed: %w (%w)", fs.ErrClosed, context.Canceled), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			fsys := newFS(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Opener: OpenerFunc(func(store.Object) Reader { return errorReader{tc.err} })})
			t.Cleanup(fsys.stop)
			n := &fileNode{fsys: fsys, obj: store.Object{Key: "f", Size: 10}}
			if _, errno := n.Read(context.Background(), nil, make([]byte, 4), 0); errno != syscall.EIO {
				t.Fatalf("read: errno %v, want EIO", errno)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.warn {
				t.Fatalf("warned %v, want %v; logs:\n%s", warned, tc.warn, logs.String())
			}
		})
	}
}
