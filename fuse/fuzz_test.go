package fuse

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// checkListing asserts every name in l can be a path element of the mount.
func checkListing(t *testing.T, dir string, l *listing) {
	t.Helper()
	for _, e := range l.entries {
		if reason := invalidNameReason(e.name); reason != "" {
			t.Fatalf("dir %q: entry %q (%s) made it into a listing", dir, e.name, reason)
		}
		full := path.Clean("/mnt/" + dir + e.name)
		if !strings.HasPrefix(full, "/mnt/") {
			t.Fatalf("entry %q of %q escapes the mount: %s", e.name, dir, full)
		}
		if !e.dir && !strings.HasSuffix(e.obj.Key, "/"+e.name) && e.obj.Key != e.name {
			t.Fatalf("file entry %q does not end its key %q", e.name, e.obj.Key)
		}
	}
}

// FuzzKeyToPath: whatever keys a bucket holds, both the per-directory
// listing parser and the manifest loader produce only safe names.
func FuzzKeyToPath(f *testing.F) {
	for _, seed := range [][2]string{
		{"a/b.jpg", "a/c/d.jpg"}, {"a//b", "./x"}, {"../../etc/passwd", "a/../b"}, {"a/\x00", "a/"},
		{strings.Repeat("x", 300), "d/" + strings.Repeat("y", 255)}, {"both", "both/inner"}, {"/lead", "trail/"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		ms := memStore{objs: map[string][]byte{k1: []byte("1"), k2: []byte("22")}}
		ns := newNamespace(t.Context(), ms, time.Hour, slog.New(slog.DiscardHandler))
		ctx := context.Background()
		// walk down every directory the listing shows, as lookups would
		todo := []string{""}
		for i := 0; len(todo) > 0 && i < 64; i++ {
			dir := todo[0]
			todo = todo[1:]
			l, err := ns.fetch(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			checkListing(t, dir, l)
			for _, e := range l.entries {
				if e.dir {
					todo = append(todo, dir+e.name+"/")
				}
			}
		}
		// A manifest is a file: a damaged or crafted one must not put an
		// unsafe name in the mount either.
		ns.restore("", []store.ManifestDir{
			{Dir: "", Subdirs: []string{k1, k2}, Files: []store.Object{{Key: k1, Size: 1}, {Key: k2, Size: 2}}},
			{Dir: k1, Files: []store.Object{{Key: k1 + k2, Size: 3}}},
			{Dir: k2 + "/", Subdirs: []string{k1}, Files: []store.Object{{Key: k2 + "/" + k1, Size: 3}}},
		}, time.Time{})
		ns.mu.Lock()
		defer ns.mu.Unlock()
		for dir, l := range ns.dirs {
			checkListing(t, dir, l)
		}
	})
}

type nopControl struct{}

func (nopControl) Announce([]store.Object) {}
func (nopControl) Stats() []byte           { return nil }

// FuzzAnnounce: any bytes written to .dataccel/prefetch resolve without a
// panic to files of the mount only, never above it or in the control dir.
func FuzzAnnounce(f *testing.F) {
	f.Add([]byte("c/a.jpg\nc/b.jpg\n"))
	f.Add([]byte("../../etc/passwd\n/c/a.jpg\n.dataccel/stats\n\x00\n"))
	f.Add([]byte("c/./a.jpg\r\n  c//b.jpg  \nmissing\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms := memStore{objs: map[string][]byte{"p/c/a.jpg": []byte("a"), "p/c/b.jpg": []byte("b"), "p/.dataccel/stats": []byte("x")}}
		fsys := newFS(Config{Store: ms, Prefix: "p/", Control: nopControl{}, Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(fsys.stop)
		order, err := fsys.resolve(context.Background(), data)
		if err != nil {
			t.Fatalf("resolve: %v", err) // only a failed listing is an error
		}
		for _, o := range order {
			if o.Key != "p/c/a.jpg" && o.Key != "p/c/b.jpg" {
				t.Fatalf("resolved %q", o.Key)
			}
		}
	})
}

// BenchmarkResolve resolves an announced epoch (directories listed
// already), as an fsync of .dataccel/prefetch does: 5,000 files in listing
// order, 20,000 shuffled, as a job's epoch is (each line then looks up an
// entry at random), and ImageNet's 1.28M shuffled (with -benchtime 10x: it
// holds 1.3 GB).
func BenchmarkResolve(b *testing.B) {
	for _, bc := range []struct {
		name    string
		dirs    int
		perDir  int
		shuffle bool
	}{{"in-order-5000", 100, 50, false}, {"shuffled-20000", 100, 200, true}, {"shuffled-imagenet", 1000, 1281, true}} {
		b.Run(bc.name, func(b *testing.B) {
			objs := map[string][]byte{}
			var lines []string
			for d := range bc.dirs {
				for i := range bc.perDir {
					name := fmt.Sprintf("n%08d/n%08d_%d.JPEG", d, d, i)
					objs["p/train/"+name] = nil
					lines = append(lines, "train/"+name+"\n")
				}
			}
			if bc.shuffle {
				rand.New(rand.NewPCG(7, 7)).Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
			}
			list := []byte(strings.Join(lines, ""))
			fsys := newFS(Config{Store: newSortedStore(objs), Prefix: "p/", Control: nopControl{}, Logger: slog.New(slog.DiscardHandler)})
			b.Cleanup(fsys.stop)
			ctx := context.Background()
			if order, err := fsys.resolve(ctx, list); err != nil || len(order) != len(lines) {
				b.Fatalf("resolved %d files, err %v; want %d", len(order), err, len(lines))
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fsys.resolve(ctx, list); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// sortedStore is a memStore that lists a prefix without sorting every key:
// listing each of ImageNet's 1,000 directories that way would take minutes.
type sortedStore struct {
	memStore
	keys []string // sorted
}

func newSortedStore(objs map[string][]byte) sortedStore {
	keys := slices.Sorted(maps.Keys(objs))
	return sortedStore{memStore: memStore{objs: objs}, keys: keys}
}

func (s sortedStore) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	lo, _ := slices.BinarySearch(s.keys, prefix)
	hi := lo
	for hi < len(s.keys) && strings.HasPrefix(s.keys[hi], prefix) {
		hi++
	}
	sub := memStore{objs: make(map[string][]byte, hi-lo)}
	for _, k := range s.keys[lo:hi] {
		sub.objs[k] = s.objs[k]
	}
	return sub.List(ctx, prefix, recursive, fn)
}
