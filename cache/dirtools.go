package cache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// DirStat describes a cache directory on disk.
type DirStat struct {
	Entries    int64 // live records (blocks)
	DiskBytes  int64 // bytes of segment files (live records and dead bytes)
	RawBytes   int64 // bytes the live blocks hold uncompressed
	SavedBytes int64 // RawBytes minus payload bytes of compressed blocks
	Compressed int64 // live blocks stored compressed
	Unreadable int64 // segments that end in bytes that are not a record (or could not be read)
	TempFiles  int64 // files that are not segments: leftovers (of a format 1 cache, too)
	// UnknownFormat is what the marker says when it names no format this
	// version reads (a newer version's cache, or a damaged marker), which
	// every mount refuses; "" otherwise.
	UnknownFormat string
}

// ErrInUse: another process (a mount, warm, purge) holds the cache
// directory.
var ErrInUse = errors.New("in use by another process")

// InUse says whether another process holds the cache directory dir, without
// taking it: false for a directory that is not a cache yet.
func InUse(dir string) (bool, error) {
	f, err := os.Open(filepath.Join(dir, MarkerName))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close() // releases the lock taken below
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

// markerMax is the most of the marker read: every format's fits.
const markerMax = 256

// readMarker returns the start of dir's marker file.
func readMarker(dir string) (string, error) {
	f, err := os.Open(filepath.Join(dir, MarkerName))
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, markerMax))
	return string(b), err
}

// unknownFormat says whether a marker's content names no format this
// version reads or converts ("": a crash between creating the marker and
// writing it, converted as format 1).
func unknownFormat(content string) bool {
	return content != markerContent && content != markerFormat1 && content != ""
}

// CheckDir refuses a directory without the marker file: not a cache, or
// one emptied from outside since.
func CheckDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s is not a dataccel cache directory (no %s)", dir, MarkerName)
		}
		return err
	}
	return nil
}

// scannedSeg is one segment file as scanSegments found it.
type scannedSeg struct {
	seq  uint64
	path string
	f    *os.File // open (read only) when kept
	size int64    // file size
	hdr  int64    // bytes before the first record (the header and its padding)
	recs []recInfo
	end  int64 // where the valid records end
	why  scanEnd
	err  error // the file could not be opened or read
}

// scanSegments scans every segment in segDir (several at a time), in seq
// order. keep leaves the files open. A missing segDir holds no segments.
func scanSegments(segDir string, keep bool) ([]*scannedSeg, error) {
	ents, err := os.ReadDir(segDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var found []*scannedSeg
	for _, e := range ents { // sorted by name, so by seq
		if seq, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			found = append(found, &scannedSeg{seq: seq, path: filepath.Join(segDir, e.Name())})
		}
	}
	// Headers of large records are one pread each: scanning segments in
	// parallel keeps a cold NVMe busy.
	workers := min(len(found), max(4, runtime.GOMAXPROCS(0)), 16)
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for {
				next.Lock()
				if i == len(found) {
					next.Unlock()
					return
				}
				sc := found[i]
				i++
				next.Unlock()
				sc.scan(keep)
			}
		})
	}
	wg.Wait()
	return found, nil
}

func (sc *scannedSeg) scan(keep bool) {
	f, err := os.Open(sc.path)
	if err != nil {
		sc.err = err
		return
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		sc.err = err
		return
	}
	sc.size = fi.Size()
	sc.hdr, sc.end, sc.why, sc.err = scanSegment(f, sc.seq, sc.size, func(r recInfo) bool {
		sc.recs = append(sc.recs, r)
		return true
	})
	if keep && sc.err == nil {
		sc.f = f
	} else {
		f.Close()
	}
}

// resolve marks the dead records of found (in seq order): those in the
// dead list, and those a newer record of the same id (higher seq, then
// higher offset) supersedes.
func resolve(found []*scannedSeg, dead map[recKey]struct{}) {
	type at struct{ seg, rec int }
	winner := make(map[uint64]at)
	for i, sc := range found {
		if sc.err != nil {
			continue
		}
		for j := range sc.recs {
			r := &sc.recs[j]
			if _, ok := dead[recKey{sc.seq, r.off}]; ok {
				r.dead, r.listed = true, true
				continue
			}
			if w, ok := winner[r.id]; ok {
				found[w.seg].recs[w.rec].dead = true
			}
			winner[r.id] = at{i, j}
		}
	}
}

// readDeadList reads the dead records of the state file in dir, if any.
func readDeadList(dir string) map[recKey]struct{} {
	buf, err := os.ReadFile(filepath.Join(dir, StateName))
	if err != nil {
		return nil
	}
	_, _, dead, _ := decodeState(buf)
	return dead
}

// StatDir reports what the cache directory dir holds. It reads each
// record's header (not its payload); it may run while a Disk has dir open,
// in which case the figures are approximate (records evicted by the
// running Disk still count as live).
func StatDir(dir string) (DirStat, error) {
	var st DirStat
	if err := CheckDir(dir); err != nil {
		return st, fmt.Errorf("stat cache dir: %w", err)
	}
	content, err := readMarker(dir)
	if err != nil {
		return st, fmt.Errorf("stat cache dir %s: %w", dir, err)
	}
	if unknownFormat(content) {
		st.UnknownFormat = strings.TrimSpace(content)
	}
	segDir := filepath.Join(dir, segDirName)
	found, err := scanSegments(segDir, false)
	if err != nil {
		return st, fmt.Errorf("stat cache dir %s: %w", dir, err)
	}
	resolve(found, readDeadList(dir))
	for _, sc := range found {
		if sc.err != nil {
			if !errors.Is(sc.err, fs.ErrNotExist) { // deleted meanwhile
				st.Unreadable++
			}
			continue
		}
		st.DiskBytes += sc.size
		if sc.why == scanCorrupt {
			st.Unreadable++
		}
		for _, r := range sc.recs {
			if r.dead {
				continue
			}
			st.Entries++
			st.RawBytes += int64(r.rawLen)
			if r.flags&(flagS2|flagS2Chunks) != 0 {
				st.Compressed++
				st.SavedBytes += int64(r.rawLen) - int64(r.payloadLen)
			}
		}
	}
	others, _, oldFiles, err := leftovers(dir)
	if err != nil {
		return st, fmt.Errorf("stat cache dir %s: %w", dir, err)
	}
	st.TempFiles = int64(len(others)) + oldFiles
	return st, nil
}

