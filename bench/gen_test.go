package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlanSizes(t *testing.T) {
	cfg := GenConfig{Files: 5000, Classes: 50, Seed: 1}
	plan := cfg.Plan()
	if len(plan) != 5000 {
		t.Fatalf("plan has %d files", len(plan))
	}
	var sum int64
	classes := map[string]bool{}
	for _, f := range plan {
		if f.Size < 10_000 || f.Size > 1_000_000 {
			t.Fatalf("%s: size %d outside [10 KB, 1 MB]", f.Key, f.Size)
		}
		sum += f.Size
		classes[strings.Split(f.Key, "/")[0]] = true
	}
	if mean := float64(sum) / 5000; mean < 100_000 || mean > 120_000 {
		t.Errorf("mean size %.0f, want ~110 KB", mean)
	}
	if len(classes) != 50 {
		t.Errorf("%d class directories, want 50", len(classes))
	}
}

func TestGenerateDeterministic(t *testing.T) {
	gen := func(seed uint64) string {
		dir := t.TempDir()
		cfg := GenConfig{Files: 30, Classes: 3, Seed: seed, MeanSize: 20_000, Concurrency: 4}
		res, err := Generate(context.Background(), cfg, DirPutter{Root: dir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Files != 30 {
			t.Fatalf("generated %d files", res.Files)
		}
		return dir
	}
	a, b, c := gen(7), gen(7), gen(8)
	plan := GenConfig{Files: 30, Classes: 3, Seed: 7, MeanSize: 20_000}.Plan()
	differ := 0
	for _, f := range plan {
		da, err := os.ReadFile(filepath.Join(a, f.Key))
		if err != nil {
			t.Fatal(err)
		}
		db, _ := os.ReadFile(filepath.Join(b, f.Key))
		dc, _ := os.ReadFile(filepath.Join(c, f.Key))
		if !bytes.Equal(da, db) {
			t.Errorf("%s differs between two runs with the same seed", f.Key)
		}
		if !bytes.Equal(da, dc) {
			differ++
		}
		if int64(len(da)) != f.Size {
			t.Errorf("%s: %d bytes, plan says %d", f.Key, len(da), f.Size)
		}
		if !bytes.HasPrefix(da, []byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0}) || !bytes.HasSuffix(da, []byte{0xFF, 0xD9}) {
			t.Errorf("%s: no JPEG SOI/JFIF header or EOI", f.Key)
		}
	}
	if differ != len(plan) {
		t.Errorf("%d of %d files differ between seeds 7 and 8, want all", differ, len(plan))
	}
	// Incompressible: gzip must not shrink a file by more than 1%.
	data, _ := os.ReadFile(filepath.Join(a, plan[0].Key))
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(data)
	zw.Close()
	if float64(z.Len()) < 0.99*float64(len(data)) {
		t.Errorf("gzip shrinks a file from %d to %d bytes: not incompressible", len(data), z.Len())
	}
}

func TestGeneratePresets(t *testing.T) {
	want := map[string][2]int{"imagenet-mini": {4000, 40}, "imagenet-1k": {1281167, 1000}}
	for _, p := range GenPresets() {
		if w, ok := want[p.Name]; !ok || w != [2]int{p.Files, p.Classes} {
			t.Errorf("preset %s: %d files %d classes, want %v", p.Name, p.Files, p.Classes, w)
		}
		delete(want, p.Name)
	}
	if len(want) > 0 {
		t.Errorf("presets missing: %v", want)
	}
}
