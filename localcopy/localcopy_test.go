package localcopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store"
)

// memOpener serves objects from memory, counting opens; fail makes reads
// of a key fail, short cuts an object's bytes (a changed object).
type memOpener struct {
	data   map[string][]byte
	fail   map[string]bool
	short  map[string]bool
	gate   chan struct{} // when set, reads wait for it to close
	views  bool          // readers hand out views (as the prefetch loader's do)
	opens  atomic.Int64
	viewed atomic.Int64 // ReadView calls
}

func (m *memOpener) Open(obj store.Object) Reader {
	m.opens.Add(1)
	if m.views {
		return memViewReader{&memReader{m: m, obj: obj}}
	}
	return &memReader{m: m, obj: obj}
}

// memViewReader hands out views held until done, as the loader hands out
// a block of its pool: done poisons the view, so a copy that used it after
// done would hold garbage.
type memViewReader struct{ *memReader }

func (r memViewReader) ReadView(ctx context.Context, p []byte, off int64) ([]byte, func(), error) {
	r.m.viewed.Add(1)
	d := r.m.data[r.obj.Key]
	if off >= int64(len(d)) {
		return nil, nil, io.EOF
	}
	end := min(off+int64(len(p)), int64(len(d)))
	v := bytes.Clone(d[off:end])
	done := func() {
		for i := range v {
			v[i] = 0xdb
		}
	}
	if end < off+int64(len(p)) {
		return v, done, io.EOF
	}
	return v, done, nil
}

type memReader struct {
	m   *memOpener
	obj store.Object
}

func (r *memReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if r.m.gate != nil {
		select {
		case <-r.m.gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if r.m.fail[r.obj.Key] {
		return 0, errors.New("injected read failure")
	}
	d := r.m.data[r.obj.Key]
	if r.m.short[r.obj.Key] {
		d = d[:len(d)/2]
	}
	if off >= int64(len(d)) {
		return 0, io.EOF
	}
	n := copy(p, d[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *memReader) Close() error { return nil }

func newT(t *testing.T, m *memOpener, budget int64) (*Copies, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "copies")
	c, err := New(dir, m, Options{Budget: budget, Chunk: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, dir
}

func obj(key string, data []byte) store.Object {
	return store.Object{Key: key, ETag: "e-" + key, Size: int64(len(data))}
}

func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func acquire(t *testing.T, c *Copies, o store.Object, want []byte) func() {
	t.Helper()
	f, release, err := c.Acquire(context.Background(), o)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", o.Key, err)
	}
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("copy of %s: %d bytes, want %d, equal=false", o.Key, len(got), len(want))
	}
	return release
}

// Concurrent opens of one file share one copy, made once.
func TestAcquireSharesOneCopy(t *testing.T) {
	for _, views := range []bool{false, true} {
		t.Run(fmt.Sprintf("views=%v", views), func(t *testing.T) { testAcquireSharesOneCopy(t, views) })
	}
}

func testAcquireSharesOneCopy(t *testing.T, views bool) {
	a := payload(10_500, 1)
	m := &memOpener{data: map[string][]byte{"a": a}, gate: make(chan struct{}), views: views}
	c, _ := newT(t, m, 1<<20)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { acquire(t, c, obj("a", a), a)() })
	}
	time.Sleep(20 * time.Millisecond) // let them all wait on the one copy
	close(m.gate)
	wg.Wait()
	if n := m.opens.Load(); n != 1 {
		t.Errorf("object opened %d times for 16 acquires, want 1", n)
	}
	acquire(t, c, obj("a", a), a)()
	if made, reused := c.stats.Made.Load(), c.stats.Reused.Load(); made != 1 || reused < 1 {
		t.Errorf("made %d, reused %d; want 1 and at least 1", made, reused)
	}
	if viewed := m.viewed.Load(); views != (viewed > 0) {
		t.Errorf("%d reads by view from a reader that offers them: %v", viewed, views)
	}
}

// Unpinned copies leave for room least recently used first; pinned ones
// stay, and a copy that cannot fit beside them is refused.
func TestBudget(t *testing.T) {
	a, b, d := payload(1000, 1), payload(1000, 2), payload(1000, 3)
	m := &memOpener{data: map[string][]byte{"a": a, "b": b, "d": d}}
	c, dir := newT(t, m, 2000)
	acquire(t, c, obj("a", a), a)()
	acquire(t, c, obj("b", b), b)()
	acquire(t, c, obj("a", a), a)() // a is now the most recently used
	relD := acquire(t, c, obj("d", d), d)
	if c.stats.Evicted.Load() != 1 {
		t.Fatalf("evicted %d, want 1", c.stats.Evicted.Load())
	}
	relA := acquire(t, c, obj("a", a), a) // b went, not a
	if got := m.opens.Load(); got != 3 {
		t.Fatalf("opens %d, want 3 (a, b, d; a kept)", got)
	}
	_, _, err := c.Acquire(context.Background(), obj("b", b))
	if !errors.Is(err, ErrNoRoom) {
		t.Fatalf("Acquire with every copy pinned: %v, want ErrNoRoom", err)
	}
	relA()
	relD()
	huge := payload(2001, 9)
	m.data["huge"] = huge
	if _, _, err := c.Acquire(context.Background(), obj("huge", huge)); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("Acquire of a copy larger than the budget: %v, want ErrNoRoom", err)
	}
	if c.stats.Evicted.Load() != 1 {
		t.Fatalf("evicted %d after a copy that can never fit, want 1 (none for it)", c.stats.Evicted.Load())
	}
	acquire(t, c, obj("b", b), b)()
	if files, _ := os.ReadDir(dir); len(files) != 2 {
		t.Errorf("%d files in the directory, want 2 (the budget's worth)", len(files))
	}
	if got := c.stats.Bytes.Load(); got != 2000 {
		t.Errorf("Bytes %d, want 2000", got)
	}
}

