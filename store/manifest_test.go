package store_test

import (
	"bytes"
	"compress/gzip"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// testManifest returns a manifest with the cases a format can get wrong:
// the bucket root "", an empty directory, zero fields, and a directory with
// more files and subdirectories than one chunk (4,096) holds.
// saveManifest saves m with its own directories.
func saveManifest(path string, m *store.Manifest) error {
	_, _, err := store.SaveManifest(path, m, slices.Values(m.Dirs))
	return err
}

func testManifest(files int) *store.Manifest {
	t0 := time.Date(2024, 3, 1, 12, 0, 0, 5, time.UTC)
	m := &store.Manifest{Endpoint: "http://127.0.0.1:9000", Bucket: "b", Prefix: "p/", Created: t0, Dirs: []store.ManifestDir{
		{Dir: "", Subdirs: []string{"big", "empty"}, Files: []store.Object{
			{Key: "a.txt", Size: 3, ETag: "0123456789abcdef0123456789abcdef", ModTime: t0},
			{Key: "zero"}, // no size, ETag or time: gob sends no zero field
		}},
		{Dir: "big/"},
		{Dir: "empty/"},
	}}
	big := &m.Dirs[1]
	for i := range files {
		big.Files = append(big.Files, store.Object{Key: fmt.Sprintf("big/%06d.jpg", i), Size: int64(i),
			ETag: fmt.Sprintf("%032x", i), ModTime: t0.Add(time.Duration(i) * time.Second)})
	}
	for i := range files / 2 {
		big.Subdirs = append(big.Subdirs, fmt.Sprintf("s%d", i))
	}
	return m
}

func TestManifestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		m    *store.Manifest
	}{
		{"empty", &store.Manifest{Endpoint: "e", Bucket: "b", Created: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"small", testManifest(3)},
		{"chunks", testManifest(3*4096 + 17)},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "manifest.gob.gz")
			if err := saveManifest(path, c.m); err != nil {
				t.Fatal(err)
			}
			got, err := store.LoadManifest(path, c.m.Endpoint, c.m.Bucket, c.m.Prefix)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.m) {
				t.Errorf("loaded %d directories, %d files, not what was saved (%d, %d)", len(got.Dirs), got.Files(), len(c.m.Dirs), c.m.Files())
			}
			// A save replaces the file, and leaves no temporary file.
			if err := saveManifest(path, testManifest(1)); err != nil {
				t.Fatal(err)
			}
			if got, err := store.LoadManifest(path, "http://127.0.0.1:9000", "b", "p/"); err != nil || got.Files() != 3 {
				t.Fatalf("after a second save: %v", err)
			}
			if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
				t.Errorf("%d files in the directory, want the manifest alone", len(ents))
			}
		})
	}
}

// gzipped compresses b whole: a valid gzip stream of what may be a cut or
// damaged manifest.
func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestManifestTruncated: a manifest cut short anywhere, in the file or in
// its records (in a gzip stream of its own, so only the records can tell),
// fails to load: the mount would serve a short one as complete, without
// listing, and hide files.
func TestManifestTruncated(t *testing.T) {
	for _, c := range []struct {
		name string
		m    *store.Manifest
		step int // cut at every step-th byte
	}{
		{"small", testManifest(3), 1},
		{"chunks", testManifest(4096 + 5), 4999},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "manifest.gob.gz")
			if err := saveManifest(path, c.m); err != nil {
				t.Fatal(err)
			}
			file, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(bytes.NewReader(file))
			if err != nil {
				t.Fatal(err)
			}
			plain, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			load := func(what string, b []byte) {
				t.Helper()
				p := filepath.Join(dir, "cut.gob.gz")
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
				if m, err := store.LoadManifest(p, c.m.Endpoint, c.m.Bucket, c.m.Prefix); err == nil {
					t.Fatalf("%s: loaded %d of %d files", what, m.Files(), c.m.Files())
				}
			}
			// Every byte of the start and end of the file: the gzip
			// header and trailer (checksum and length).
			cuts := steps(len(file), 7*c.step)
			for n := range 32 {
				cuts = append(cuts, n, len(file)-1-n)
			}
			for _, n := range cuts {
				load(fmt.Sprintf("file cut at %d of %d", n, len(file)), file[:n])
			}
			for _, n := range steps(len(plain), c.step) {
				load(fmt.Sprintf("records cut at %d of %d", n, len(plain)), gzipped(t, plain[:n]))
			}
			load("records with more after the end", gzipped(t, append(plain[:len(plain):len(plain)], plain[18:]...)))
		})
	}
}

