package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataccel/dataccel/store"
)

// File is one sample of a dataset.
type File struct {
	// Name is the path relative to the source root, "/"-separated.
	Name string
	Size int64
	// ETag pins reads of an object source, with ModTime for an ETag the
	// store made (a server that sends none); empty for directories.
	ETag    string
	ModTime time.Time
}

// Source is a dataset the loader reads: a directory or an S3 prefix.
type Source interface {
	// String names the source in reports.
	String() string
	// Kind is "dir" or "s3".
	Kind() string
	// Files lists the dataset in directory (key) order.
	Files(ctx context.Context) ([]File, error)
	// ReadFile reads f whole, using buf as scratch, and returns the bytes read.
	ReadFile(ctx context.Context, f File, buf []byte) (int64, error)
}

// DirSource reads a directory tree with plain file system calls, so it
// measures any mount (dataccel, s3fs, NFS, local disk) the way a training
// job sees it. Files are read as a C or Python loader reads them: open,
// read, close, without the Go runtime's poller (os.Open registers every
// file with epoll, which succeeds on FUSE files and fails at once on local
// ones, so it would charge FUSE mounts two extra system calls per file that
// no Python loader makes).
type DirSource struct {
	Root string
	// PythonOpen makes each open also fstat the file and ask whether it is
	// a terminal (ioctl TCGETS), as Python's open() does before Python 3.14
	// unless given buffering=0. The ioctl is what matters: a FUSE mount
	// gets one request per file for it, which local files answer in the
	// kernel.
	PythonOpen bool
}

func (d DirSource) String() string { return d.Root }

// Kind implements Source.
func (d DirSource) Kind() string { return "dir" }

