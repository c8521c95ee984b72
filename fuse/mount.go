package fuse

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Mount is a live mount.
type Mount struct {
	Dir    string
	FS     *FS
	server *gofuse.Server
}

// ResolveMountpoint returns dir absolute, its symlinks resolved: the mount
// table lists the real path (a stale or live mount at dir is found by it),
// and fusermount3 refuses a mountpoint that is a symlink. The last element
// is resolved only if it is a symlink, link by link, and not looked at if
// a file system is mounted there: a dead mount cannot be stat'ed, and a
// stopped one never answers (CheckMountpoint probes it with a deadline).
func ResolveMountpoint(dir string) (string, error) { return resolveMountpoint(dir, 0) }

// maxLinks bounds the symlinks followed to a mountpoint, as the kernel's
// own limit does (ELOOP past it).
const maxLinks = 40

func resolveMountpoint(dir string, links int) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return abs, nil // CheckMountpoint says what is missing
	}
	p := filepath.Join(parent, filepath.Base(abs))
	if info, err := mountAt(p); err == nil && info.fstype != "" {
		return p, nil // a mount's path is no symlink: mounts follow them
	}
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 && links < maxLinks {
		// Read, not followed: the target may be a stopped mount.
		if target, err := os.Readlink(p); err == nil {
			if !filepath.IsAbs(target) {
				target = filepath.Join(parent, target)
			}
			return resolveMountpoint(target, links+1)
		}
	}
	return p, nil
}

// CheckMountpoint says whether dir can be mounted on: it must exist, be a
// directory, and not be a mount already. A stale FUSE mount left by a
// crashed process ("transport endpoint is not connected") is detached
// first; detached says what was (empty when nothing was), for the log.
func CheckMountpoint(dir string) (detached string, err error) {
	if detached, err = cleanStale(dir); err != nil {
		return "", err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return detached, fmt.Errorf("mountpoint %s does not exist", dir)
		}
		return detached, fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return detached, fmt.Errorf("mountpoint %s is not a directory", dir)
	}
	info, err := mountAt(dir)
	if err != nil {
		return detached, err
	}
	// A volume (a Kubernetes emptyDir, a bind mount) is a fine place to
	// mount on: that is how a sidecar shares the dataset. Another FUSE
	// filesystem there is a mistake (a second dataccel, s3fs).
	if isFUSE(info.fstype) {
		return detached, fmt.Errorf("mountpoint %s is already a mount point of %s (unmount it first)", dir, info.fstype)
	}
	return detached, nil
}

// cleanStale detaches a FUSE mount at dir whose server is gone. The kernel
// answers ENOTCONN for it (stat may still succeed from cached attributes,
// statfs does not). A server that died while a request was in flight can
// also leave the connection hanging: every request then waits forever, so
// the probe runs with a deadline, and a hung connection is aborted through
// the fusectl filesystem before it is detached.
func cleanStale(dir string) (detached string, err error) {
	info, err := mountAt(dir)
	if err != nil || info.fstype == "" || !isFUSE(info.fstype) {
		return "", err
	}
	probe := make(chan error, 1)
	go func() { // may block for good on a hung connection: it is left behind
		var sfs syscall.Statfs_t
		probe <- syscall.Statfs(dir, &sfs)
	}()
	detached = "a FUSE mount whose server is gone (transport endpoint is not connected)"
	select {
	case err := <-probe:
		if !errors.Is(err, syscall.ENOTCONN) {
			return "", nil // a live mount: CheckMountpoint refuses it
		}
	case <-time.After(3 * time.Second):
		if err := abortConnection(info.minor); err != nil {
			return "", fmt.Errorf("mountpoint %s: FUSE mount hangs (its server is gone) and aborting it failed: %w", dir, err)
		}
		detached = "a FUSE mount that answered nothing for 3 s (its server stopped or stuck): its connection was aborted"
	}
	if err := detach(dir); err != nil {
		return "", fmt.Errorf("mountpoint %s: stale mount (transport endpoint is not connected) and unmounting it failed: %w", dir, err)
	}
	return detached, nil
}

