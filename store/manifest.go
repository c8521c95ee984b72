package store

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"time"
)

// Manifest is a saved snapshot of the directory listings a mount made:
// with it, a remount serves stat, readdir and open in those directories
// without one LIST or HEAD. Directories it lacks are listed on demand.
type Manifest struct {
	Version  int
	Endpoint string // where the listing came from, so another bucket's manifest is never used
	Bucket   string
	Prefix   string
	Created  time.Time // its listings are no older than this: a mount trusts them for its metadata TTL from then
	Dirs     []ManifestDir
}

// ManifestDir is one directory's complete listing.
type ManifestDir struct {
	Dir     string   // key prefix ending in "/", or "" for the bucket root
	Subdirs []string // names of the subdirectories
	Files   []Object // the files directly in Dir
}

// Files counts the files of all the directories in m.
func (m *Manifest) Files() int {
	n := 0
	for _, d := range m.Dirs {
		n += len(d.Files)
	}
	return n
}

// Version 3: a stream of small gob values. Version 2 was one value, which
// gob encodes and decodes whole in memory: for 1.28M files, a save peaked
// ~300 MB above the manifest itself and a load ~120 MB above its result.
//
// The gzip stream holds manifestMagic, then a manifestHeader, then per
// directory a manifestRecord of kind recDir and records of kind recChunk
// with at most manifestChunk names, then one of kind recEnd. The counts in
// recDir and recEnd, and the gzip checksum read at the end, make a
// truncated or damaged file an error: the mount serves stat and readdir
// from a manifest without listing, so a short one would hide files.
const manifestVersion = 3

// manifestMagic starts a version-3 (or later) manifest, so that a loader
// tells an older one by its first bytes: decoding a version-2 manifest's
// header would read its one huge value whole, as gob reads a value before
// it checks its type.
const manifestMagic = "dataccel manifest\n"

// manifestChunk bounds the names in one record, so that neither end ever
// holds more than one chunk encoded, even for a flat directory of
// millions of files.
const manifestChunk = 4096

// manifestPrealloc bounds the names a loader allocates room for from a
// directory's declared count, before it has read them: a damaged count
// cannot make it allocate gigabytes. Past it, the slices grow as read.
const manifestPrealloc = 1 << 22

type manifestHeader struct {
	Version  int
	Endpoint string
	Bucket   string
	Prefix   string
	Created  time.Time
}

// Kinds of manifestRecord; zero is none, so a record gob leaves empty is
// an error.
const (
	recDir   = 1 // starts a directory: Dir, NSubdirs, NFiles
	recChunk = 2 // the next Subdirs and Files of the directory
	recEnd   = 3 // the end: NDirs, NFiles of the whole manifest
)

type manifestRecord struct {
	Kind     int
	Dir      string
	NDirs    int
	NSubdirs int
	NFiles   int
	Subdirs  []string
	Files    []Object
}

// ErrManifestMismatch: the manifest file is for another bucket or prefix.
var ErrManifestMismatch = errors.New("manifest is for another bucket or prefix")

// ManifestTempPattern names (as os.CreateTemp takes it) the file a save
// writes before renaming it, beside the manifest: one a killed save left
// behind matches it.
const ManifestTempPattern = ".manifest-*"

// SaveManifest writes m's header and the directories of dirs (m.Dirs is not
// read) to path atomically (temp file, then rename). The directories are
// taken one at a time, so a caller that holds the listings in another form
// (the mount's namespace) copies one directory at a time, never all of them
// at once. It returns the directories and files written.
func SaveManifest(path string, m *Manifest, dirs iter.Seq[ManifestDir]) (nDirs, nFiles int, err error) {
	m.Version = manifestVersion
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, 0, fmt.Errorf("save manifest: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ManifestTempPattern)
	if err != nil {
		return 0, 0, fmt.Errorf("save manifest: %w", err)
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	nDirs, nFiles, err = writeManifest(zw, m, dirs)
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("save manifest: %w", err)
	}
	return nDirs, nFiles, nil
}

// writeManifest encodes m's header and dirs to w as a stream of records of
// bounded size, and returns the directories and files written.
func writeManifest(w io.Writer, m *Manifest, dirs iter.Seq[ManifestDir]) (nDirs, nFiles int, err error) {
	if _, err := io.WriteString(w, manifestMagic); err != nil {
		return 0, 0, err
	}
	enc := gob.NewEncoder(w)
	err = enc.Encode(manifestHeader{Version: m.Version, Endpoint: m.Endpoint, Bucket: m.Bucket, Prefix: m.Prefix, Created: m.Created})
	if err != nil {
		return 0, 0, err
	}
	for d := range dirs {
		nDirs++
		nFiles += len(d.Files)
		if err := enc.Encode(manifestRecord{Kind: recDir, Dir: d.Dir, NSubdirs: len(d.Subdirs), NFiles: len(d.Files)}); err != nil {
			return 0, 0, err
		}
		for subdirs, files := d.Subdirs, d.Files; len(subdirs)+len(files) > 0; {
			rec := manifestRecord{Kind: recChunk}
			rec.Subdirs, subdirs = split(subdirs, manifestChunk)
			rec.Files, files = split(files, manifestChunk-len(rec.Subdirs))
			if err := enc.Encode(rec); err != nil {
				return 0, 0, err
			}
		}
	}
	return nDirs, nFiles, enc.Encode(manifestRecord{Kind: recEnd, NDirs: nDirs, NFiles: nFiles})
}

// split returns the first n (at most) elements of s, and the rest.
func split[E any](s []E, n int) (head, rest []E) {
	n = min(n, len(s))
	return s[:n:n], s[n:]
}

// LoadManifest reads the manifest at path and checks it is for
// endpoint/bucket/prefix. A missing file wraps os.ErrNotExist.
func LoadManifest(path, endpoint, bucket, prefix string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load manifest: %w", err)
	}
	defer f.Close()
	// gzip reads its input a byte at a time: the buffer only sizes the
	// reads from the file, and a small manifest needs no megabyte.
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", path, err)
	}
	m, err := readManifest(zr, endpoint, bucket, prefix)
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", path, err)
	}
	return m, nil
}

