package store

import (
	"bufio"
	"compress/gzip"
	"encoding/gob"
	"errors"
	"fmt"
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
	Created  time.Time
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

// Version 2: per-directory listings (version 1 was one flat listing).
const manifestVersion = 2

// ErrManifestMismatch: the manifest file is for another bucket or prefix.
var ErrManifestMismatch = errors.New("manifest is for another bucket or prefix")

// SaveManifest writes m to path atomically (temp file, then rename).
func SaveManifest(path string, m *Manifest) error {
	m.Version = manifestVersion
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("save manifest: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".manifest-*")
	if err != nil {
		return fmt.Errorf("save manifest: %w", err)
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err := gob.NewEncoder(zw).Encode(m); err != nil {
		tmp.Close()
		return fmt.Errorf("save manifest: %w", err)
	}
	if err := zw.Close(); err != nil {
		tmp.Close()
		return fmt.Errorf("save manifest: %w", err)
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("save manifest: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save manifest: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save manifest: %w", err)
	}
	return nil
}

// LoadManifest reads the manifest at path and checks it is for
// endpoint/bucket/prefix. A missing file wraps os.ErrNotExist.
func LoadManifest(path, endpoint, bucket, prefix string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load manifest: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", path, err)
	}
	var m Manifest
	if err := gob.NewDecoder(zr).Decode(&m); err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", path, err)
	}
	if m.Version != manifestVersion {
		return nil, fmt.Errorf("load manifest %s: version %d, want %d", path, m.Version, manifestVersion)
	}
	if m.Endpoint != endpoint || m.Bucket != bucket || m.Prefix != prefix {
		return nil, fmt.Errorf("load manifest %s (%s %s/%s): %w", path, m.Endpoint, m.Bucket, m.Prefix, ErrManifestMismatch)
	}
	return &m, nil
}