// Files implements Source. Hidden entries (names starting with ".") are
// skipped: they hold control files such as a dataccel mount's .dataccel/.
func (d DirSource) Files(ctx context.Context) ([]File, error) {
	var files []File
	err := filepath.WalkDir(d.Root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p != d.Root && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(d.Root, p)
		if err != nil {
			return err
		}
		files = append(files, File{Name: filepath.ToSlash(rel), Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", d.Root, err)
	}
	// In key order, as an S3 listing of the same files: the walk visits
	// "a/" before "a-b/", keys sort "a-b/" first ('-' < '/'), and every
	// path must read the same files in the same order.
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// ReadFile implements Source.
func (d DirSource) ReadFile(ctx context.Context, f File, buf []byte) (int64, error) {
	n, err := readPath(filepath.Join(d.Root, filepath.FromSlash(f.Name)), buf, d.PythonOpen)
	if err != nil {
		return n, fmt.Errorf("read %s: %w", f.Name, err)
	}
	return n, nil
}

// ReadAll reads r to its end, len(buf) bytes at a time into buf (which
// io.Copy would not use when r or its destination brings its own), and
// returns how many bytes it read.
func ReadAll(r io.Reader, buf []byte) (int64, error) {
	var total int64
	for {
		n, err := r.Read(buf)
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// StoreSource reads objects under Prefix with direct GETs: the network
// ceiling for the same data, with no cache in between.
type StoreSource struct {
	Store  store.Store
	Prefix string // "" or ending in "/"
	// Counts, if set, counts what Store fetches (every try of a GET), for
	// each epoch's fetched GETs and bytes.
	Counts *store.Counts
	// Label names the source in reports (e.g. s3://bucket/prefix).
	Label string
}

func (s StoreSource) String() string { return s.Label }

// Kind implements Source.
func (s StoreSource) Kind() string { return "s3" }

// Files implements Source.
func (s StoreSource) Files(ctx context.Context) ([]File, error) {
	var files []File
	err := s.Store.List(ctx, s.Prefix, true, func(o store.Object) error {
		if o.IsPrefix || strings.HasSuffix(o.Key, "/") {
			return nil
		}
		files = append(files, File{Name: strings.TrimPrefix(o.Key, s.Prefix), Size: o.Size, ETag: o.ETag, ModTime: o.ModTime})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.Label, err)
	}
	sort.Slice(files, func(a, b int) bool { return files[a].Name < files[b].Name })
	return files, nil
}

func (s StoreSource) object(f File) store.Object {
	return store.Object{Key: s.Prefix + f.Name, Size: f.Size, ETag: f.ETag, ModTime: f.ModTime}
}

// ReadFile implements Source with one GET of the whole object.
func (s StoreSource) ReadFile(ctx context.Context, f File, buf []byte) (int64, error) {
	rc, err := s.Store.ReadRange(ctx, s.object(f), 0, -1)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := ReadAll(rc, buf)
	if err != nil {
		return n, fmt.Errorf("read %s: %w", f.Name, err)
	}
	return n, nil
}

// probe measures the round-trip time (median of small ranged GETs) and the
// bandwidth reached by reading up to 8*concurrency files at concurrency
// (a lower bound of the store's bandwidth; give --bandwidth when known).
func (s StoreSource) probe(ctx context.Context, files []File, concurrency int) (time.Duration, float64, error) {
	if len(files) == 0 {
		return 0, 0, errors.New("probe: no files")
	}
	var rtts []time.Duration
	for range 7 {
		t0 := time.Now()
		rc, err := s.Store.ReadRange(ctx, s.object(files[0]), 0, 1)
		if err != nil {
			return 0, 0, fmt.Errorf("probe rtt: %w", err)
		}
		io.Copy(io.Discard, rc)
		rc.Close()
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	rtt := rtts[len(rtts)/2]

	// Open the connections first (one small GET per worker) so handshakes
	// do not count against the bandwidth.
	warm, wctx := errgroup.WithContext(ctx)
	for w := range concurrency {
		warm.Go(func() error {
			rc, err := s.Store.ReadRange(wctx, s.object(files[w%len(files)]), 0, 1)
			if err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			io.Copy(io.Discard, rc)
			return rc.Close()
		})
	}
	if err := warm.Wait(); err != nil {
		return 0, 0, err
	}
	sample := files[:min(len(files), 8*concurrency)]
	var total int64
	totals := make([]int64, concurrency)
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for w := range concurrency {
		g.Go(func() error {
			buf := make([]byte, 256<<10)
			for i := w; i < len(sample); i += concurrency {
				n, err := s.ReadFile(gctx, sample[i], buf)
				if err != nil {
					return fmt.Errorf("probe bandwidth: %w", err)
				}
				totals[w] += n
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	for _, n := range totals {
		total += n
	}
	return rtt, float64(total) / time.Since(t0).Seconds(), nil
}

// ParseFileList reads a list of files relative to a dataset's root, one per
// line: a "/"-separated path, optionally followed by a tab and its size in
// bytes (for the reports; 0 when absent). It returns them sorted by name,
// the order a walk gives, so that every path reads the same permutation.
func ParseFileList(r io.Reader) ([]File, error) {
	var files []File
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, sizeText, hasSize := strings.Cut(line, "\t")
		name = strings.TrimPrefix(name, "./")
		var size int64
		if hasSize {
			var err error
			if size, err = strconv.ParseInt(sizeText, 10, 64); err != nil || size < 0 {
				return nil, fmt.Errorf("file list line %d: size %q: want bytes, a whole number", n, sizeText)
			}
		}
		if name != path.Clean(name) || path.IsAbs(name) || name == "." || name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("file list line %d: %q: want a clean path relative to the dataset's root", n, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("file list line %d: %q listed twice", n, name)
		}
		seen[name] = true
		files = append(files, File{Name: name, Size: size})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("file list: %w", err)
	}
	if len(files) == 0 {
		return nil, errors.New("file list: no files")
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// filesOf returns the files of src to read: its own listing, or the given
// list. A directory is then not walked; an object prefix is listed (its
// reads need the ETags) and must hold every listed file.
func filesOf(ctx context.Context, src Source, list []File) ([]File, error) {
	if list == nil {
		return src.Files(ctx)
	}
	if src.Kind() == "dir" {
		return slices.Clone(list), nil
	}
	all, err := src.Files(ctx)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]File, len(all))
	for _, f := range all {
		byName[f.Name] = f
	}
	out := make([]File, 0, len(list))
	for _, f := range list {
		o, ok := byName[f.Name]
		if !ok {
			return nil, fmt.Errorf("%s: no object %q of the file list", src, f.Name)
		}
		out = append(out, o)
	}
	return out, nil
}
