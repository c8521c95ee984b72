package fuse

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/localcopy"
	"github.com/dataccel/dataccel/store"
)

// countingOpener counts the passes over each file (Opener.Open calls).
type countingOpener struct {
	DirectOpener
	mu    sync.Mutex
	opens map[string]int
}

func (o *countingOpener) Open(obj store.Object) Reader {
	o.mu.Lock()
	o.opens[obj.Key]++
	o.mu.Unlock()
	return o.DirectOpener.Open(obj)
}

func (o *countingOpener) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.opens[key]
}

// copySource feeds the local copies from the mount's Opener.
type copySource struct{ o Opener }

func (s copySource) Open(obj store.Object) localcopy.Reader { return s.o.Open(obj) }

// TestPassthrough reads real files of a real server through a mount that
// serves large files from local copies: the kernel reads the copy, so the
// file's one pass through the mount is the copy's (the control files,
// opened first, do not decide it); a mount whose first file opened is
// small never makes a copy; a copy that does not fit the
// budget leaves the file read through the mount. Every read returns the
// object's bytes.
func TestPassthrough(t *testing.T) {
	needPassthrough(t)
	st := srv.NewBucket(t)
	r := rand.New(rand.NewPCG(11, 12))
	big, big2, small := randBytes(r, 9<<20+123), randBytes(r, 5<<20), randBytes(r, 100_000)
	putAll(t, st, map[string][]byte{"d/big.bin": big, "d/big2.bin": big2, "d/small.bin": small})

	for _, tc := range []struct {
		name       string
		first      string // the file opened first
		smallOpens int    // opens of small.bin right after it
		budget     int64
		wantPT     bool // big.bin read through its copy
		wantMade   int64
		wantFails  bool
		announced  string // what an announcement of every file then prefetches
	}{
		{"large files", "big.bin", 0, 1 << 30, true, 2, false, "d/small.bin"},
		{"a small file first", "small.bin", 0, 1 << 30, true, 2, false, "d/small.bin"},
		// Small files dominate the opens: passthrough turns off for good.
		{"small files first", "small.bin", 2 * decideAfter, 1 << 30, false, 0, false, "d/big.bin d/big2.bin d/small.bin"},
		{"a large file first, then small files", "big.bin", 2 * decideAfter, 1 << 30, false, 1, false, "d/big.bin d/big2.bin d/small.bin"},
		{"no room for a copy", "big.bin", 0, 1 << 20, false, 0, true, "d/big.bin d/big2.bin d/small.bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := &countingOpener{DirectOpener: DirectOpener{Store: st}, opens: map[string]int{}}
			stats := &localcopy.Stats{}
			copies, err := localcopy.New(filepath.Join(t.TempDir(), "copies"), copySource{op},
				localcopy.Options{Budget: tc.budget, Stats: stats})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { copies.Close() })
			ctl := &countingControl{}
			m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Opener: op, Control: ctl,
				Copies: copies, PassthroughMinSize: 4 << 20})
			// A job announces its order and reads the stats before its epoch.
			if err := os.WriteFile(filepath.Join(m.Dir, ControlDir, "prefetch"), []byte("d/"+tc.first+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if b, err := os.ReadFile(filepath.Join(m.Dir, ControlDir, "stats")); err != nil || !bytes.Contains(b, []byte("snapshots")) {
					t.Fatalf("stats: %q, %v", b, err)
				}
			}
			read := func(name string, want []byte) {
				t.Helper()
				got, err := os.ReadFile(filepath.Join(m.Dir, "d", name))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: %d bytes, want %d, equal=false", name, len(got), len(want))
				}
			}
			files := map[string][]byte{"big.bin": big, "big2.bin": big2, "small.bin": small}
			read(tc.first, files[tc.first])
			for range tc.smallOpens {
				read("small.bin", small)
			}
			for _, name := range []string{"big.bin", "big2.bin", "small.bin", "big.bin"} {
				read(name, files[name])
			}
			// Two readers at once on a file with a copy.
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() { read("big2.bin", big2) })
			}
			wg.Wait()

			passes := op.count("d/big.bin")
			if tc.wantPT && passes != 1 {
				t.Errorf("big.bin: %d passes through the mount, want 1 (its copy's; the kernel reads the copy)", passes)
			}
			if !tc.wantPT && passes < 1 {
				t.Errorf("big.bin: %d passes through the mount, want at least 1", passes)
			}
			if got := stats.Made.Load(); got != tc.wantMade {
				t.Errorf("copies made: %d, want %d", got, tc.wantMade)
			}
			if fails := stats.Failed.Load() > 0; fails != tc.wantFails {
				t.Errorf("copies failed: %d, want failures: %v", stats.Failed.Load(), tc.wantFails)
			}
			// Files a copy serves are not prefetched: the kernel reads the copy.
			if err := os.WriteFile(filepath.Join(m.Dir, ControlDir, "prefetch"), []byte("d/big.bin\nd/big2.bin\nd/small.bin\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			// The mount resolves an announcement in the background.
			deadline := time.Now().Add(5 * time.Second)
			for ctl.lastOrder() != tc.announced && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := ctl.lastOrder(); got != tc.announced {
				t.Errorf("announced %q, want %q", got, tc.announced)
			}
		})
	}
}

