package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/store"
)

// Putter stores one object of a known size; *s3.Store has this method.
type Putter interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) (store.Object, error)
}

// DirPutter writes objects as files under Root, creating directories as needed.
type DirPutter struct{ Root string }

// Put implements Putter. The file is written under a temporary name and
// renamed, so an interrupted gen never leaves a short file behind.
func (d DirPutter) Put(_ context.Context, key string, r io.Reader, size int64) (store.Object, error) {
	dst := filepath.Join(d.Root, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return store.Object{}, fmt.Errorf("put %q: %w", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".gen-*")
	if err != nil {
		return store.Object{}, fmt.Errorf("put %q: %w", key, err)
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("wrote %d bytes, want %d", n, size)
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		os.Remove(f.Name())
		return store.Object{}, fmt.Errorf("put %q: %w", key, err)
	}
	return store.Object{Key: key, Size: n}, nil
}

// GenConfig describes a generated dataset.
type GenConfig struct {
	Files   int
	Classes int
	// Subdirs splits each class directory into this many subdirectories
	// (s00, s01, ...), a tree two levels deep; 0 puts the files in the
	// class directories.
	Subdirs int
	// MeanSize is the target mean file size in bytes; sizes are log-normal
	// with shape Sigma, bounded to [MinSize, MaxSize].
	MeanSize         int64
	Sigma            float64
	MinSize, MaxSize int64
	Seed             uint64
	// Prefix is prepended to every key ("" or ending in "/").
	Prefix string
	// Concurrency bounds parallel uploads (default 32).
	Concurrency int
	// Content is what the files hold: ContentJPEG (the default) or
	// ContentText.
	Content string
	// PutTimeout bounds each upload (0: none), so that a store that stops
	// answering fails the run instead of hanging it.
	PutTimeout time.Duration
}

// What generated files hold.
const (
	// ContentJPEG: JPEG-like images, incompressible as real JPEGs are.
	ContentJPEG = "jpeg"
	// ContentText: JSON lines of words drawn from a Zipf vocabulary, which
	// compress about as text corpora do (tokenised text, captions, logs).
	ContentText = "text"
)

// MinFileSize is the smallest file Generate writes: a JPEG's header and
// trailer, or a text record's head and tail, must fit in it.
const MinFileSize = 64

// GenPreset is a named dataset shape.
type GenPreset struct {
	Name           string
	Files, Classes int
	About          string
}

// GenPresets lists the built-in dataset shapes.
func GenPresets() []GenPreset {
	return []GenPreset{
		{Name: "imagenet-mini", Files: 4000, Classes: 40, About: "a few thousand files: a quick check on one node"},
		{Name: "imagenet-1k", Files: 1281167, Classes: 1000, About: "the ImageNet-1K training set shape (~140 GB): for real clusters"},
	}
}

// withDefaults fills the ImageNet-like size distribution: ImageNet JPEGs
// have a mean near 110 KB and a long right tail.
func (c GenConfig) withDefaults() GenConfig {
	if c.Classes <= 0 {
		c.Classes = 1
	}
	if c.MeanSize <= 0 {
		c.MeanSize = 110_000
	}
	if c.Sigma <= 0 {
		c.Sigma = 0.6
	}
	if c.MinSize <= 0 {
		c.MinSize = 10_000
	}
	if c.MaxSize <= 0 {
		c.MaxSize = 1_000_000
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 32
	}
	if c.Content == "" {
		c.Content = ContentJPEG
	}
	return c
}

// Validate says whether c, with its defaults filled, describes a dataset
// Generate can write as asked.
func (c GenConfig) Validate() error {
	c = c.withDefaults()
	if c.Files <= 0 {
		return errors.New("gen: no files requested")
	}
	if c.Subdirs < 0 {
		return fmt.Errorf("gen: %d subdirectories per class: want 0 or more", c.Subdirs)
	}
	if c.Content != ContentJPEG && c.Content != ContentText {
		return fmt.Errorf("gen: content %q: want %s or %s", c.Content, ContentJPEG, ContentText)
	}
	if c.MinSize > c.MaxSize || c.MinSize < MinFileSize {
		return fmt.Errorf("gen: bad size bounds [%d, %d]", c.MinSize, c.MaxSize)
	}
	// Sizes are clamped to the bounds: a mean outside them would give a
	// dataset whose every file is one bound, not the mix asked for.
	if c.MeanSize < c.MinSize || c.MeanSize > c.MaxSize {
		return fmt.Errorf("gen: mean size %d lies outside the size bounds [%d, %d]: set the smallest and largest size around it",
			c.MeanSize, c.MinSize, c.MaxSize)
	}
	return nil
}

// GenFile is one file of a generated dataset.
type GenFile struct {
	Key  string
	Size int64
}

// Plan returns the files Generate would write, in key order, without
// generating content: names and sizes depend only on the config and seed.
func (c GenConfig) Plan() []GenFile {
	c = c.withDefaults()
	files := make([]GenFile, c.Files)
	for i := range files {
		files[i] = GenFile{Key: c.key(i), Size: c.size(i)}
	}
	sort.Slice(files, func(a, b int) bool { return files[a].Key < files[b].Key })
	return files
}

// Unplanned returns the names of the files src holds that Generate with c
// does not write, such as those of an earlier, larger run: a bench run over
// src reads them beside the new ones. src names its files as bench run
// sees them (hidden ones skipped), relative to c's prefix.
func (c GenConfig) Unplanned(ctx context.Context, src Source) ([]string, error) {
	files, err := src.Files(ctx)
	if err != nil || len(files) == 0 {
		return nil, err
	}
	c.Prefix = "" // src's names are relative to it
	plan := c.Plan()
	var extra []string
	for _, f := range files {
		if _, ok := slices.BinarySearchFunc(plan, f.Name, func(g GenFile, name string) int { return strings.Compare(g.Key, name) }); !ok {
			extra = append(extra, f.Name)
		}
	}
	return extra, nil
}

// key names file i like ImageNet: CLASS/CLASS_NUMBER.JPEG (.jsonl for
// text), files dealt round-robin over the classes, and within a class over
// its subdirectories (CLASS/sNN/CLASS_NUMBER.JPEG) when there are some.
func (c GenConfig) key(i int) string {
	class := fmt.Sprintf("n%08d", 1440764+(i%c.Classes)*1000)
	ext := ".JPEG"
	if c.Content == ContentText {
		ext = ".jsonl"
	}
	n := i / c.Classes
	dir := class
	if c.Subdirs > 0 {
		dir = path.Join(class, fmt.Sprintf("s%02d", n%c.Subdirs))
	}
	return path.Join(strings.TrimSuffix(c.Prefix, "/"), dir, fmt.Sprintf("%s_%d%s", class, n, ext))
}

// size draws file i's size from its own stream, so the dataset does not
// depend on the order in which parallel workers generate files.
func (c GenConfig) size(i int) int64 {
	r := rand.New(rand.NewPCG(c.Seed, uint64(i)*2+1))
	mu := math.Log(float64(c.MeanSize)) - c.Sigma*c.Sigma/2
	s := int64(math.Exp(mu + c.Sigma*r.NormFloat64()))
	return min(max(s, c.MinSize), c.MaxSize)
}

// content writes file i's bytes into buf, from file i's own random stream.
// vocab is textVocab's (ContentText only).
func (c GenConfig) content(i int, size int64, vocab []string, buf *bytes.Buffer) {
	buf.Reset()
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], c.Seed)
	binary.LittleEndian.PutUint64(seed[8:], uint64(i))
	rng := rand.NewChaCha8(seed)
	if c.Content == ContentText {
		textContent(rand.New(rng), i, size, vocab, buf)
		return
	}
	jpegContent(rng, size, buf)
}

