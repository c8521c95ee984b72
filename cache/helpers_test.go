package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/dataccel/dataccel/internal/testenv"
)

// blockFor returns the deterministic content of k with n bytes: even blocks
// are compressible text, odd blocks random bytes. Tests derive expected bytes
// from the key alone, so a child process and its parent agree.
func blockFor(k Key, n int) []byte {
	r := rand.New(rand.NewPCG(keyHash(k), uint64(n)))
	b := make([]byte, n)
	if k.Block%2 == 0 {
		words := []string{"tensor ", "epoch ", "shard ", "token ", "batch ", "gpu "}
		var buf bytes.Buffer
		for buf.Len() < n {
			buf.WriteString(words[r.IntN(len(words))])
		}
		copy(b, buf.Bytes())
		return b
	}
	var w [8]byte
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
	return b
}

// sizeFor gives each key a deterministic size in [1 KiB, 33 KiB).
func sizeFor(k Key) int { return 1<<10 + int(keyHash(k)%(32<<10)) }

func testKey(obj string, block int64) Key {
	return Key{Object: obj, ETag: "etag-" + obj, Block: block}
}

// warnCounter is a slog handler that counts warnings.
type warnCounter struct{ warns atomic.Int64 }

func (w *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.warns.Add(1)
	}
	return nil
}
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnCounter) WithGroup(string) slog.Handler      { return w }

// openDisk opens a disk tier in dir and closes it at cleanup.
// layouts runs fn for both record layouts the file system allows: aligned
// with direct I/O (where supported) and back to back through the page cache.
func layouts(t *testing.T, fn func(t *testing.T, buffered bool)) {
	t.Run("direct", func(t *testing.T) {
		if recordAlign(t) == 0 {
			testenv.Missing(t, "no direct I/O on the file system of t.TempDir()")
		}
		fn(t, false)
	})
	t.Run("buffered", func(t *testing.T) { fn(t, true) })
}

// recordAlign is the record alignment a disk tier in t.TempDir() uses by
// default (0: none, no direct I/O there).
func recordAlign(t testing.TB) int64 {
	t.Helper()
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 1 << 20})
	defer d.Close()
	return d.align
}

func openDisk(t testing.TB, opts DiskOptions) *Disk {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := NewDisk(opts)
	if err != nil {
		t.Fatalf("NewDisk: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// checkExact fails if a served block differs from the expected content.
func checkExact(t testing.TB, k Key, got []byte, n int) {
	t.Helper()
	if want := blockFor(k, n); !bytes.Equal(got, want) {
		t.Fatalf("%v: served %d bytes that differ from the %d expected", k, len(got), len(want))
	}
}

func keyName(i int) string { return fmt.Sprintf("data/shard-%05d.bin", i) }
