package prefetch

import (
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/dataccel/dataccel/cache"
	"golang.org/x/sys/unix"
)

// TestPrefault: filling a fresh 8 MiB buffer faults once per page, unless
// prefault mapped its pages first.
func TestPrefault(t *testing.T) {
	const size, pages = 8 << 20, 8 << 20 / 4096
	for _, tc := range []struct {
		name     string
		prefault bool
		min, max int64 // page faults while filling
	}{
		{"prefaulted", true, 0, 16},
		{"not", false, pages / 2, pages * 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread() // RUSAGE_THREAD counts this thread only
			defer runtime.UnlockOSThread()
			b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Munmap(b) })
			if tc.prefault {
				prefault(b[1:]) // an unaligned start is rounded up to the next page
			}
			var before, after unix.Rusage
			if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
				t.Fatal(err)
			}
			for i := 4096; i < len(b); i += 4096 {
				b[i] = 1
			}
			if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
				t.Fatal(err)
			}
			if got := after.Minflt - before.Minflt; got < tc.min || got > tc.max {
				t.Errorf("%d page faults filling %d pages, want %d-%d", got, pages-1, tc.min, tc.max)
			}
		})
	}
}

// BenchmarkBodyIntoMemory reads a GET body's bytes from a loopback socket
// into 1 MiB blocks, as fetchRun does, and reports MB/s by where the blocks
// go: one reused buffer (what a GET client with its own buffers pays);
// readBlock's fresh, prefaulted buffers with no pool, kept as a RAM tier on
// the heap keeps them (up to 1 GiB, then let go); a reused buffer whose
// bytes are then kept in a memfd (kernel memory, written through the
// kernel's own mapping); a 256 MiB ring touched beforehand, in 2 MiB pages
// where the kernel gives them; and the loader's own path over a RAM tier
// in a memory file: readBlock into a buffer of the pool, the tier's Put,
// the buffer given back. On a VM that faults fresh memory in from its
// host, fresh-kept is several times slower than the others
// (bench/RESULTS.md, session 52): it was the cost of the mount's socket
// reads in a cold epoch, until session 53 put the RAM tier in a memory
// file and the bodies in pooled buffers.
func BenchmarkBodyIntoMemory(b *testing.B) {
	const block = 1 << 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		out := make([]byte, block)
		for {
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	reused := make([]byte, block)
	for range 16 { // the connection's warm-up, outside every measurement
		if _, err := io.ReadFull(conn, reused); err != nil {
			b.Fatal(err)
		}
	}

	// Each case sets up what it reads into, for its own sub-benchmark
	// (released with it), and returns the read of the i-th block.
	for _, tc := range []struct {
		name  string
		setup func(b *testing.B) func(i int) error
	}{
		{"reused", func(*testing.B) func(int) error {
			return func(int) error { _, err := io.ReadFull(conn, reused); return err }
		}},
		{"fresh-kept", func(b *testing.B) func(int) error {
			var kept [][]byte
			b.Cleanup(func() { kept = nil })
			return func(int) error {
				if len(kept) == 1024 {
					clear(kept) // let the kept blocks go (1 GiB)
					kept = kept[:0]
				}
				buf, _, err := (&Loader{}).readBlock(conn, 0, block)
				kept = append(kept, buf)
				return err
			}
		}},
		{"reused-then-memfd-kept", func(b *testing.B) func(int) error {
			fd, err := unix.MemfdCreate("blocks", 0)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { unix.Close(fd) })
			return func(i int) error {
				if _, err := io.ReadFull(conn, reused); err != nil {
					return err
				}
				if i%1024 == 0 {
					_ = unix.Ftruncate(fd, 0) // let the kept blocks go, as fresh-kept does
				}
				_, err := unix.Pwrite(fd, reused, int64(i%1024)*block)
				return err
			}
		}},
		{"pool-then-ram-file", func(b *testing.B) func(int) error {
			stats := &cache.Stats{}
			ram, err := cache.NewRAM(1<<30, stats)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(ram.Close)
			l := &Loader{pool: newBufPool(64<<20, block, &Stats{})}
			return func(i int) error {
				buf, lent, err := l.readBlock(conn, 0, block)
				if err != nil {
					return err
				}
				ram.Put(cache.Key{Object: "o", Block: int64(i % 1024)}, buf)
				if !ram.PutCopies() || !lent {
					b.Fatal("the RAM tier keeps its blocks on the heap, or the pool lent nothing")
				}
				l.pool.put(buf)
				return nil
			}
		}},
		{"ring-touched-before", func(b *testing.B) func(int) error {
			const ringSize = 256 << 20
			ring, err := unix.Mmap(-1, 0, ringSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { unix.Munmap(ring) })
			_ = unix.Madvise(ring, unix.MADV_HUGEPAGE) // best effort: without THP, 4 KiB pages
			for i := 0; i < len(ring); i += 4096 {
				ring[i] = 1
			}
			return func(i int) error {
				off := i * block % ringSize
				_, err := io.ReadFull(conn, ring[off:off+block])
				return err
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			read := tc.setup(b)
			b.SetBytes(block)
			i := 0
			for b.Loop() {
				if err := read(i); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