// jpegContent writes a real JPEG header (SOI, JFIF APP0, SOF0 with
// plausible dimensions, SOS), incompressible pseudo-random entropy-coded
// data, and EOI.
func jpegContent(rng *rand.ChaCha8, size int64, buf *bytes.Buffer) {
	w, h := uint16(500), uint16(375)
	buf.Write([]byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00})
	buf.Write([]byte{0xFF, 0xC0, 0x00, 0x11, 0x08, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 0x03,
		0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01})
	buf.Write([]byte{0xFF, 0xDA, 0x00, 0x0C, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3F, 0x00})
	n := int(size) - buf.Len() - 2
	buf.Grow(n + 2)
	data := buf.AvailableBuffer()[:n]
	rng.Read(data)
	// In entropy-coded JPEG data 0xFF starts a marker; avoid stray markers.
	for j, b := range data {
		if b == 0xFF {
			data[j] = 0xFE
		}
	}
	buf.Write(data)
	buf.Write([]byte{0xFF, 0xD9})
}

// vocabSize words: a corpus's common vocabulary, enough for s2 and gzip to
// find the repeats they find in real text.
const vocabSize = 8192

// textVocab returns the words of the text content for seed: lower-case
// words of 2 to 11 letters.
func textVocab(seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 0x76_6f_63_61_62))
	words := make([]string, vocabSize)
	w := make([]byte, 0, 12)
	for i := range words {
		w = w[:0]
		for range 2 + r.IntN(10) {
			w = append(w, byte('a'+r.IntN(26)))
		}
		words[i] = string(w)
	}
	return words
}