// A copy that cannot be made leaves no file and no charge behind, and an
// object shorter than listed (changed since) is refused.
func TestFailedCopy(t *testing.T) {
	a, b := payload(5000, 1), payload(5000, 2)
	m := &memOpener{data: map[string][]byte{"a": a, "b": b}, fail: map[string]bool{"a": true}, short: map[string]bool{"b": true}}
	c, dir := newT(t, m, 6000)
	if _, _, err := c.Acquire(context.Background(), obj("a", a)); err == nil {
		t.Fatal("Acquire of an unreadable object succeeded")
	}
	if _, _, err := c.Acquire(context.Background(), obj("b", b)); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("Acquire of a shortened object: %v, want ErrChanged", err)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("%d files left by failed copies", len(files))
	}
	m.fail["a"] = false
	// Not tried again at once: each try reads the whole object.
	opens := m.opens.Load()
	if _, _, err := c.Acquire(context.Background(), obj("a", a)); !errors.Is(err, errFailedLately) || m.opens.Load() != opens {
		t.Fatalf("Acquire right after a failed copy: %v after %d reads; want errFailedLately and no read", err, m.opens.Load()-opens)
	}
	c.mu.Lock()
	c.now = func() time.Time { return time.Now().Add(retryAfter) }
	c.mu.Unlock()
	acquire(t, c, obj("a", a), a)() // the budget was given back
	if got := c.stats.Failed.Load(); got != 2 {
		t.Errorf("Failed %d, want 2", got)
	}
}