// steps returns 0, step, 2*step... below n, and n-1.
func steps(n, step int) []int {
	var out []int
	for i := 0; i < n; i += step {
		out = append(out, i)
	}
	return append(out, n-1)
}

// manifestV2 is the version-2 format: the whole manifest as one gob value.
type manifestV2 struct {
	Version                  int
	Endpoint, Bucket, Prefix string
	Created                  time.Time
	Dirs                     []store.ManifestDir
}

// manifestHeaderV4 is the header of a version-3 manifest with a later
// version number.
type manifestHeaderV4 struct {
	Version                  int
	Endpoint, Bucket, Prefix string
	Created                  time.Time
}

// TestManifestOldVersion: a manifest of another version fails to load with
// an error that says so (the mount lists instead, and saves a new one).
func TestManifestOldVersion(t *testing.T) {
	m := testManifest(3)
	for _, c := range []struct {
		name    string
		write   func(w io.Writer) error
		wantErr string
	}{
		{"version 2", func(w io.Writer) error {
			return gob.NewEncoder(w).Encode(manifestV2{Version: 2, Endpoint: m.Endpoint, Bucket: m.Bucket, Prefix: m.Prefix, Created: m.Created, Dirs: m.Dirs})
		}, "version 2"},
		{"version 4", func(w io.Writer) error {
			if _, err := io.WriteString(w, "dataccel manifest\n"); err != nil {
				return err
			}
			return gob.NewEncoder(w).Encode(manifestHeaderV4{Version: 4, Endpoint: m.Endpoint, Bucket: m.Bucket, Prefix: m.Prefix, Created: m.Created})
		}, "version 4, want 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var plain bytes.Buffer
			if err := c.write(&plain); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "manifest.gob.gz")
			if err := os.WriteFile(path, gzipped(t, plain.Bytes()), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := store.LoadManifest(path, m.Endpoint, m.Bucket, m.Prefix)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want an error about %q naming the file", err, c.wantErr)
			}
		})
	}
}

func TestManifestMismatch(t *testing.T) {
	m := testManifest(3)
	path := filepath.Join(t.TempDir(), "manifest.gob.gz")
	if err := saveManifest(path, m); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                     string
		endpoint, bucket, prefix string
		want                     error
	}{
		{"same", m.Endpoint, m.Bucket, m.Prefix, nil},
		{"other endpoint", "http://127.0.0.1:9001", m.Bucket, m.Prefix, store.ErrManifestMismatch},
		{"other bucket", m.Endpoint, "c", m.Prefix, store.ErrManifestMismatch},
		{"other prefix", m.Endpoint, m.Bucket, "p/q/", store.ErrManifestMismatch},
		{"no prefix", m.Endpoint, m.Bucket, "", store.ErrManifestMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := store.LoadManifest(path, c.endpoint, c.bucket, c.prefix)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if _, err := store.LoadManifest(filepath.Join(t.TempDir(), "none"), m.Endpoint, m.Bucket, m.Prefix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: got %v, want os.ErrNotExist", err)
	}
}

// TestManifestSaveStreams: a save never holds the manifest encoded whole
// (gob encodes a value whole before writing it): it allocates less than
// half the records' size. The files have no ModTime: gob allocates for
// each time it encodes, in proportion to the files but for no longer than
// one encode. BenchmarkManifest measures the peak heap.
func TestManifestSaveStreams(t *testing.T) {
	m := &store.Manifest{Endpoint: "e", Bucket: "b", Dirs: []store.ManifestDir{{Dir: "d/"}}}
	for i := range 300_000 {
		m.Dirs[0].Files = append(m.Dirs[0].Files, store.Object{Key: fmt.Sprintf("d/%06d.jpg", i), Size: int64(i), ETag: fmt.Sprintf("%032x", i)})
	}
	path := filepath.Join(t.TempDir(), "manifest.gob.gz")
	runtime.GC()
	before := readMetric("/gc/heap/allocs:bytes")
	if err := saveManifest(path, m); err != nil {
		t.Fatal(err)
	}
	alloc := readMetric("/gc/heap/allocs:bytes") - before
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	size, err := io.Copy(io.Discard, zr)
	if err != nil {
		t.Fatal(err)
	}
	if alloc > uint64(size)/2 {
		t.Errorf("the save of %d bytes of records allocated %d bytes", size, alloc)
	}
}

// imagenetManifest returns a manifest shaped like ImageNet's training set:
// dirs directories of files each under "train/", with the keys, 32-hex-digit
// ETags and sizes of real images.
func imagenetManifest(dirs, files int) *store.Manifest {
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	top := store.ManifestDir{Dir: "train/"}
	m := &store.Manifest{Endpoint: "http://127.0.0.1:9000", Bucket: "datasets", Prefix: "imagenet/",
		Created: t0, Dirs: []store.ManifestDir{{Dir: "", Subdirs: []string{"train"}}, top}}
	for d := range dirs {
		synset := fmt.Sprintf("n%08d", 1440764+d*1319)
		md := store.ManifestDir{Dir: "train/" + synset + "/", Files: make([]store.Object, files)}
		for i := range md.Files {
			md.Files[i] = store.Object{
				Key:     fmt.Sprintf("train/%s/%s_%d.JPEG", synset, synset, 10000+i*7),
				Size:    60_000 + r.Int64N(100_000),
				ETag:    fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()),
				ModTime: t0.Add(time.Duration(r.Int64N(1e6)) * time.Second),
			}
		}
		m.Dirs[1].Subdirs = append(m.Dirs[1].Subdirs, synset)
		m.Dirs = append(m.Dirs, md)
	}
	return m
}

