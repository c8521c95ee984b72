package cache

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openRAMFile creates the anonymous memory file (memfd) that holds the RAM
// tier's bytes.
func openRAMFile() (*ramFile, error) {
	fd, err := unix.MemfdCreate("dataccel-ram", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	return &ramFile{f: os.NewFile(uintptr(fd), "memfd:dataccel-ram")}, nil
}

// punch gives the pages of [off, off+n) back to the system.
func (m *ramFile) punch(off, n int64) error {
	rc, err := m.f.SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	if err := rc.Control(func(fd uintptr) {
		perr = unix.Fallocate(int(fd), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	}); err != nil {
		return err
	}
	return perr
}

// allocated returns the bytes of memory the file holds.
func (m *ramFile) allocated() int64 {
	var st unix.Stat_t
	rc, err := m.f.SyscallConn()
	if err != nil {
		return 0
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil || serr != nil {
		return 0
	}
	return st.Blocks * 512
}
