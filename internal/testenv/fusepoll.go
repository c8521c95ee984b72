package testenv

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// goFusePollHack is the file go-fuse serves itself at a mount's root to
// answer the kernel's first POLL with ENOSYS (its poll.go).
const goFusePollHack = ".go-fuse-epoll-hack"

// SettleFUSEPoll makes sure the kernel sends no more POLL requests to the
// go-fuse mount at dir, for tests that read a mount their own process
// serves. Go registers every opened file with its poller while holding a P;
// on a FUSE file that waits for a POLL answer, and a stop-the-world (a GC)
// then waits for that P while the server waits for the world. go-fuse makes
// the kernel stop polling at mount time (one POLL answered ENOSYS); this
// polls again until the kernel answers without an error, which it does
// once it has stopped asking.
func SettleFUSEPoll(dir string) error {
	fd, err := unix.Open(filepath.Join(dir, goFusePollHack), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("settle FUSE polling on %s: %w", dir, err)
	}
	defer unix.Close(fd)
	for range 20 {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 0); errors.Is(err, unix.EINTR) {
			continue
		} else if err != nil {
			return fmt.Errorf("settle FUSE polling on %s: %w", dir, err)
		}
		if fds[0].Revents&unix.POLLERR == 0 {
			return nil
		}
	}
	return fmt.Errorf("settle FUSE polling on %s: the kernel still polls", dir)
}