// detach unmounts dir lazily: the path is free at once, and the kernel ends
// the connection when its last user leaves. Root does it with a syscall;
// any other user through the setuid fusermount3 (or fusermount), which
// lets a user unmount what that user mounted.
func detach(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if !errors.Is(err, syscall.EPERM) {
		return err
	}
	bin, lerr := exec.LookPath("fusermount3")
	if lerr != nil {
		if bin, lerr = exec.LookPath("fusermount"); lerr != nil {
			return fmt.Errorf("%w, and no fusermount3 to ask", err)
		}
	}
	if out, err := exec.Command(bin, "-u", "-z", dir).CombinedOutput(); err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return errors.New(msg)
		}
		return fmt.Errorf("%s -u -z: %w", filepath.Base(bin), err)
	}
	return nil
}

// abortConnection aborts FUSE connection minor (fusectl's directory name
// is the mount's device minor number), mounting fusectl if needed.
func abortConnection(minor string) error {
	const ctl = "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, minor)); err != nil {
		if err := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(ctl, minor, "abort"), []byte("1"), 0o200)
}

func isFUSE(fstype string) bool {
	return fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.")
}

// IsMountpoint reports whether dir is listed in /proc/self/mountinfo.
func IsMountpoint(dir string) (bool, error) {
	info, err := mountAt(dir)
	return info.fstype != "", err
}

// IsFUSEMountpoint reports whether the mount visible at dir is a FUSE file
// system: in a pod, dir is a mount point before dataccel mounts on it (the
// kubelet's bind mount of the shared volume).
func IsFUSEMountpoint(dir string) (bool, error) {
	info, err := mountAt(dir)
	return info.fstype == "fuse" || strings.HasPrefix(info.fstype, "fuse."), err
}

// mountInfo is what /proc/self/mountinfo says of one mount point.
type mountInfo struct {
	fstype string // "" when dir is no mount point
	minor  string // device minor number: the FUSE connection id
}

// mountAt reads the mount table without touching dir itself (which could
// hang on a dead FUSE server). The last entry for dir is the visible one.
func mountAt(dir string) (mountInfo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return mountInfo{}, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountInfo{}, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	var info mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != abs {
			continue
		}
		info = mountInfo{fstype: "unknown"}
		if _, minor, ok := strings.Cut(fields[2], ":"); ok {
			info.minor = minor
		}
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) {
				info.fstype = fields[i+1]
				break
			}
		}
	}
	return info, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// New mounts cfg on dir read-only and returns once the kernel serves it.
