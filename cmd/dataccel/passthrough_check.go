package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// passthroughUnavailable says why a mount on this machine could not read
// local copies through FUSE passthrough ("" if it could), for warm, which
// makes copies without mounting: copies no mount can use would only leave
// the large files out of the disk cache. A mount learns it from the kernel
// itself (package fuse); this is the same test by kernel version and user.
func passthroughUnavailable() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Sprintf("kernel version unknown: %v", err)
	}
	if !kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 9) {
		return "the kernel has no FUSE passthrough (Linux 6.9 or later)"
	}
	if os.Geteuid() != 0 {
		return "FUSE passthrough needs root"
	}
	return ""
}

// kernelAtLeast reports whether a kernel release string ("6.18.44-fc")
// is at least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	minorDigits, _, _ := strings.Cut(parts[1], "-") // "10-rc1"
	mi, err2 := strconv.Atoi(minorDigits)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
