package fuse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
)

type recordingControl struct {
	mu     sync.Mutex
	orders [][]store.Object
}

func (r *recordingControl) Announce(order []store.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.orders = append(r.orders, order)
}

func (r *recordingControl) Stats() []byte { return []byte(`{"gets":42}`) }

// announced returns the orders received so far.
func (r *recordingControl) announced() [][]store.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.orders)
}

// keysOf joins the keys of an order with spaces.
func keysOf(order []store.Object) string {
	keys := make([]string, len(order))
	for i, o := range order {
		keys[i] = o.Key
	}
	return strings.Join(keys, " ")
}

// writeOrder opens mnt's control file as a job does and writes list to it;
// the file stays open (for more writes and an fsync) until the test ends.
func writeOrder(t *testing.T, mnt, list string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(mnt, ControlDir, "prefetch"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString(list); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAnnounce writes an epoch order to .dataccel/prefetch: the control
// receives the objects in that order, unknown and escaping paths are
// skipped, and the control directory never shows in listings.
func TestAnnounce(t *testing.T) {
	st := srv.NewBucket(t)
	for i := range 6 {
		testenv.Put(t, st, fmt.Sprintf("ds/c%d/f%d", i%2, i), []byte{byte(i)})
	}
	ctl := &recordingControl{}
	m := mountCfg(t, Config{Store: st, Prefix: "ds/", MetadataTTL: time.Hour, Control: ctl})
	order := "c1/f5\n/c0/f2\n  c1/f1  \nmissing/f\n../../etc/passwd\nc0/./f0\n\n.dataccel/stats\n" +
		strings.Repeat("./", 2100) + "c0/f0\n" + // cleans to c0/f0, but too long
		filepath.Join(m.Dir, "c1/f3") + "\n" // a path in the mount, as a job's own list holds
	if err := os.WriteFile(filepath.Join(m.Dir, ".dataccel", "prefetch"), []byte(order), 0o644); err != nil {
		t.Fatal(err)
	}
	var got [][]store.Object
	deadline := time.Now().Add(5 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		got = ctl.announced()
	}
	if len(got) != 1 {
		t.Fatalf("%d announcements, want 1", len(got))
	}
	for _, o := range got[0] {
		if o.ETag == "" || o.Size != 1 {
			t.Errorf("object %+v lacks metadata", o)
		}
	}
	if want := "ds/c1/f5 ds/c0/f2 ds/c1/f1 ds/c0/f0 ds/c1/f3"; keysOf(got[0]) != want {
		t.Fatalf("announced %s, want %s", keysOf(got[0]), want)
	}
	ents, err := os.ReadDir(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == ControlDir {
			t.Fatal("control dir is listed")
		}
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, ".dataccel", "stats"))
	if err != nil || string(b) != `{"gets":42}` {
		t.Fatalf("stats: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(m.Dir, ".dataccel", "other"), nil, 0o644); err == nil {
		t.Fatal("created a file in the control dir")
	}
}

// TestAnnounceFsync: an fsync of .dataccel/prefetch applies the list
// before it returns, and the quiet timer does not announce it again.
func TestAnnounceFsync(t *testing.T) {
	st := srv.NewBucket(t)
	for i := range 3 {
		testenv.Put(t, st, fmt.Sprintf("ds/f%d", i), []byte{byte(i)})
	}
	ctl := &recordingControl{}
	m := mountCfg(t, Config{Store: st, Prefix: "ds/", MetadataTTL: time.Hour, Control: ctl})
	f := writeOrder(t, m.Dir, "f2\nf0\n")
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if got := ctl.announced(); len(got) != 1 || keysOf(got[0]) != "ds/f2 ds/f0" {
		t.Fatalf("after fsync: %d announcements %v; want 1: [ds/f2 ds/f0]", len(got), got)
	}
	time.Sleep(4 * announceQuiet)
	if n := len(ctl.announced()); n != 1 {
		t.Fatalf("%d announcements after the quiet pause, want still 1", n)
	}
}

// TestAnnounceEmpty: an empty list (a truncation with nothing written,
// fsync'ed or not) is the empty order, which ends the last one; the
// previous list was announced again instead.
func TestAnnounceEmpty(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "ds/f0", []byte{0})
	ctl := &recordingControl{}
	m := mountCfg(t, Config{Store: st, Prefix: "ds/", MetadataTTL: time.Hour, Control: ctl})
	if err := writeOrder(t, m.Dir, "f0\n").Sync(); err != nil {
		t.Fatal(err)
	}
	if err := writeOrder(t, m.Dir, "").Sync(); err != nil {
		t.Fatal(err)
	}
	if got := ctl.announced(); len(got) != 2 || len(got[1]) != 0 {
		t.Fatalf("announcements %v; want [ds/f0] then the empty order", got)
	}
	if err := writeOrder(t, m.Dir, "f0\n").Sync(); err != nil {
		t.Fatal(err)
	}
	writeOrder(t, m.Dir, "").Close() // no fsync: the quiet timer announces it
	waitFor(t, "the empty order, after the quiet pause", func() bool {
		got := ctl.announced()
		return len(got) == 4 && len(got[3]) == 0
	})
}

// failingList fails the listing of one prefix.
type failingList struct {
	store.Store
	prefix string
}

func (f failingList) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	if prefix == f.prefix {
		return errors.New("listing failed")
	}
	return f.Store.List(ctx, prefix, recursive, fn)
}