// textContent writes size bytes of JSON lines, one record of id, label and
// a few dozen words each ({"id":7,"label":3,"text":"..."}), words drawn
// with Zipf frequencies from vocab. The last record is padded with spaces
// inside its text to end exactly at size.
func textContent(r *rand.Rand, i int, size int64, vocab []string, buf *bytes.Buffer) {
	zipf := rand.NewZipf(r, 1.1, 2, uint64(len(vocab)-1))
	const tail = "\"}\n"
	// A record's head is at most 40 bytes: after a record, either this much
	// is left for the next one or the record takes the rest.
	const minRecord = 64
	n := int(size)
	end := n - len(tail) // the latest a record's text may end
	for rec := 0; buf.Len() < n; rec++ {
		fmt.Fprintf(buf, `{"id":%d,"label":%d,"text":"`, i*1000+rec, r.IntN(1000))
		for words := 8 + r.IntN(120); words > 0; words-- {
			w := vocab[zipf.Uint64()]
			if buf.Len()+1+len(w) > end {
				break
			}
			if buf.Bytes()[buf.Len()-1] != '"' {
				buf.WriteByte(' ')
			}
			buf.WriteString(w)
		}
		if left := end - buf.Len(); left < minRecord {
			buf.WriteString(strings.Repeat(" ", left))
		}
		buf.WriteString(tail)
	}
}

// GenResult summarises a Generate call.
type GenResult struct {
	Files   int
	Bytes   int64
	Elapsed time.Duration
	// Bounded counts the files whose drawn size fell outside the size
	// bounds and took the bound: many of them pull the mean off the one
	// asked for.
	Bounded int
}

// Generate writes the dataset to dst with bounded parallelism, reporting to
// progress (nil: silent).
func Generate(ctx context.Context, cfg GenConfig, dst Putter, progress *Progress) (GenResult, error) {
	if err := cfg.Validate(); err != nil {
		return GenResult{}, err
	}
	cfg = cfg.withDefaults()
	start := time.Now()
	bar := progress.Begin("gen", int64(cfg.Files))
	defer bar.Done()
	var next, total, bounded atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range min(cfg.Concurrency, cfg.Files) {
		g.Go(func() error {
			var buf bytes.Buffer
			var vocab []string
			if cfg.Content == ContentText {
				vocab = textVocab(cfg.Seed)
			}
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.Files {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				size := cfg.size(i)
				if size == cfg.MinSize || size == cfg.MaxSize {
					bounded.Add(1)
				}
				cfg.content(i, size, vocab, &buf)
				if err := put(gctx, dst, cfg.key(i), buf.Bytes(), size, cfg.PutTimeout); err != nil {
					return fmt.Errorf("gen: %w", err)
				}
				total.Add(size)
				bar.Add(1, size)
			}
		})
	}
	err := g.Wait()
	return GenResult{Files: cfg.Files, Bytes: total.Load(), Elapsed: time.Since(start), Bounded: int(bounded.Load())}, err
}

// put uploads b (size bytes) under key, within timeout when it is positive.
func put(ctx context.Context, dst Putter, key string, b []byte, size int64, timeout time.Duration) error {
	pctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	_, err := dst.Put(pctx, key, bytes.NewReader(b), size)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("put %q: no answer within %s: %w", key, timeout, err)
	}
	return err
}
