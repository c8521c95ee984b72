package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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

// TestPlanSubdirs: with Subdirs, each class directory holds that many
// subdirectories, the class's files dealt evenly over them, and no file
// directly; a negative count is refused.
func TestPlanSubdirs(t *testing.T) {
	cfg := GenConfig{Files: 600, Classes: 10, Subdirs: 3, Seed: 1}
	perDir := map[string]int{}
	for _, f := range cfg.Plan() {
		parts := strings.Split(f.Key, "/")
		if len(parts) != 3 || !strings.HasPrefix(parts[2], parts[0]+"_") {
			t.Fatalf("%s: want CLASS/SUBDIR/CLASS_N", f.Key)
		}
		perDir[parts[0]+"/"+parts[1]]++
	}
	if len(perDir) != 30 {
		t.Errorf("%d subdirectories, want 30", len(perDir))
	}
	for d, n := range perDir {
		if n != 20 {
			t.Errorf("%s holds %d files, want 20", d, n)
		}
	}
	if err := (GenConfig{Files: 1, Subdirs: -1}).Validate(); err == nil {
		t.Error("Subdirs -1: no error")
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

func TestGenerateRejectsBadSizes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		mean, min, max  int64
		wantErrContains string
	}{
		{"mean under min", 5_000, 10_000, 1_000_000, "mean size 5000 lies outside the size bounds [10000, 1000000]"},
		{"mean over max", 2_000_000, 0, 0, "mean size 2000000 lies outside the size bounds [10000, 1000000]"},
		{"min over max", 50_000, 200_000, 100_000, "bad size bounds [200000, 100000]"},
		{"min too small", 1_000, 10, 0, "bad size bounds [10, 1000000]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := GenConfig{Files: 3, MeanSize: tc.mean, MinSize: tc.min, MaxSize: tc.max}
			_, err := Generate(context.Background(), cfg, DirPutter{Root: dir}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErrContains) {
				t.Fatalf("err %v, want one containing %q", err, tc.wantErrContains)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("%d entries written for a rejected config", len(ents))
			}
		})
	}
}

// TestGenerateText: text content is JSON lines, exactly the planned size,
// the same for the same seed, and compressible as text is (gzip at least
// 2x; the JPEG content does not shrink at all, above).
func TestGenerateText(t *testing.T) {
	gen := func(seed uint64) (string, []GenFile) {
		dir := t.TempDir()
		// Sizes from the smallest allowed up: a tiny file is one padded record.
		cfg := GenConfig{Files: 40, Classes: 4, Seed: seed, MeanSize: 20_000, MinSize: 64, MaxSize: 300_000,
			Concurrency: 4, Content: ContentText}
		if _, err := Generate(context.Background(), cfg, DirPutter{Root: dir}, nil); err != nil {
			t.Fatal(err)
		}
		return dir, cfg.Plan()
	}
	a, plan := gen(3)
	b, _ := gen(3)
	var all bytes.Buffer
	for _, f := range plan {
		if !strings.HasSuffix(f.Key, ".jsonl") {
			t.Errorf("%s: want a .jsonl name", f.Key)
		}
		da, err := os.ReadFile(filepath.Join(a, f.Key))
		if err != nil {
			t.Fatal(err)
		}
		if db, _ := os.ReadFile(filepath.Join(b, f.Key)); !bytes.Equal(da, db) {
			t.Errorf("%s differs between two runs with the same seed", f.Key)
		}
		if int64(len(da)) != f.Size {
			t.Errorf("%s: %d bytes, plan says %d", f.Key, len(da), f.Size)
		}
		lines := strings.SplitAfter(string(da), "\n")
		if last := lines[len(lines)-1]; last != "" {
			t.Errorf("%s: ends in %q, want a newline", f.Key, last)
		}
		for n, l := range lines[:len(lines)-1] {
			var rec struct {
				ID, Label *int
				Text      *string
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.ID == nil || rec.Label == nil || rec.Text == nil {
				t.Fatalf("%s line %d: %q: %v, want a record of id, label and text", f.Key, n+1, l, err)
			}
		}
		all.Write(da)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(all.Bytes())
	zw.Close()
	if z.Len()*2 > all.Len() {
		t.Errorf("gzip shrinks the text from %d to %d bytes, want at least 2x", all.Len(), z.Len())
	}
	cfg := GenConfig{Files: 1, Content: "png"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `content "png": want jpeg or text`) {
		t.Errorf("content png: %v, want an error naming the contents", err)
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

// Generate counts the files whose size took a bound: few with the default
// mix, many with a mean at its lower bound (the mix is then not the one
// asked for, which bench gen says).
func TestGenerateCountsBoundedSizes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		mean, min, max  int64
		atLeast, atMost float64 // share of the files
	}{
		{"default mix", 110_000, 10_000, 1_000_000, 0, 0.05},
		{"mean at the lower bound", 20_000, 20_000, 1_000_000, 0.3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := GenConfig{Files: 400, Classes: 4, Seed: 1, MeanSize: tc.mean, MinSize: tc.min, MaxSize: tc.max, Concurrency: 4}
			res, err := Generate(context.Background(), cfg, DirPutter{Root: t.TempDir()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if share := float64(res.Bounded) / float64(res.Files); share < tc.atLeast || share > tc.atMost {
				t.Errorf("%d of %d files at a size bound (%.2f), want a share in [%.2f, %.2f]", res.Bounded, res.Files, share, tc.atLeast, tc.atMost)
			}
		})
	}
}