// readManifest decodes what writeManifest encoded, one record at a time.
func readManifest(r io.Reader, endpoint, bucket, prefix string) (*Manifest, error) {
	magic := make([]byte, len(manifestMagic))
	if _, err := io.ReadFull(r, magic); err != nil {
		return nil, fmt.Errorf("header: %w", truncated(err))
	}
	if !bytes.Equal(magic, []byte(manifestMagic)) {
		return nil, fmt.Errorf("not a version %d manifest: version 2 or older (an older dataccel's), or damaged", manifestVersion)
	}
	dec := gob.NewDecoder(r)
	var h manifestHeader
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("header: %w", truncated(err))
	}
	if h.Version != manifestVersion {
		return nil, fmt.Errorf("version %d, want %d", h.Version, manifestVersion)
	}
	if h.Endpoint != endpoint || h.Bucket != bucket || h.Prefix != prefix {
		return nil, fmt.Errorf("written for %s %s/%s: %w", h.Endpoint, h.Bucket, h.Prefix, ErrManifestMismatch)
	}
	m := &Manifest{Version: h.Version, Endpoint: h.Endpoint, Bucket: h.Bucket, Prefix: h.Prefix, Created: h.Created}
	var cur *ManifestDir
	var wantSubdirs, wantFiles, files int
	// complete says whether cur, if any, got every name it declared.
	complete := func() error {
		if cur != nil && (len(cur.Subdirs) != wantSubdirs || len(cur.Files) != wantFiles) {
			return fmt.Errorf("directory %q: %d subdirectories and %d files, want %d and %d",
				cur.Dir, len(cur.Subdirs), len(cur.Files), wantSubdirs, wantFiles)
		}
		return nil
	}
	for {
		// A fresh record each time: gob leaves the fields a value lacks
		// as they were. A chunk decodes straight into the room left in
		// the directory's slices (gob extends a slice in place when it
		// has the capacity): no copy, and no chunk-sized garbage.
		var rec manifestRecord
		if cur != nil {
			rec.Subdirs, rec.Files = cur.Subdirs[len(cur.Subdirs):], cur.Files[len(cur.Files):]
		}
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("after %d directories: %w", len(m.Dirs), truncated(err))
		}
		if rec.Kind != recChunk && len(rec.Subdirs)+len(rec.Files) > 0 {
			return nil, fmt.Errorf("after %d directories: names in a record of kind %d", len(m.Dirs), rec.Kind)
		}
		switch rec.Kind {
		case recDir:
			if err := complete(); err != nil {
				return nil, err
			}
			if rec.NSubdirs < 0 || rec.NFiles < 0 {
				return nil, fmt.Errorf("directory %q: negative count", rec.Dir)
			}
			md := ManifestDir{Dir: rec.Dir}
			if rec.NSubdirs > 0 {
				md.Subdirs = make([]string, 0, min(rec.NSubdirs, manifestPrealloc))
			}
			if rec.NFiles > 0 {
				md.Files = make([]Object, 0, min(rec.NFiles, manifestPrealloc))
			}
			m.Dirs = append(m.Dirs, md)
			cur, wantSubdirs, wantFiles = &m.Dirs[len(m.Dirs)-1], rec.NSubdirs, rec.NFiles
		case recChunk:
			if cur == nil || len(cur.Subdirs)+len(rec.Subdirs) > wantSubdirs || len(cur.Files)+len(rec.Files) > wantFiles {
				return nil, fmt.Errorf("after %d directories: names past a directory's count", len(m.Dirs))
			}
			cur.Subdirs = extend(cur.Subdirs, rec.Subdirs)
			cur.Files = extend(cur.Files, rec.Files)
			files += len(rec.Files)
		case recEnd:
			if err := complete(); err != nil {
				return nil, err
			}
			if rec.NDirs != len(m.Dirs) || rec.NFiles != files {
				return nil, fmt.Errorf("%d directories and %d files, want %d and %d", len(m.Dirs), files, rec.NDirs, rec.NFiles)
			}
			// The end of the gzip stream is where its checksum is
			// checked; data past the end record is damage too.
			var extra manifestRecord
			if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("after the end record: %w", truncated(err))
			}
			return m, nil
		default:
			return nil, fmt.Errorf("after %d directories: record of unknown kind %d", len(m.Dirs), rec.Kind)
		}
	}
}

// extend returns s followed by more: s extended over more where more was
// decoded in place past the end of s, else appended.
func extend[E any](s, more []E) []E {
	if len(more) > 0 && cap(s)-len(s) >= len(more) && &s[len(s):cap(s)][0] == &more[0] {
		return s[:len(s)+len(more)]
	}
	return append(s, more...)
}

// truncated names a stream that ends early, and a nil error (a record
// where the end should be) as data past the end.
func truncated(err error) error {
	switch {
	case err == nil:
		return errors.New("data past the end")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("truncated: %w", err)
	}
	return err
}