// RecordSpan is where one live record of a cache directory sits: bytes
// [Off, Off+Len) of the segment file at Path, header then payload (any
// alignment padding after it is not counted).
type RecordSpan struct {
	Path     string
	Off, Len int64
}

// Records lists the live records of the cache in dir, in segment and offset
// order, from their headers (for fault-injection tests and tools). Like
// StatDir it may run beside a Disk that has dir open.
func Records(dir string) ([]RecordSpan, error) {
	if err := CheckDir(dir); err != nil {
		return nil, fmt.Errorf("list cache records: %w", err)
	}
	found, err := scanSegments(filepath.Join(dir, segDirName), false)
	if err != nil {
		return nil, fmt.Errorf("list cache records in %s: %w", dir, err)
	}
	resolve(found, readDeadList(dir))
	var out []RecordSpan
	for _, sc := range found {
		for _, r := range sc.recs {
			if sc.err == nil && !r.dead {
				out = append(out, RecordSpan{Path: sc.path, Off: r.off, Len: r.recLen})
			}
		}
	}
	return out, nil
}

// leftovers returns the entries of the segment directory that are not
// segments, and the fan-out directories of a format 1 cache with the
// number of files in them.
func leftovers(dir string) (others, oldDirs []string, oldFiles int64, err error) {
	segDir := filepath.Join(dir, segDirName)
	ents, err := os.ReadDir(segDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, 0, err
	}
	for _, e := range ents {
		if _, ok := parseSegmentName(e.Name()); !ok || !e.Type().IsRegular() {
			others = append(others, filepath.Join(segDir, e.Name()))
		}
	}
	for i := 0; i < 256; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("%02x", i))
		ents, err := os.ReadDir(sub)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, 0, err
		}
		oldDirs = append(oldDirs, sub)
		oldFiles += int64(len(ents))
	}
	return others, oldDirs, oldFiles, nil
}

// PurgeDir removes every segment, leftover and saved state of the cache in
// dir, keeping the marker so the directory stays a valid, empty cache, then
// runs also (if set: what else the caller keeps in dir) with the lock
// still held, so that a mount starting meanwhile fails to take the
// directory rather than find half of it gone. It refuses a directory
// without the marker and one that a Disk has open. A marker of a format
// this version does not know (a newer version's cache, or a damaged
// marker) is then rewritten as this version's: a Disk refuses such a
// directory, and the purge is the way out that the refusal names. Only
// the names a cache keeps are removed: a directory shared with other files
// keeps those.
func PurgeDir(dir string, also func() error) error {
	if err := CheckDir(dir); err != nil {
		return fmt.Errorf("purge cache dir: %w", err)
	}
	marker := filepath.Join(dir, MarkerName)
	f, err := os.Open(marker)
	if err != nil {
		return fmt.Errorf("purge cache dir: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			err = ErrInUse
		}
		return fmt.Errorf("purge cache dir %s: %w", dir, err)
	}
	content, err := io.ReadAll(io.LimitReader(f, markerMax))
	if err != nil {
		return fmt.Errorf("purge cache dir %s: read %s: %w", dir, MarkerName, err)
	}
	unknown := unknownFormat(string(content))
	segs, err := segmentPaths(filepath.Join(dir, segDirName))
	if err != nil {
		return fmt.Errorf("purge cache dir %s: %w", dir, err)
	}
	others, oldDirs, _, err := leftovers(dir)
	if err != nil {
		return fmt.Errorf("purge cache dir %s: %w", dir, err)
	}
	for _, p := range append(append(segs, others...), oldDirs...) {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("purge cache dir %s: %w", dir, err)
		}
	}
	for _, name := range []string{StateName, tempPrefix + StateName} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("purge cache dir %s: %w", dir, err)
		}
	}
	if also != nil {
		if err := also(); err != nil {
			return err
		}
	}
	if unknown {
		// The same file, so the lock held on it stays.
		if err := os.WriteFile(marker, []byte(markerContent), 0o644); err != nil {
			return fmt.Errorf("purge cache dir %s: mark it as this version's cache: %w", dir, err)
		}
	}
	return nil
}

// segmentPaths lists the segment files in segDir.
func segmentPaths(segDir string) ([]string, error) {
	ents, err := os.ReadDir(segDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var paths []string
	for _, e := range ents {
		if _, ok := parseSegmentName(e.Name()); ok {
			paths = append(paths, filepath.Join(segDir, e.Name()))
		}
	}
	return paths, err
}

// FreeSpace returns the bytes free to unprivileged writers on the file
// system that holds dir, and the floor a disk cache with MinFreeFraction
// minFree keeps free there (0 for none): the cache admits only what free
// holds above floor.
func FreeSpace(dir string, minFree float64) (free, floor int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(max(minFree, 0) * float64(st.Blocks) * float64(st.Bsize)), nil
}