// TestAnnounceFsyncListingFails: an order that cannot be resolved (its
// directory's listing fails) is not applied, and the job's fsync still
// succeeds: an announcement is a hint, and a job reading from the cache
// must not fail for it.
func TestAnnounceFsyncListingFails(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "ds/broken/f", []byte{1})
	ctl := &recordingControl{}
	m := mountCfg(t, Config{Store: failingList{st, "ds/broken/"}, Prefix: "ds/", MetadataTTL: time.Hour, Control: ctl})
	f := writeOrder(t, m.Dir, "broken/f\n")
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v, want success", err)
	}
	if n := len(ctl.announced()); n != 0 {
		t.Fatalf("%d announcements, want none", n)
	}
}

// gatedList holds the listing of one prefix until gate is closed, and
// says on entered when one is waiting.
type gatedList struct {
	store.Store
	prefix  string
	entered chan struct{}
	gate    chan struct{}
}

func (g gatedList) List(ctx context.Context, prefix string, recursive bool, fn func(store.Object) error) error {
	if prefix == g.prefix {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.List(ctx, prefix, recursive, fn)
}

// TestAnnounceSuperseded: a list announced after a pause in the writes
// (the quiet timer) and still resolving when the list grows is dropped,
// not applied late over the longer one; the fsync applies the whole list,
// once.
func TestAnnounceSuperseded(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "ds/slow/f0", []byte{0})
	testenv.Put(t, st, "ds/f1", []byte{1})
	g := gatedList{Store: st, prefix: "ds/slow/", entered: make(chan struct{}, 1), gate: make(chan struct{})}
	ctl := &recordingControl{}
	m := mountCfg(t, Config{Store: g, Prefix: "ds/", MetadataTTL: time.Hour, Control: ctl})
	f := writeOrder(t, m.Dir, "slow/f0\n")
	select {
	case <-g.entered: // the timer's announcement waits for the listing
	case <-time.After(5 * time.Second):
		t.Fatal("the quiet timer did not start an announcement")
	}
	if _, err := f.WriteString("f1\n"); err != nil {
		t.Fatal(err)
	}
	close(g.gate)
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	time.Sleep(4 * announceQuiet)
	got := ctl.announced()
	if len(got) != 1 {
		t.Fatalf("%d announcements, want 1 (the whole list)", len(got))
	}
	if keysOf(got[0]) != "ds/slow/f0 ds/f1" {
		t.Fatalf("announced %s, want ds/slow/f0 ds/f1", keysOf(got[0]))
	}
}

