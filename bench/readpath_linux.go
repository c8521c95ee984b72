package bench

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// readPath reads the file at p whole, using buf as scratch, with the system
// calls a C or Python loader makes (see DirSource).
func readPath(p string, buf []byte, pythonOpen bool) (int64, error) {
	fd, err := retryEINTR(func() (int, error) { return unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	if pythonOpen {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return 0, &os.PathError{Op: "fstat", Path: p, Err: err}
		}
		// isatty(): a regular file answers ENOTTY, which is the point.
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil && !errors.Is(err, unix.ENOTTY) {
			return 0, &os.PathError{Op: "ioctl TCGETS", Path: p, Err: err}
		}
	}
	var total int64
	for {
		n, err := retryEINTR(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil {
			return total, &os.PathError{Op: "read", Path: p, Err: err}
		}
		if n == 0 {
			return total, nil
		}
		total += int64(n)
	}
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}