// A copy that would leave less than MinFree of the file system free is
// not made, and nothing is read for it; the bytes of copies being written
// count as used.
func TestDiskFloor(t *testing.T) {
	a, b := payload(3000, 1), payload(3000, 2)
	m := &memOpener{data: map[string][]byte{"a": a, "b": b}, gate: make(chan struct{})}
	const free, size = 10_000, 100_000 // the floor: 5% of size, 5,000 bytes
	var asked atomic.Int64
	c, err := New(filepath.Join(t.TempDir(), "copies"), m, Options{Budget: 1 << 20, Chunk: 1000, MinFree: 0.05,
		DiskFree: func(_ string, minFree float64) (int64, int64, error) {
			asked.Add(1)
			return free, int64(minFree * size), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := c.Acquire(ctx, obj("a", a)); done <- err }() // 3,000 being written
	// The copy counts in Inflight before it opens its source: wait for both.
	waitFor(t, func() bool { return c.stats.Inflight.Load() == 1 && m.opens.Load() == 1 })
	if _, _, err := c.Acquire(context.Background(), obj("b", b)); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("a copy past the floor beside one being written: %v, want ErrNoRoom", err)
	}
	if n := m.opens.Load(); n != 1 {
		t.Fatalf("%d objects read, want only the one within the floor", n)
	}
	close(m.gate)
	cancel()
	<-done
	waitFor(t, func() bool { return c.stats.Inflight.Load() == 0 })
	// Written, a copy counts in the free space the file system reports.
	acquire(t, c, obj("b", b), b)()
	// A file with a copy opens without asking the file system.
	n := asked.Load()
	acquire(t, c, obj("b", b), b)()
	if asked.Load() != n {
		t.Fatal("an open of a file with a copy asked for the free space")
	}
}

// A copy of a new version of an object removes the unpinned copy of the
// old one: the listing that gave the new version says the old is gone.
func TestOldVersionRemoved(t *testing.T) {
	old, cur := payload(3000, 1), payload(4000, 2)
	m := &memOpener{data: map[string][]byte{"a": old}}
	c, dir := newT(t, m, 1<<20)
	acquire(t, c, obj("a", old), old)()
	m.data["a"] = cur
	acquire(t, c, store.Object{Key: "a", ETag: "e-new", Size: int64(len(cur))}, cur)()
	files, _ := os.ReadDir(dir)
	if len(files) != 1 || c.stats.Bytes.Load() != int64(len(cur)) {
		t.Fatalf("%d files holding %d bytes after a new version's copy; want the new one alone, %d bytes", len(files), c.stats.Bytes.Load(), len(cur))
	}
}

// A waiter that gives up does not stop the copy for the others; Close
// removes every copy, and a file acquired before stays readable.
func TestCancelAndClose(t *testing.T) {
	a := payload(3000, 1)
	m := &memOpener{data: map[string][]byte{"a": a}, gate: make(chan struct{})}
	dir := filepath.Join(t.TempDir(), "copies")
	c, err := New(dir, m, Options{Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, _, err := c.Acquire(ctx, obj("a", a)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline: %v", err)
	}
	close(m.gate)
	f, release, err := c.Acquire(context.Background(), obj("a", a))
	if err != nil {
		t.Fatal(err)
	}
	if m.opens.Load() != 1 {
		t.Errorf("opens %d, want 1: the copy went on after its first waiter left", m.opens.Load())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, indexName)); err != nil {
		t.Errorf("index after Close: %v", err)
	}
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, a) {
		t.Errorf("file acquired before Close: %d bytes, %v", len(got), err)
	}
	release()
	if _, _, err := c.Acquire(context.Background(), obj("a", a)); err == nil {
		t.Error("Acquire after Close succeeded")
	}
}

// New empties a directory an earlier mount left.
func TestNewClearsLeftovers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "copies")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tmp-1"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(dir, &memOpener{}, Options{Budget: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Errorf("%d files left from before", len(files))
	}
}

