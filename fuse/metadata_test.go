package fuse

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

// synthStore lists an ImageNet-like tree (train/<class>/<class>_<i>.JPEG)
// without holding it: every listing makes fresh keys and ETags, as the S3
// client does from the wire. It serves no data.
type synthStore struct{ classes, perClass int }

func (s synthStore) class(c int) string { return fmt.Sprintf("n%08d", 1440764+c) }

func (s synthStore) Stat(ctx context.Context, key string) (store.Object, error) {
	return store.Object{}, store.ErrNotExist
}

func (s synthStore) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	switch {
	case prefix == "":
		return fn(store.Object{Key: "train/", IsPrefix: true})
	case prefix == "train/":
		for c := range s.classes {
			if err := fn(store.Object{Key: "train/" + s.class(c) + "/", IsPrefix: true}); err != nil {
				return err
			}
		}
		return nil
	}
	class := strings.TrimSuffix(strings.TrimPrefix(prefix, "train/"), "/")
	mod := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range s.perClass {
		o := store.Object{
			Key:     fmt.Sprintf("%s%s_%d.JPEG", prefix, class, 10000+i),
			Size:    int64(100000 + i),
			ETag:    fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15),
			ModTime: mod,
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

func (s synthStore) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	return nil, store.ErrNotExist
}

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkMetadata reports the heap a mount holds per file of an
// ImageNet-like tree (100,000 files in 100 directories): once every
// directory is listed (B/file-listed), and once every file is also looked
// up, as a data loader's stat or open does (B/file-looked-up).
func BenchmarkMetadata(b *testing.B) {
	st := synthStore{classes: 100, perClass: 1000}
	files := int64(st.classes * st.perClass)
	for b.Loop() {
		b.StopTimer()
		base := heapInUse()
		b.StartTimer()
		m := mountCfg(b, Config{Store: st, MetadataTTL: time.Hour})
		var dirs []string
		for c := range st.classes {
			dir := filepath.Join(m.Dir, "train", st.class(c))
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != st.perClass {
				b.Fatalf("list %s: %d entries, %v", dir, len(ents), err)
			}
			dirs = append(dirs, dir)
		}
		b.StopTimer()
		listed := heapInUse() - base
		b.StartTimer()
		for c, dir := range dirs {
			for i := range st.perClass {
				if _, err := os.Lstat(filepath.Join(dir, fmt.Sprintf("%s_%d.JPEG", st.class(c), 10000+i))); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		looked := heapInUse() - base
		b.ReportMetric(float64(listed)/float64(files), "B/file-listed")
		b.ReportMetric(float64(looked)/float64(files), "B/file-looked-up")
		b.StartTimer()
	}
}