func New(dir string, cfg Config) (*Mount, error) {
	if cfg.Store == nil || cfg.Opener == nil {
		return nil, errors.New("fuse: Config needs a Store and an Opener")
	}
	abs, err := ResolveMountpoint(dir)
	if err != nil {
		return nil, err
	}
	detached, err := CheckMountpoint(abs)
	if err != nil {
		return nil, err
	}
	fsys := newFS(cfg)
	if detached != "" {
		fsys.log.Warn("detached what was mounted at the mountpoint: "+detached, "mountpoint", abs)
	}
	fsys.mountpoint = []byte(strings.TrimSuffix(abs, "/") + "/")
	if cfg.Preload != nil {
		fsys.Restore(cfg.Preload, cfg.PreloadListed)
	}
	root := &dirNode{fsys: fsys, key: cfg.Prefix}
	fsys.root = root
	go fsys.ns.keepFresh() // until fsys.stop; after the fields above, which its relistings read
	ttl := fsys.cfg.MetadataTTL
	opts := &gofs.Options{
		// The root's inode number is 1 (FUSE's root id), as its children
		// (inoOf) leave it; 0 reads as "no inode" to some tools.
		RootStableAttr:  &gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: 1},
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &ttl,
		UID:             cfg.UID,
		GID:             cfg.GID,
		MountOptions: gofuse.MountOptions{
			AllowOther: cfg.AllowOther,
			// Not "ro": the control files take writes. Nodes refuse
			// every change with EROFS (readOnly).
			Options:       []string{"default_permissions"},
			FsName:        cfg.FsName,
			Name:          "dataccel",
			DirectMount:   true, // we run as root in production; falls back to fusermount otherwise
			MaxBackground: 128,
			MaxWrite:      1 << 20,
			MaxReadAhead:  maxReadAhead,
			DisableXAttrs: true,
			// Reads answer from memory (ReadResultData), which go-fuse
			// writes with writev. With splice on, it first tries a pipe for
			// every READ reply anyway: three wasted syscalls per read, and
			// a log line per 1 MiB read that does not fit the pipe.
			DisableSplice: true,
			Debug:         cfg.Debug,
		},
	}
	if os.Geteuid() != 0 {
		// fusermount3 opens the device as the user; its own failure
		// reads "exited with code 256".
		if err := unix.Access("/dev/fuse", unix.R_OK|unix.W_OK); err != nil {
			fsys.stop()
			return nil, fmt.Errorf("mount %s: without root the mount needs read and write access to /dev/fuse (Debian's udev makes it 0666): %w", abs, err)
		}
	}
	server, err := gofs.Mount(abs, root, opts)
	if err != nil {
		fsys.stop()
		if os.Geteuid() != 0 && strings.Contains(err.Error(), "fusermount exited with code") {
			// go-fuse's words hold the raw wait status (256 for exit 1),
			// and fusermount3 may have printed nothing.
			return nil, fmt.Errorf("mount %s: fusermount3 refused it: without root, the user needs write access to the mountpoint, "+
				"and --allow-other needs user_allow_other in /etc/fuse.conf", abs)
		}
		return nil, fmt.Errorf("mount %s: %w", abs, err)
	}
	go func() { server.Wait(); fsys.stop() }() // however the mount ends
	if cfg.passthrough() {
		if why := passthroughMissing(server.KernelSettings().Flags64()); why != "" {
			fsys.pt.Store(ptOff)
			fsys.log.Info("large files are read through the mount, not from local copies", "reason", why)
		}
	}
	if err := raiseReadAhead(abs, maxReadAhead); err != nil {
		fsys.log.Debug("kernel read-ahead left at its default", "mountpoint", abs, "err", err)
	}
	return &Mount{Dir: abs, FS: fsys, server: server}, nil
}

// maxReadAhead is the largest READ the kernel sends ahead of a sequential
// reader (FUSE max_readahead, and the mount's read_ahead_kb).
const maxReadAhead = 1 << 20

// raiseReadAhead sets the read-ahead of the mount at dir to n bytes. The
// kernel gives a FUSE mount the default of 128 KiB, however large its
// max_readahead, so a large file read in sequence arrived as 128 KiB READs:
// eight times the requests of 1 MiB ones. Root only (sysfs); without it the
// mount works as before.
func raiseReadAhead(dir string, n int) error {
	path, err := readAheadFile(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strconv.Itoa(n>>10)), 0)
}

// readAheadFile is the sysfs file that holds the read-ahead (KiB) of the
// file system mounted at dir.
func readAheadFile(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// Unmount unmounts and waits for the server loop to end. When the mount is
// busy (a process has a file open or its cwd inside) it detaches it
// instead: the path is free at once, and the kernel ends the connection
// when the last user leaves or this process exits.
func (m *Mount) Unmount() error {
	err := m.server.Unmount()
	wait := 10 * time.Second
	if err != nil {
		if derr := detach(m.Dir); derr != nil {
			return fmt.Errorf("unmount %s: %w (lazy unmount: %v)", m.Dir, err, derr)
		}
		m.FS.log.Warn("mount busy: detached it; open files fail once this process exits", "mountpoint", m.Dir)
		wait = time.Second
	}
	done := make(chan struct{})
	go func() { m.server.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		if err == nil {
			return fmt.Errorf("unmount %s: server did not stop within %s", m.Dir, wait)
		}
	}
	return nil
}

// Wait blocks until the mount is gone (unmounted from outside too).
func (m *Mount) Wait() { m.server.Wait() }