// A clean Close leaves the copies for the next Copies of the same source,
// which checks each against its hash at first use; anything else leaves it
// nothing to trust.
func TestKeptForTheNextCopies(t *testing.T) {
	a, b := payload(3000, 1), payload(2000, 2)
	flip := func(t *testing.T, dir string) { // same size, one byte changed
		p := filepath.Join(dir, fileName("a", "e-a"))
		d, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		d[1234] ^= 0xff
		if err := os.WriteFile(p, d, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		damage    func(t *testing.T, dir string)
		source    string
		budget    int64
		wantKept  int   // copies adopted by New
		wantBytes int64 // and their bytes
		wantOpens int64 // reads of the store to acquire a
		adopted   int64
		rejected  int64
	}{
		{name: "clean close", wantKept: 2, wantBytes: 5000, adopted: 1},
		{name: "a copy altered", damage: flip, wantKept: 2, wantBytes: 5000, wantOpens: 1, rejected: 1},
		{name: "a copy cut short", damage: func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, fileName("a", "e-a")), 100); err != nil {
				t.Fatal(err)
			}
		}, wantKept: 1, wantBytes: 2000, wantOpens: 1},
		{name: "no index, as after a crash", damage: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, indexName)); err != nil {
				t.Fatal(err)
			}
		}, wantOpens: 1},
		{name: "a garbled index", damage: func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, indexName), []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantOpens: 1},
		{name: "another store", source: "other", wantOpens: 1},
		{name: "a smaller budget keeps the most recent", budget: 4000, wantKept: 1, wantBytes: 2000, wantOpens: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "copies")
			m := &memOpener{data: map[string][]byte{"a": a, "b": b}}
			c, err := New(dir, m, Options{Budget: 1 << 20, Source: "s", Chunk: 1000})
			if err != nil {
				t.Fatal(err)
			}
			acquire(t, c, obj("a", a), a)()
			acquire(t, c, obj("b", b), b)() // b is the most recently used
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.damage != nil {
				tc.damage(t, dir)
			}
			source, budget := "s", int64(1<<20)
			if tc.source != "" {
				source = tc.source
			}
			if tc.budget != 0 {
				budget = tc.budget
			}
			var stats Stats
			var made atomic.Int64 // Made calls: one per copy made, none for one adopted
			m2 := &memOpener{data: m.data}
			var logs testenv.SyncBuffer
			c2, err := New(dir, m2, Options{Budget: budget, Source: source, Chunk: 1000, Stats: &stats,
				Made: func(store.Object) { made.Add(1) }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			// Removing another store's copies is said, not silent.
			if warned := strings.Contains(logs.String(), "came from another store"); warned != (tc.source != "") {
				t.Errorf("warned of another store's copies: %v; logs:\n%s", warned, logs.String())
			}
			t.Cleanup(func() { c2.Close() })
			if files, _ := os.ReadDir(dir); len(files) != tc.wantKept || stats.Bytes.Load() != tc.wantBytes {
				t.Fatalf("%d files kept (%d bytes counted), want %d", len(files), stats.Bytes.Load(), tc.wantKept)
			}
			acquire(t, c2, obj("a", a), a)()
			acquire(t, c2, obj("a", a), a)()
			// A kept copy made again counts as being written while it is,
			// no longer: the disk's floor is kept from that count.
			c2.mu.Lock()
			writing := c2.writing
			c2.mu.Unlock()
			if writing != 0 {
				t.Errorf("%d bytes counted as being written once every copy settled, want 0", writing)
			}
			if m2.opens.Load() != tc.wantOpens || made.Load() != tc.wantOpens || stats.Adopted.Load() != tc.adopted || stats.Rejected.Load() != tc.rejected {
				t.Errorf("store opens %d, Made calls %d, adopted %d, rejected %d; want %d, %d, %d, %d",
					m2.opens.Load(), made.Load(), stats.Adopted.Load(), stats.Rejected.Load(), tc.wantOpens, tc.wantOpens, tc.adopted, tc.rejected)
			}
			// A changed object never gets the old version's copy.
			changed := store.Object{Key: "a", ETag: "e-a2", Size: int64(len(b))}
			m2.data = map[string][]byte{"a": b}
			acquire(t, c2, changed, b)()
		})
	}
}

// TestCloseStopsCheck: Close stops the check of a copy kept from the last
// mount as it stops a copy being made, and the copy is not called damaged:
// a hash of a large copy takes seconds.
func TestCloseStopsCheck(t *testing.T) {
	big := payload(16<<20, 3)
	dir := filepath.Join(t.TempDir(), "copies")
	m := &memOpener{data: map[string][]byte{"big": big}}
	c, err := New(dir, m, Options{Budget: 1 << 30, Source: "s", Chunk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, c, obj("big", big), big)()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var stats Stats
	// One-byte reads: the check of 16 MiB takes many seconds.
	c2, err := New(dir, m, Options{Budget: 1 << 30, Source: "s", Chunk: 1, Stats: &stats})
	if err != nil {
		t.Fatal(err)
	}
	acquired := make(chan error, 1)
	go func() {
		_, release, err := c2.Acquire(context.Background(), obj("big", big))
		if err == nil {
			release()
		}
		acquired <- err
	}()
	for stats.Inflight.Load() == 0 { // the check started
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	c2.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %s during the check of a kept copy", took)
	}
	if err := <-acquired; err == nil {
		t.Error("Acquire during Close got the copy whose check was stopped")
	}
	if stats.Rejected.Load() != 0 {
		t.Errorf("a copy whose check Close stopped was counted damaged (%d)", stats.Rejected.Load())
	}
	if c2.writing != 0 { // Close waited for the check
		t.Errorf("%d bytes counted as being written after a stopped check, want 0", c2.writing)
	}
	// It stays for the next Copies, which checks it again and uses it.
	var stats3 Stats
	m3 := &memOpener{data: m.data}
	c3, err := New(dir, m3, Options{Budget: 1 << 30, Source: "s", Chunk: 1 << 20, Stats: &stats3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c3.Close() })
	acquire(t, c3, obj("big", big), big)()
	if stats3.Adopted.Load() != 1 || m3.opens.Load() != 0 {
		t.Errorf("after a stopped check: adopted %d, store opens %d; want the kept copy adopted, no read of the store", stats3.Adopted.Load(), m3.opens.Load())
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}