// TestAnnounceTimerAfterFsync: a quiet timer that fires as an fsync
// applies the same list neither cancels the fsync's announcement nor
// announces the list a second time.
func TestAnnounceTimerAfterFsync(t *testing.T) {
	ctl := &recordingControl{}
	fsys := newFS(Config{Store: memStore{objs: map[string][]byte{"p/c/a.jpg": nil}}, Prefix: "p/", Control: ctl})
	t.Cleanup(fsys.stop)
	a := &announceFile{fsys: fsys}
	ctx := context.Background()
	if _, errno := a.Write(ctx, nil, []byte("c/a.jpg\n"), 0); errno != 0 {
		t.Fatal(errno)
	}
	a.mu.Lock()
	armed := a.seq // the timer the write armed
	a.mu.Unlock()
	if errno := a.Fsync(ctx, nil, 0); errno != 0 {
		t.Fatal(errno)
	}
	a.announce(armed) // that timer, firing late
	time.Sleep(2 * announceQuiet)
	if got := ctl.announced(); len(got) != 1 || keysOf(got[0]) != "p/c/a.jpg" {
		t.Fatalf("announcements %v, want one of p/c/a.jpg", got)
	}
}

// TestNoControl: without a Control there is no control directory.
func TestNoControl(t *testing.T) {
	st := srv.NewBucket(t)
	mnt := mountT(t, st, "", time.Hour)
	if _, err := os.Stat(filepath.Join(mnt, ".dataccel")); !os.IsNotExist(err) {
		t.Fatalf("stat .dataccel: %v", err)
	}
}

// TestManifestLoad: a mount preloaded with the listings an earlier mount
// made (a manifest) walks the tree and reads every file with no LIST and
// no HEAD.
func TestManifestLoad(t *testing.T) {
	raw := srv.NewBucket(t)
	want := map[string]string{}
	for i := range 40 {
		k := fmt.Sprintf("m/d%d/e%d/f%02d", i%4, i%3, i)
		want[strings.TrimPrefix(k, "m/")] = k
		testenv.Put(t, raw, k, []byte(k))
	}
	testenv.Put(t, raw, "m/d9/", nil) // marker: an empty directory
	walk := func(dir string) (files int) {
		t.Helper()
		err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			b, err := os.ReadFile(p)
			if err != nil || string(b) != want[rel] {
				return fmt.Errorf("%s: %q %v", rel, b, err)
			}
			files++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "d9")); err != nil {
			t.Fatalf("marker directory: %v", err)
		}
		return files
	}
	first := store.NewCounting(raw)
	m1 := mountCfg(t, Config{Store: first, Prefix: "m/", MetadataTTL: time.Hour})
	if n := walk(m1.Dir); n != len(want) {
		t.Fatalf("%d files, want %d", n, len(want))
	}
	seq, gen, _ := m1.FS.Snapshot()
	dirs := slices.Collect(seq)
	if want := int64(len(dirs)); first.C.Lists.Load() != want || gen != uint64(want) {
		t.Fatalf("first mount: %d LISTs, generation %d, for %d directories; want one each", first.C.Lists.Load(), gen, want)
	}

	st := store.NewCounting(raw)
	m := mountCfg(t, Config{Store: st, Prefix: "m/", MetadataTTL: time.Hour, Preload: dirs})
	if n := walk(m.Dir); n != len(want) {
		t.Fatalf("%d files, want %d", n, len(want))
	}
	if l, s := st.C.Lists.Load(), st.C.Stats.Load(); l != 0 || s != 0 {
		t.Fatalf("%d LIST and %d HEAD requests with a loaded manifest", l, s)
	}
	if g := m.FS.Generation(); g != 1 {
		t.Fatalf("generation %d after a preload and no listing; want 1", g)
	}
}

// TestAppendCleanRel: the fast path for clean lines agrees with path.Clean
// on every kind of odd path.
func TestAppendCleanRel(t *testing.T) {
	for _, p := range []string{
		"a", "a/b", "a/b.JPEG", "n01/n01_0.JPEG", "/a", "a/", "a//b", "./a", "a/.", "a/./b",
		"../a", "a/..", "a/../../b", "..", ".", "/", "//", "...", "a/...", ".a/b.", "a b/c d",
	} {
		want := path.Clean("/" + p)[1:]
		if got := string(appendCleanRel([]byte("pre/"), []byte(p))); got != "pre/"+want {
			t.Errorf("appendCleanRel(%q) = %q, want %q", p, got, "pre/"+want)
		}
	}
}

func FuzzAppendCleanRel(f *testing.F) {
	for _, s := range []string{"a/b", "a/../b", "//x/./y/", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		want := path.Clean("/" + p)[1:]
		if got := string(appendCleanRel(nil, []byte(p))); got != want {
			t.Fatalf("appendCleanRel(%q) = %q, want %q", p, got, want)
		}
	})
}