// needPassthrough ends a test on a kernel without FUSE passthrough (6.9).
func needPassthrough(t *testing.T) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	if release := unix.ByteSliceToString(u.Release[:]); !kernelAtLeast(release, 6, 9) {
		testenv.Missing(t, "FUSE passthrough needs Linux 6.9 or later; this is %s", release)
	}
}

// A push into the page cache of a file read from its local copy is
// refused before any copy: the kernel would never read those pages.
func TestStoreRefusesPassthroughFiles(t *testing.T) {
	needPassthrough(t)
	st := srv.NewBucket(t)
	data := bytes.Repeat([]byte{7}, 5<<20)
	testenv.Put(t, st, "big.bin", data)
	copies, err := localcopy.New(filepath.Join(t.TempDir(), "copies"), copySource{DirectOpener{Store: st}},
		localcopy.Options{Budget: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { copies.Close() })
	m := mountCfg(t, Config{Store: st, MetadataTTL: time.Hour, Copies: copies, PassthroughMinSize: 4 << 20})
	got, err := os.ReadFile(filepath.Join(m.Dir, "big.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %d bytes, %v", len(got), err)
	}
	obj := store.Object{Key: "big.bin", ETag: m.FS.lookedUp("big.bin").obj.ETag, Size: int64(len(data))}
	if err := m.FS.Store(obj, 0, data[:1<<20]); !errors.Is(err, ErrPassthrough) {
		t.Errorf("Store of a passthrough file: %v, want ErrPassthrough", err)
	}
}

// TestPassthroughOverwrite: a copy is one version's. A handle open on it
// keeps reading that version after the object is overwritten, and an
// open after the metadata TTL gets a copy of the new version, whole.
func TestPassthroughOverwrite(t *testing.T) {
	needPassthrough(t)
	st := srv.NewBucket(t)
	r := rand.New(rand.NewPCG(13, 14))
	v1, v2 := randBytes(r, 5<<20), randBytes(r, 6<<20+77)
	testenv.Put(t, st, "obj", v1)
	stats := &localcopy.Stats{}
	copies, err := localcopy.New(filepath.Join(t.TempDir(), "copies"), copySource{DirectOpener{Store: st}},
		localcopy.Options{Budget: 1 << 30, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { copies.Close() })
	const ttl = time.Second
	m := mountCfg(t, Config{Store: st, MetadataTTL: ttl, Copies: copies, PassthroughMinSize: 4 << 20})
	f, err := os.Open(filepath.Join(m.Dir, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	testenv.Put(t, st, "obj", v2)
	time.Sleep(ttl + 500*time.Millisecond)
	got, err := os.ReadFile(filepath.Join(m.Dir, "obj"))
	if err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("after the TTL: %d bytes (%v), want the new version's %d", len(got), err, len(v2))
	}
	old := make([]byte, len(v1))
	if n, err := f.ReadAt(old, 0); n != len(v1) || (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(old, v1) {
		t.Fatalf("the handle opened before: %d bytes (%v), want the old version whole", n, err)
	}
	if made := stats.Made.Load(); made != 2 {
		t.Errorf("copies made: %d, want 2 (one per version)", made)
	}
}
