package cache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// DirStat describes a cache directory on disk.
type DirStat struct {
	Entries    int64 // block files
	DiskBytes  int64 // bytes of block files
	RawBytes   int64 // bytes the blocks hold uncompressed
	SavedBytes int64 // RawBytes minus payload bytes of compressed blocks
	Compressed int64 // blocks stored compressed
	Unreadable int64 // block files whose header could not be read or checked
	TempFiles  int64 // leftovers of unfinished writes
}

// checkCacheDir refuses a directory without the marker file.
func checkCacheDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s is not a dataccel cache directory (no %s)", dir, MarkerName)
		}
		return err
	}
	return nil
}

// walkBlocks calls fn for every block or temp file of the cache in dir.
func walkBlocks(dir string, fn func(path string, temp bool) error) error {
	for i := 0; i < 256; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("%02x", i))
		ents, err := os.ReadDir(sub)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range ents {
			name := e.Name()
			if isTempName(name) {
				if err := fn(filepath.Join(sub, name), true); err != nil {
					return err
				}
				continue
			}
			if id, _, ok := parseBlockName(name); ok && subdirName(id) == filepath.Base(sub) {
				if err := fn(filepath.Join(sub, name), false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// StatDir reports what the cache directory dir holds. It reads each block's
// header (not its payload); it may run while a Disk has dir open, in which
// case the figures are approximate.
func StatDir(dir string) (DirStat, error) {
	var st DirStat
	if err := checkCacheDir(dir); err != nil {
		return st, fmt.Errorf("stat cache dir: %w", err)
	}
	hdr := make([]byte, 4096)
	err := walkBlocks(dir, func(path string, temp bool) error {
		if temp {
			st.TempFiles++
			return nil
		}
		_, size, _ := parseBlockName(filepath.Base(path))
		st.Entries++
		st.DiskBytes += size
		h, err := readHeader(path, hdr)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				st.Entries--
				st.DiskBytes -= size
				return nil // evicted meanwhile
			}
			st.Unreadable++
			return nil
		}
		st.RawBytes += int64(h.rawLen)
		if h.flags&flagS2 != 0 {
			st.Compressed++
			st.SavedBytes += int64(h.rawLen) - int64(h.payloadLen)
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("stat cache dir %s: %w", dir, err)
	}
	return st, nil
}

// readHeader reads and checks the header of one block file; buf is scratch.
func readHeader(path string, buf []byte) (blockHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return blockHeader{}, err
	}
	defer f.Close()
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return blockHeader{}, err
	}
	return parseHeader(buf[:n])
}

// PurgeDir removes every block and temp file of the cache in dir, keeping the
// marker so the directory stays a valid, empty cache. It refuses a directory
// without the marker and one that a Disk has open.
func PurgeDir(dir string) error {
	if err := checkCacheDir(dir); err != nil {
		return fmt.Errorf("purge cache dir: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, MarkerName))
	if err != nil {
		return fmt.Errorf("purge cache dir: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("purge cache dir %s: in use by another process: %w", dir, err)
	}
	err = walkBlocks(dir, func(path string, _ bool) error {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("purge cache dir %s: %w", dir, err)
	}
	for _, name := range []string{StateName, tempPrefix + StateName} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("purge cache dir %s: %w", dir, err)
		}
	}
	return nil
}