// heapSampler records the highest heap (bytes in live and not yet swept
// objects) seen while it runs, sampling every 5 ms: the spike a single
// large buffer makes lasts as long as the encode or decode. A read of the
// heap metrics waits on allocating goroutines: it slows what it measures.
type heapSampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	peak uint64
}

const heapObjects = "/memory/classes/heap/objects:bytes"

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), peak: readMetric(heapObjects)}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		s := []metrics.Sample{{Name: heapObjects}}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
				metrics.Read(s)
				h.peak = max(h.peak, s[0].Value.Uint64())
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	h.wg.Wait()
	return max(h.peak, readMetric(heapObjects))
}

// measureHeap runs op once untimed, to report the peak heap above the
// live heap before it (peak-MB), the bytes allocated (alloc-MB/op) and,
// for ops that return what they read, what the result holds after a GC
// (result-MB): peak-MB less result-MB is the op's working memory. Then it
// times op b.N times without the sampler, which would slow it. Run it with
// GOGC=10 too: with the default pacing, garbage not yet collected counts
// in the peak whatever the op does.
func measureHeap(b *testing.B, op func() any) {
	b.Helper()
	runtime.GC()
	base := readMetric(heapObjects)
	allocs := readMetric("/gc/heap/allocs:bytes")
	h := startHeapSampler()
	v := op()
	peak := h.Stop() - base
	alloc := readMetric("/gc/heap/allocs:bytes") - allocs
	runtime.GC()
	result := readMetric(heapObjects) - min(base, readMetric(heapObjects))
	runtime.KeepAlive(v)
	v = nil
	runtime.GC()
	b.ResetTimer()
	for range b.N {
		op()
	}
	b.StopTimer()
	b.ReportMetric(float64(peak)/(1<<20), "peak-MB")
	b.ReportMetric(float64(alloc)/(1<<20), "alloc-MB/op")
	b.ReportMetric(float64(result)/(1<<20), "result-MB")
}

// BenchmarkManifest saves and loads the manifest of an ImageNet-size
// dataset (1.28M files in 1,000 directories) and of one flat directory of
// as many files. Run with -benchtime=1x: one op takes seconds.
func BenchmarkManifest(b *testing.B) {
	for _, c := range []struct {
		name        string
		dirs, files int
	}{
		{"imagenet", 1000, 1280},
		{"flat", 1, 1_280_000},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := imagenetManifest(c.dirs, c.files)
			path := filepath.Join(b.TempDir(), "manifest.gob.gz")
			b.Run("save", func(b *testing.B) {
				measureHeap(b, func() any {
					if err := saveManifest(path, m); err != nil {
						b.Fatal(err)
					}
					return nil
				})
				if fi, err := os.Stat(path); err == nil {
					b.ReportMetric(float64(fi.Size())/(1<<20), "file-MB")
				}
			})
			b.Run("load", func(b *testing.B) {
				if err := saveManifest(path, m); err != nil {
					b.Fatal(err)
				}
				measureHeap(b, func() any {
					got, err := store.LoadManifest(path, m.Endpoint, m.Bucket, m.Prefix)
					if err != nil {
						b.Fatal(err)
					}
					if got.Files() != m.Files() {
						b.Fatalf("loaded %d files, want %d", got.Files(), m.Files())
					}
					return got
				})
			})
			runtime.KeepAlive(m)
		})
	}
}