// countingControl's stats change at every snapshot, and grow.
type countingControl struct {
	n         atomic.Int64
	mu        sync.Mutex
	announced []string // guarded by mu: the keys of the last order announced
}

func (c *countingControl) Announce(order []store.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.announced = c.announced[:0]
	for _, o := range order {
		c.announced = append(c.announced, o.Key)
	}
}

func (c *countingControl) lastOrder() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.announced, " ")
}
func (c *countingControl) Stats() []byte {
	return fmt.Appendf(nil, `{"snapshots":%d}`, c.n.Add(1)*1000)
}

// TestStatsFresh: .dataccel/stats polled faster than it changes still
// shows new counters once they change, and every read is one whole
// snapshot (the size the kernel holds matches the bytes).
func TestStatsFresh(t *testing.T) {
	ctl := &countingControl{}
	m := mountCfg(t, Config{Store: memStore{objs: map[string][]byte{"f": {1}}}, MetadataTTL: time.Hour, Control: ctl})
	seen := map[int64]bool{}
	for range 60 {
		b, err := os.ReadFile(filepath.Join(m.Dir, ".dataccel", "stats"))
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ Snapshots int64 }
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("stats %q: %v", b, err)
		}
		seen[v.Snapshots] = true
		time.Sleep(20 * time.Millisecond)
	}
	// 1.2 s of polling spans several snapshots of statsFresh.
	if len(seen) < 3 {
		t.Fatalf("%d distinct snapshots read in 1.2 s: the kernel served stale stats", len(seen))
	}
}

// TestIsCleanRel: every path of up to 7 bytes over 'a', '.' and '/' is
// clean exactly when cleaning it (as resolve does) leaves it as it is.
func TestIsCleanRel(t *testing.T) {
	paths := []string{""}
	for n := 0; n < 7; n++ {
		for _, p := range paths {
			if len(p) == n {
				for _, c := range []string{"a", ".", "/"} {
					paths = append(paths, p+c)
				}
			}
		}
	}
	for _, p := range paths {
		want := p != "" && path.Clean("/" + p)[1:] == p
		if got := isCleanRel([]byte(p)); got != want {
			t.Errorf("isCleanRel(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestResolveLongList: a list cut into parts, one goroutine each, keeps
// its order exactly, with missing files and directories among its lines
// (some at the cuts), and stops when its context is cancelled.
func TestResolveLongList(t *testing.T) {
	objs := map[string][]byte{}
	for d := range 3 {
		for i := range 2000 {
			objs[fmt.Sprintf("p/d%d/f%05d", d, i)] = nil
		}
		objs[fmt.Sprintf("p/d%d/sub/x", d)] = nil // d/sub is a directory
	}
	var list strings.Builder
	var want []string
	for n := range 20017 {
		d, i := n%3, (n*7919)%2000
		switch {
		case n%1000 == 999 || n%1001 == 0:
			fmt.Fprintf(&list, "d%d/missing%d\n", d, n)
		case n%777 == 0:
			fmt.Fprintf(&list, "d%d/sub\n", d)
		case n%555 == 0:
			fmt.Fprintf(&list, "  ./d%d//f%05d \n\n", d, i) // cleaned; a blank line
			want = append(want, fmt.Sprintf("p/d%d/f%05d", d, i))
		default:
			fmt.Fprintf(&list, "d%d/f%05d\n", d, i)
			want = append(want, fmt.Sprintf("p/d%d/f%05d", d, i))
		}
	}
	var logs testenv.SyncBuffer
	fsys := newFS(Config{Store: memStore{objs: objs}, Prefix: "p/", Control: nopControl{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(fsys.stop)
	for _, parts := range []int{1, 2, 3, 7, 64} {
		warned := strings.Count(logs.String(), "kept=19952 first=d0/missing0")
		order, err := fsys.resolveIn(context.Background(), []byte(list.String()), parts)
		if n := strings.Count(logs.String(), "kept=19952 first=d0/missing0"); n != warned+1 {
			t.Errorf("%d parts: the warning does not name the first skipped path:\n%s", parts, logs.String())
		}
		if err != nil {
			t.Fatal(err)
		}
		got := make([]string, len(order))
		for i, o := range order {
			got[i] = o.Key
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d parts: resolved %d files, want %d; first difference at %d", parts, len(got), len(want), firstDiff(got, want))
		}
	}
	// A line that cannot name a file, before one that names no file: the
	// warning names the first line skipped.
	if _, err := fsys.resolveIn(context.Background(), []byte("d0/f00001\n.dataccel/x\nd0/missing.jpg\n"), 1); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "first=.dataccel/x") {
		t.Errorf("the warning does not name the first skipped line:\n%s", logs.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if order, err := fsys.resolveIn(ctx, []byte(list.String()), 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("resolve with a cancelled context: %d files, err %v; want context.Canceled", len(order), err)
	}
}

// TestCutLines: the parts put together are the list, and each but the last
// ends a line.
func TestCutLines(t *testing.T) {
	for _, tc := range []struct {
		data string
		n    int
	}{
		{"", 3},
		{"a\n", 1},
		{"a\n", 4},
		{"a\nb\nc\nd\n", 2},
		{"a\nb\nc\nd", 3},
		{"a\nbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\nc\n", 3}, // a line longer than a part
		{"no line end at all", 4},
		{strings.Repeat("train/n01440764/n01440764_10026.JPEG\n", 1000), 7},
	} {
		parts := cutLines([]byte(tc.data), tc.n)
		if len(parts) > tc.n {
			t.Errorf("%q in %d: %d parts", tc.data, tc.n, len(parts))
		}
		var joined strings.Builder
		for i, p := range parts {
			if len(p.data) == 0 {
				t.Errorf("%q in %d: part %d is empty", tc.data, tc.n, i)
			}
			if i < len(parts)-1 && p.data[len(p.data)-1] != '\n' {
				t.Errorf("%q in %d: part %d does not end a line: %q", tc.data, tc.n, i, p.data)
			}
			joined.Write(p.data)
		}
		if joined.String() != tc.data {
			t.Errorf("%q in %d: parts put together are %q", tc.data, tc.n, joined.String())
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestAnnounceWhoMay: on an allow_other mount, .dataccel/prefetch takes an
// order from the mount's owner, its group's members and root; another user
// gets EACCES and announces nothing, unless AnnounceAnyUser opens it.
func TestAnnounceWhoMay(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "writing as other users needs root")
	}
	const owner, group, other = 4242, 4343, 5151
	tests := []struct {
		name     string
		anyUser  bool
		uid, gid uint32
		want     bool // the write is taken
	}{
		{"root", false, 0, 0, true},
		{"the owner", false, owner, other, true},
		{"the group", false, other, group, true},
		{"another user", false, other, other, false},
		{"another user, any user allowed", true, other, other, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctl := &recordingControl{}
			m := mountCfg(t, Config{Store: memStore{objs: map[string][]byte{"c0/f0": {1}}}, MetadataTTL: time.Hour,
				Control: ctl, AllowOther: true, UID: owner, GID: group, AnnounceAnyUser: tt.anyUser})
			// t.TempDir's parent is 0700: the other users must reach the mount.
			if err := os.Chmod(filepath.Dir(m.Dir), 0o755); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(m.Dir, ControlDir, "prefetch")
			cmd := exec.Command("sh", "-c", `printf 'c0/f0\n' > "$1" && sync "$1"`, "sh", file)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tt.uid, Gid: tt.gid, NoSetGroups: true}}
			out, err := cmd.CombinedOutput()
			switch {
			case tt.want && err != nil:
				t.Fatalf("uid %d gid %d could not announce: %v: %s", tt.uid, tt.gid, err, out)
			case !tt.want && err == nil:
				t.Fatalf("uid %d gid %d announced on a mount of uid %d gid %d", tt.uid, tt.gid, owner, group)
			case !tt.want && !strings.Contains(string(out), "Permission denied"):
				t.Fatalf("uid %d gid %d: %s; want Permission denied", tt.uid, tt.gid, out)
			}
			// sync(1) on the file fsyncs it: the order is in effect (or
			// refused) by now.
			if got := len(ctl.announced()); got != map[bool]int{true: 1, false: 0}[tt.want] {
				t.Fatalf("%d announcements", got)
			}
		})
	}
}
