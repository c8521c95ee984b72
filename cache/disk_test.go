package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dataccel/dataccel/internal/testenv"
)

// segFiles lists the files in the segment directory of dir with their sizes.
func segFiles(t testing.TB, dir string) map[string]int64 {
	t.Helper()
	files := map[string]int64{}
	ents, err := os.ReadDir(filepath.Join(dir, segDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return files
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Join(dir, segDirName, e.Name())] = fi.Size()
	}
	return files
}

func totalBytes(files map[string]int64) (n int64) {
	for _, s := range files {
		n += s
	}
	return n
}

// quiesce waits for the writes queued so far and for the compactor to be
// idle.
func (d *Disk) quiesce() {
	for {
		d.Flush()
		d.mu.Lock()
		idle := d.kicks == 0 && !d.compacting
		d.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// checkAccounting checks the invariants of the segment bookkeeping on an
// idle Disk: per segment size = live + dead, live = the bytes of its index
// entries, the gauges match, and the files are as long as the segments say.
func checkAccounting(t testing.TB, d *Disk) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	live := map[*segment]int64{}
	for id, loc := range d.index {
		if loc.seg.removed {
			t.Fatalf("index entry %x points into a removed segment", id)
		}
		if !d.policy.Contains(id) {
			t.Fatalf("index entry %x not in the policy", id)
		}
		live[loc.seg] += loc.n
	}
	var dead, size int64
	for _, s := range d.segs {
		if s.size != s.live+s.dead+s.pendBytes || s.pending != 0 {
			t.Fatalf("segment %d: size %d != live %d + dead %d + pending %d (%d appends)", s.seq, s.size, s.live, s.dead, s.pendBytes, s.pending)
		}
		if s.live != live[s] {
			t.Fatalf("segment %d: live %d, index says %d", s.seq, s.live, live[s])
		}
		if fi, err := os.Stat(s.path); err != nil || fi.Size() != s.size {
			t.Fatalf("segment %d: file %v %v, want %d bytes", s.seq, fi, err, s.size)
		}
		dead += s.dead
		size += s.size
	}
	if dead != d.dead {
		t.Fatalf("dead bytes %d, segments say %d", d.dead, dead)
	}
	if d.unwritten != 0 {
		t.Fatalf("%d bytes admitted and never written or dropped", d.unwritten)
	}
	if len(d.index) != d.policy.Len() || d.stats.DiskEntries.Load() != int64(len(d.index)) {
		t.Fatalf("%d index entries, policy %d, gauge %d", len(d.index), d.policy.Len(), d.stats.DiskEntries.Load())
	}
	if g := d.stats.DiskBytes.Load(); g != size {
		t.Fatalf("DiskBytes gauge %d, segments hold %d", g, size)
	}
}

func fillDisk(d *Disk, n int) []Key {
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = testKey(keyName(i), int64(i))
		d.Put(keys[i], blockFor(keys[i], sizeFor(keys[i])))
	}
	d.Flush()
	return keys
}

// encodeRecord returns the record of b under k, stored raw.
func encodeRecord(k Key, b []byte) []byte {
	hdr, payload, _ := new(compressor).encodeBlock(k, b, false)
	return append(hdr, payload...)
}

// writeSegment writes segment seq of dir by hand.
func writeSegment(t testing.TB, dir string, seq uint64, recs ...[]byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, segDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	buf := segmentHeader(seq, 0)
	for _, r := range recs {
		buf = append(buf, r...)
	}
	p := filepath.Join(dir, segDirName, segmentName(seq))
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeMarker(t testing.TB, dir, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MarkerName), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Restart keeps every block, written by two writers into their own
// segments.
func TestDiskRestart(t *testing.T) {
	dir := t.TempDir()
	opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, QueueLen: 512, MinFreeFraction: -1, Writers: 2}
	d := openDisk(t, opts)
	keys := fillDisk(d, 200)
	if w := d.stats.DiskWrites.Load(); w != 200 {
		t.Fatalf("wrote %d blocks, want 200", w)
	}
	checkAccounting(t, d)
	d.mu.Lock()
	used := map[*segment]bool{}
	for _, loc := range d.index {
		used[loc.seg] = true
	}
	d.mu.Unlock()
	if len(used) < 2 {
		t.Fatalf("200 blocks went to %d segment(s), want one per writer", len(used))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	files := segFiles(t, dir)
	stats := new(Stats)
	opts.Stats = stats
	d2 := openDisk(t, opts)
	if n := stats.DiskEntries.Load(); n != 200 {
		t.Fatalf("reopened index has %d entries, want 200", n)
	}
	if got, want := stats.DiskBytes.Load(), totalBytes(files); got != want {
		t.Fatalf("reopened DiskBytes %d, segment files hold %d", got, want)
	}
	for _, k := range keys {
		b, ok := d2.Get(k)
		if !ok {
			t.Fatalf("%v not served after restart", k)
		}
		checkExact(t, k, b, sizeFor(k))
	}
	if s := stats.Snapshot(); s.DiskHits != 200 || s.DiskWrites != 0 || s.DiskCorruptions != 0 {
		t.Fatalf("after restart: %+v", s)
	}
	// New writes go to new segments: the old ones are never appended to.
	k := testKey("new", 1)
	d2.Put(k, blockFor(k, 5000))
	d2.Flush()
	for p, size := range segFiles(t, dir) {
		if old, ok := files[p]; ok && old != size {
			t.Fatalf("segment %s of the last run grew from %d to %d bytes", p, old, size)
		}
	}
	checkAccounting(t, d2)
}

func TestDiskRefusesForeignAndBusyDirs(t *testing.T) {
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDisk(DiskOptions{Dir: foreign, MaxBytes: 1 << 20}); err == nil {
		t.Fatal("NewDisk used a non-empty directory without the marker")
	}
	if err := PurgeDir(foreign, nil); err == nil {
		t.Fatal("PurgeDir accepted a directory without the marker")
	}
	if _, err := os.Stat(filepath.Join(foreign, "notes.txt")); err != nil {
		t.Fatalf("foreign file touched: %v", err)
	}
	dir := t.TempDir()
	openDisk(t, DiskOptions{Dir: dir, MaxBytes: 1 << 20})
	if d, err := NewDisk(DiskOptions{Dir: dir, MaxBytes: 1 << 20}); err == nil {
		d.Close()
		t.Fatal("a second Disk opened a directory in use")
	}
	if err := PurgeDir(dir, nil); err == nil {
		t.Fatal("PurgeDir purged a directory in use")
	}
	for _, bad := range []DiskOptions{{Dir: "", MaxBytes: 1}, {Dir: dir, MaxBytes: 0}, {Dir: dir, MaxBytes: 1, MinFreeFraction: 1}} {
		if _, err := NewDisk(bad); err == nil {
			t.Errorf("NewDisk(%+v) accepted bad options", bad)
		}
	}
	// A format this version does not know is left alone.
	future := t.TempDir()
	writeMarker(t, future, "dataccel block cache, format 9\n")
	if d, err := NewDisk(DiskOptions{Dir: future, MaxBytes: 1 << 20}); err == nil {
		d.Close()
		t.Fatal("NewDisk used a cache of an unknown format")
	}
	// The lock was released: the directory can be tried again.
	d, err := NewDisk(DiskOptions{Dir: future, MaxBytes: 1 << 20})
	if err == nil {
		d.Close()
	}
	if err == nil || strings.Contains(err.Error(), "in use") {
		t.Fatalf("second try on an unknown format: %v", err)
	}
	if !strings.Contains(err.Error(), "cache purge") {
		t.Errorf("the refusal of an unknown format does not say how to recover: %v", err)
	}
}

// A purge of a directory whose marker names a format this version does not
// know (a newer version's, or a damaged marker) empties it of what a cache
// keeps and marks it as this version's, so that a Disk opens it: the purge
// left the marker as it was, reported success, and every mount still
// refused the directory. Files that are not a cache's stay.
func TestPurgeUnknownFormat(t *testing.T) {
	for _, marker := range []string{"dataccel block cache, format 9\n", "junk\n"} {
		t.Run(strings.TrimSpace(marker), func(t *testing.T) {
			dir := t.TempDir()
			writeMarker(t, dir, marker)
			for _, p := range []string{"segments/x", "segments/" + segmentName(3), StateName, "notes.txt"} {
				p = filepath.Join(dir, p)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if st, err := StatDir(dir); err != nil || st.UnknownFormat != strings.TrimSpace(marker) {
				t.Errorf("stat of the cache before the purge: format %q, %v; want %q", st.UnknownFormat, err, strings.TrimSpace(marker))
			}
			if err := PurgeDir(dir, nil); err != nil {
				t.Fatal(err)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, e := range ents {
				left = append(left, e.Name())
			}
			if segs := segFiles(t, dir); len(segs) != 0 || !slices.Equal(left, []string{MarkerName, "notes.txt", "segments"}) {
				t.Errorf("left after the purge: %v and segments %v, want the marker, notes.txt and an empty segments", left, segs)
			}
			openDisk(t, DiskOptions{Dir: dir, MaxBytes: 1 << 20, MinFreeFraction: -1})
			if st, err := StatDir(dir); err != nil || st.Entries != 0 || st.UnknownFormat != "" {
				t.Errorf("the purged cache holds %+v, %v", st, err)
			}
		})
	}
}

// TestDiskCorruption damages the middle record of a segment of three
// (compressible a and c around random b), or the segment as a whole, then
// reopens: no damaged block is served, the corruption counter says what
// was found, and the intact records stay readable.
func TestDiskCorruption(t *testing.T) {
	type recSpan struct{ off, n int }
	cases := []struct {
		name string
		// damage changes the segment; b is the middle record.
		damage      func(seg []byte, b recSpan) []byte
		served      string // keys still served, of "abc"
		corruptions int64
	}{
		{"magic", func(s []byte, b recSpan) []byte { s[b.off] ^= 0xff; return s }, "a", 1},
		{"rawLength", func(s []byte, b recSpan) []byte { s[b.off+9] ^= 0x01; return s }, "a", 1},
		{"key", func(s []byte, b recSpan) []byte { s[b.off+fixedHeader+2] ^= 0x20; return s }, "a", 1},
		{"headerChecksum", func(s []byte, b recSpan) []byte { s[b.off+b.n-20000-1] ^= 0x04; return s }, "a", 1},
		{"payloadMiddle", func(s []byte, b recSpan) []byte { s[b.off+b.n-10000] ^= 0x01; return s }, "ac", 1},
		{"payloadLast", func(s []byte, b recSpan) []byte { s[b.off+b.n-1] ^= 0x80; return s }, "ac", 1},
		{"zeroed", func(s []byte, b recSpan) []byte { clear(s[b.off : b.off+b.n]); return s }, "a", 1},
		// A write cut short looks like a crash, not a corruption.
		{"truncatedMidRecord", func(s []byte, b recSpan) []byte { return s[:b.off+b.n/2] }, "a", 0},
		{"truncatedMidHeader", func(s []byte, b recSpan) []byte { return s[:b.off+20] }, "a", 0},
		{"garbageAppended", func(s []byte, b recSpan) []byte {
			g := make([]byte, 4000)
			for i := range g {
				g[i] = byte(i*7 + 3)
			}
			return append(s, g...)
		}, "abc", 1},
		{"segmentMagic", func(s []byte, b recSpan) []byte { s[1] ^= 0xff; return s }, "", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			layouts(t, func(t *testing.T, buffered bool) {
				dir := t.TempDir()
				opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, MinFreeFraction: -1, Writers: 1, Buffered: buffered}
				d := openDisk(t, opts)
				keys := []Key{testKey("a", 2), testKey("b", 3), testKey("c", 4)}
				for _, k := range keys {
					d.Put(k, blockFor(k, 20000))
				}
				d.Close()
				files := segFiles(t, dir)
				if len(files) != 1 {
					t.Fatalf("%d segment files, want 1", len(files))
				}
				var path string
				for p := range files {
					path = p
				}
				seg, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				var spans []recSpan
				seq, _ := parseSegmentName(filepath.Base(path))
				f, _ := os.Open(path)
				_, _, why, err := scanSegment(f, seq, int64(len(seg)), func(r recInfo) bool {
					spans = append(spans, recSpan{int(r.off), int(r.recLen)})
					return true
				})
				f.Close()
				if err != nil || why != scanComplete || len(spans) != 3 {
					t.Fatalf("scan of the written segment: %d records, %v, %v", len(spans), why, err)
				}
				if err := os.WriteFile(path, tc.damage(seg, spans[1]), 0o644); err != nil {
					t.Fatal(err)
				}
				stats := new(Stats)
				opts.Stats = stats
				var wc warnCounter
				opts.Logger = slog.New(&wc)
				d2 := openDisk(t, opts)
				for i, k := range keys {
					b, ok := d2.Get(k)
					want := strings.Contains(tc.served, string("abc"[i]))
					if ok {
						checkExact(t, k, b, 20000)
					}
					if ok != want {
						t.Fatalf("block %s served=%v, want %v", k.Object, ok, want)
					}
				}
				if c := stats.DiskCorruptions.Load(); c != tc.corruptions {
					t.Fatalf("corruption counter %d, want %d", c, tc.corruptions)
				}
				// A record that fails its check when read (the payload's
				// cases) is a warning: the disk may be failing. One the
				// scan at open finds ends a segment, as a crash may.
				if want := int64(map[bool]int{true: 1}[strings.HasPrefix(tc.name, "payload")]); wc.warns.Load() != want {
					t.Fatalf("%d warnings, want %d", wc.warns.Load(), want)
				}
				opts.Logger = nil
				checkAccounting(t, d2)
				if tc.served == "" {
					if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("segment with no valid record kept: %v", err)
					}
				}
				// A re-put after the corruption is served again.
				d2.Put(keys[1], blockFor(keys[1], 20000))
				d2.Flush()
				if b, ok := d2.Get(keys[1]); !ok || !bytes.Equal(b, blockFor(keys[1], 20000)) {
					t.Fatal("re-put block not served")
				}
				// A corrupt record dropped by Get stays dropped across a clean
				// restart (the dead list), and is not counted again.
				d2.Close()
				stats3 := new(Stats)
				opts.Stats = stats3
				d3 := openDisk(t, opts)
				for i, k := range keys {
					if b, ok := d3.Get(k); ok {
						checkExact(t, k, b, 20000)
					} else if i == 1 || strings.Contains(tc.served, string("abc"[i])) {
						t.Fatalf("block %s lost across a restart", k.Object)
					}
				}
				if c := stats3.DiskCorruptions.Load(); c > 0 && tc.served == "ac" {
					t.Fatalf("a dropped record was found corrupt again after a restart (%d)", c)
				}
			})
		})
	}
}

// A hash collision (two keys, one index slot) serves neither wrong block.
func TestDiskKeyMismatch(t *testing.T) {
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, MinFreeFraction: -1, Stats: stats})
	a, b := testKey("a", 1), testKey("b", 1)
	d.Put(a, blockFor(a, 5000))
	d.Flush()
	d.mu.Lock()
	loc := d.index[keyHash(a)]
	delete(d.index, keyHash(a))
	e, _ := d.policy.Remove(keyHash(a))
	d.index[keyHash(b)] = loc
	d.policy.Restore(keyHash(b), e.Size)
	d.mu.Unlock()
	if got, ok := d.Get(b); ok {
		t.Fatalf("Get(b) served a's record (%d bytes)", len(got))
	}
	if c := stats.DiskCorruptions.Load(); c != 1 {
		t.Fatalf("corruption counter %d, want 1", c)
	}
	checkAccounting(t, d)
}

func TestDiskBound(t *testing.T) {
	const maxBytes = 256 << 10
	dir := t.TempDir()
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: maxBytes, Compress: false, QueueLen: 1024, MinFreeFraction: -1, Stats: stats})
	const n, size = 100, 16 << 10
	var keys []Key
	for i := 0; i < n; i++ {
		k := testKey(keyName(i), 1) // odd block: random bytes
		keys = append(keys, k)
		// Interleave lookups so the policy's clock runs and stale blocks
		// can be evicted.
		d.Get(k)
		d.Put(k, blockFor(k, size))
		if i%10 == 0 {
			d.Flush()
		}
	}
	d.quiesce()
	total := totalBytes(segFiles(t, dir))
	// Slack: one record, and the headers of the writers' segments (a page
	// each with direct I/O).
	slack := alignUp(size+1024, d.align) + int64(d.opts.Writers)*firstRecord(d.align)
	if total > maxBytes+slack {
		t.Fatalf("%d bytes on disk, bound %d + %d (one block, the segment headers)", total, maxBytes, slack)
	}
	if got := stats.DiskBytes.Load(); got != total {
		t.Fatalf("DiskBytes gauge %d, files hold %d", got, total)
	}
	checkAccounting(t, d)
	served := 0
	for _, k := range keys {
		if b, ok := d.Get(k); ok {
			served++
			checkExact(t, k, b, size)
		}
	}
	if served == 0 || served == n {
		t.Fatalf("served %d of %d blocks, want some but not all", served, n)
	}
	if stats.DiskRejected.Load() == 0 {
		t.Fatal("no admission was rejected although the data is 6x the bound")
	}
	t.Logf("served %d, evicted %d, rejected %d, %d segment bytes", served, stats.DiskEvictions.Load(), stats.DiskRejected.Load(), total)
}

// recordSizes returns the record length of every live record in dir, by id.
func recordSizes(t testing.TB, dir string) map[uint64]int64 {
	t.Helper()
	found, err := scanSegments(filepath.Join(dir, segDirName), false)
	if err != nil {
		t.Fatal(err)
	}
	resolve(found, readDeadList(dir))
	sizes := map[uint64]int64{}
	for _, sc := range found {
		for _, r := range sc.recs {
			if !r.dead {
				sizes[r.id] = r.n
			}
		}
	}
	return sizes
}

func TestDiskCompression(t *testing.T) {
	dir := t.TempDir()
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, Stats: stats, MinFreeFraction: -1})
	text, random := testKey("text", 0), testKey("random", 1)
	const n = 256 << 10
	d.Put(text, blockFor(text, n))
	d.Put(random, blockFor(random, n))
	d.Flush()
	sizes := recordSizes(t, dir)
	if s := sizes[keyHash(text)]; s == 0 || s > n/2 {
		t.Errorf("compressible block stored in %d bytes, want < %d", s, n/2)
	}
	if s := sizes[keyHash(random)]; s < n {
		t.Errorf("random block stored in %d bytes, want raw (>= %d)", s, n)
	}
	for _, k := range []Key{text, random} {
		b, ok := d.Get(k)
		if !ok {
			t.Fatalf("%v missed", k)
		}
		checkExact(t, k, b, n)
	}
	if stats.DiskSavedBytes.Load() < n/2 {
		t.Errorf("saved bytes %d, want >= %d", stats.DiskSavedBytes.Load(), n/2)
	}
	st, err := StatDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 2 || st.Compressed != 1 || st.RawBytes != 2*n || st.SavedBytes < n/2 ||
		st.DiskBytes != totalBytes(segFiles(t, dir)) || st.Unreadable != 0 || st.TempFiles != 0 {
		t.Fatalf("StatDir = %+v", st)
	}
	d.Close()
	alsoRan := false
	err = PurgeDir(dir, func() error {
		// What the caller purges besides runs under the lock: a Disk
		// opened now (a mount starting) does not take the directory.
		alsoRan = true
		d, err := NewDisk(DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1})
		if err == nil {
			d.Close()
			return errors.New("a Disk opened the directory while it was purged")
		}
		if !strings.Contains(err.Error(), "in use by another process") {
			return fmt.Errorf("a Disk opened while purging: %w, want the directory in use", err)
		}
		return nil
	})
	if err != nil || !alsoRan {
		t.Fatalf("PurgeDir: %v (its also ran: %v)", err, alsoRan)
	}
	if left := segFiles(t, dir); len(left) != 0 {
		t.Fatalf("PurgeDir left %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil {
		t.Fatalf("PurgeDir removed the marker: %v", err)
	}
	if st, err := StatDir(dir); err != nil || st.Entries != 0 || st.DiskBytes != 0 {
		t.Fatalf("StatDir after purge = %+v, %v", st, err)
	}
	// The purged directory opens as an empty cache.
	d2 := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Stats: new(Stats)})
	if n := d2.stats.DiskEntries.Load(); n != 0 {
		t.Fatalf("purged cache opens with %d entries", n)
	}
}

// StatDir counts live records only: evicted ones (in the dead list of a
// clean Close) and superseded ones are not entries, but their bytes are on
// disk.
func TestStatDirDeadRecords(t *testing.T) {
	dir := t.TempDir()
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1})
	keys := fillDisk(d, 20)
	evict(t, d, keys[:5])
	d.quiesce()
	d.Close()
	st, err := StatDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 15 || st.DiskBytes != totalBytes(segFiles(t, dir)) {
		t.Fatalf("StatDir = %+v, want 15 entries", st)
	}
	// Leftovers of a format 1 cache and stray files count as temp files.
	writeSegment(t, dir, 999) // a segment with no record: fine
	os.WriteFile(filepath.Join(dir, segDirName, "stray"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(dir, "3f"), 0o755)
	os.WriteFile(filepath.Join(dir, "3f", "3f00000000000000-100"), []byte("x"), 0o644)
	if st, err = StatDir(dir); err != nil || st.TempFiles != 2 || st.Entries != 15 {
		t.Fatalf("StatDir with leftovers = %+v, %v", st, err)
	}
	if err := PurgeDir(dir, nil); err != nil {
		t.Fatal(err)
	}
	if st, err = StatDir(dir); err != nil || st != (DirStat{}) {
		t.Fatalf("StatDir after purge = %+v, %v", st, err)
	}
}

// evict makes the policy evict keys, as it would stale blocks.
func evict(t testing.TB, d *Disk, keys []Key) {
	t.Helper()
	d.mu.Lock()
	var drop []*segment
	for _, k := range keys {
		e, ok := d.policy.Remove(keyHash(k))
		if !ok {
			d.mu.Unlock()
			t.Fatalf("%v not resident", k)
		}
		drop = d.evictLocked([]Entry{e}, drop)
	}
	d.publish()
	d.mu.Unlock()
	d.removeSegments(drop)
}

// A writer stores a block raw, without trying compression, while the
// write queue holds a quarter of its bytes or more (the block being written
// counts): compressing would cost the writer the time it needs to keep up.
func TestDiskCompressionYieldsToBacklog(t *testing.T) {
	const n = 256 << 10
	for _, tc := range []struct {
		name       string
		queueBytes int64
		compressed bool
	}{
		{"queue nearly empty", DefaultQueueBytes, true},
		{"the block alone fills a quarter of the queue", 4 * n, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stats := new(Stats)
			d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, QueueBytes: tc.queueBytes,
				Stats: stats, MinFreeFraction: -1})
			k := testKey("text", 0)
			d.Put(k, blockFor(k, n))
			d.Flush()
			s := recordSizes(t, dir)[keyHash(k)]
			if compressed := s < n/2; compressed != tc.compressed {
				t.Fatalf("stored in %d bytes, want compressed %v", s, tc.compressed)
			}
			if skipped := stats.DiskCompressSkipped.Load(); (skipped == 1) == tc.compressed {
				t.Fatalf("%d compressions skipped counted", skipped)
			}
			if b, ok := d.Get(k); !ok {
				t.Fatal("missed")
			} else {
				checkExact(t, k, b, n)
			}
		})
	}
}

func TestDiskCompressionOff(t *testing.T) {
	// Compression off stores compressible data raw.
	dir := t.TempDir()
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1})
	k := testKey("text", 0)
	d.Put(k, blockFor(k, 64<<10))
	d.Flush()
	if s := recordSizes(t, dir)[keyHash(k)]; s < 64<<10 {
		t.Fatalf("block stored in %d bytes with compression off", s)
	}
}

func TestDiskQueueFullDrops(t *testing.T) {
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 1 << 30, QueueLen: 1, Writers: 1, Stats: stats, Sync: true, MinFreeFraction: -1})
	const n = 200
	blocks := make([][]byte, n)
	for i := range blocks {
		blocks[i] = blockFor(testKey(keyName(i), 1), 64<<10)
	}
	// Puts in a tight loop outrun one writer that fdatasyncs each block.
	for i := 0; i < n; i++ {
		d.Put(testKey(keyName(i), 1), blocks[i])
	}
	d.Flush()
	s := stats.Snapshot()
	if s.DiskDropped == 0 {
		t.Fatal("no write dropped with a queue of one")
	}
	if s.DiskDropped+s.DiskWrites != n {
		t.Fatalf("dropped %d + written %d != %d puts", s.DiskDropped, s.DiskWrites, n)
	}
}

func TestDiskUnwritableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plainfile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var wc warnCounter
	stats := new(Stats)
	d, err := NewDisk(DiskOptions{Dir: filepath.Join(file, "cache"), MaxBytes: 1 << 20, Logger: slog.New(&wc), Stats: stats})
	if err != nil {
		t.Fatalf("NewDisk under a file failed instead of degrading: %v", err)
	}
	defer d.Close()
	k := testKey("x", 0)
	for i := 0; i < 3; i++ {
		d.Put(k, blockFor(k, 1000))
		if _, ok := d.Get(k); ok {
			t.Fatal("disabled disk hit")
		}
	}
	d.Flush()
	if !d.Disabled() || stats.DiskErrors.Load() == 0 || wc.warns.Load() != 1 {
		t.Fatalf("disabled=%v errors=%d warnings=%d, want true >0 1", d.Disabled(), stats.DiskErrors.Load(), wc.warns.Load())
	}
	if err := d.Err(); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("Err() = %v, want the error that turned writes off (ENOTDIR)", err)
	}
}

// mountTmpfs mounts a small tmpfs at a new directory (as root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.Missing(t, "cannot mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// mountExt4 mounts a small ext4 image (a file system with direct I/O) at
// a new directory (as root, with mkfs.ext4).
func mountExt4(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to mount an ext4 image")
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	dir := t.TempDir()
	for _, cmd := range [][]string{
		{"truncate", "-s", size, img},
		{"mkfs.ext4", "-q", "-F", "-O", "^has_journal", img},
		{"mount", "-o", "loop", img, dir},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			testenv.Missing(t, "cannot mount an ext4 image (%s): %v %s", cmd[0], err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// A read-only file system turns the tier into a miss path with one
// warning; a full one (here filled past what statfs says: other writers,
// the file system's overhead) refuses blocks as a full cache does, with one
// warning, and stays on. On tmpfs (writes through the page cache) and on
// ext4 (direct I/O).
func TestDiskFullAndReadOnly(t *testing.T) {
	for _, fsys := range []struct {
		name   string
		mount  func(t *testing.T) string
		direct bool
	}{
		{"tmpfs", func(t *testing.T) string { return mountTmpfs(t, "1m") }, false},
		{"ext4", func(t *testing.T) string { return mountExt4(t, "2M") }, true},
	} {
		t.Run(fsys.name, func(t *testing.T) { testDiskFullAndReadOnly(t, fsys.mount, fsys.direct) })
	}
}

func testDiskFullAndReadOnly(t *testing.T, mount func(t *testing.T) string, direct bool) {
	cases := []struct {
		name    string
		after   func(t *testing.T, d *Disk, dir string) // after open, before the writes
		failing bool                                    // the tier turns writes off
	}{
		{"ENOSPC", func(_ *testing.T, d *Disk, _ string) {
			d.freeSpace = func(string, float64) (int64, int64, error) { return 1 << 40, 0, nil }
		}, false},
		{"EROFS", func(t *testing.T, _ *Disk, dir string) {
			if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
				testenv.Missing(t, "cannot remount read-only: %v %s", err, out)
			}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := mount(t)
			var wc warnCounter
			stats := new(Stats)
			opts := DiskOptions{Dir: filepath.Join(dir, "c"), MaxBytes: 1 << 30, MinFreeFraction: -1,
				QueueLen: 256, Logger: slog.New(&wc), Stats: stats}
			d, err := NewDisk(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			if d.direct.Load() != direct {
				t.Fatalf("direct I/O %v, want %v", d.direct.Load(), direct)
			}
			tc.after(t, d, dir)
			keys, served := putFortyBlocks(t, d)
			if tc.failing && (!d.Disabled() || stats.DiskErrors.Load() == 0 || wc.warns.Load() != 1) {
				t.Fatalf("disabled=%v errors=%d warnings=%d, want true >0 1", d.Disabled(), stats.DiskErrors.Load(), wc.warns.Load())
			}
			if !tc.failing && (d.Disabled() || stats.DiskErrors.Load() != 0 || stats.DiskRejected.Load() == 0 || wc.warns.Load() != 1 || served == 0) {
				t.Fatalf("disabled=%v errors=%d rejected=%d warnings=%d served=%d; want false 0 >0 1 >0",
					d.Disabled(), stats.DiskErrors.Load(), stats.DiskRejected.Load(), wc.warns.Load(), served)
			}
			d.quiesce()
			checkAccounting(t, d)
			d.Close()
			// Reopened, what was written is served and the write cut short
			// by the error is not a corruption.
			stats2 := new(Stats)
			opts.Stats, opts.Logger = stats2, slog.New(slog.DiscardHandler)
			d2 := openDisk(t, opts)
			served2 := 0
			for _, k := range keys {
				if b, ok := d2.Get(k); ok {
					served2++
					checkExact(t, k, b, 64<<10)
				}
			}
			if served2 != served || stats2.DiskCorruptions.Load() != 0 {
				t.Fatalf("served %d before and %d after a reopen; %d corruptions", served, served2, stats2.DiskCorruptions.Load())
			}
		})
	}
}

// The free-space floor stops writes before the file system is full, with no
// error, through the page cache (tmpfs) and with direct I/O (ext4); with no
// floor (--cache-min-free 0) the free space itself stops them, and the
// tier stays on (a write past what statfs said may warn once).
func TestDiskFreeSpaceFloor(t *testing.T) {
	for name, floor := range map[string]float64{"half free": 0.5, "no floor": -1} {
		t.Run(name, func(t *testing.T) {
			t.Run("tmpfs", func(t *testing.T) { testDiskFreeSpaceFloor(t, mountTmpfs(t, "2m"), floor) })
			t.Run("ext4", func(t *testing.T) { testDiskFreeSpaceFloor(t, mountExt4(t, "4M"), floor) })
		})
	}
}

func testDiskFreeSpaceFloor(t *testing.T, dir string, floor float64) {
	stats := new(Stats)
	var wc warnCounter
	d, err := NewDisk(DiskOptions{Dir: filepath.Join(dir, "c"), MaxBytes: 1 << 30, MinFreeFraction: floor,
		QueueLen: 256, Logger: slog.New(&wc), Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for i := 0; i < 80; i++ { // 5 MiB: more than either file system holds
		k := testKey(keyName(i), 1)
		d.Put(k, blockFor(k, 64<<10))
	}
	d.Flush()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := float64(st.Bavail) / float64(st.Blocks)
	if floor > 0 && free < floor-float64(70<<10)/float64(2<<20) {
		t.Fatalf("free fraction %.2f below the %v floor by more than a block", free, floor)
	}
	warns := int64(0)
	if floor < 0 {
		warns = min(wc.warns.Load(), 1)
	}
	if stats.DiskErrors.Load() != 0 || d.Disabled() || wc.warns.Load() != warns || stats.DiskRejected.Load() == 0 {
		t.Fatalf("errors=%d disabled=%v warnings=%d rejected=%d, want 0 false %d >0",
			stats.DiskErrors.Load(), d.Disabled(), wc.warns.Load(), stats.DiskRejected.Load(), warns)
	}
}

const (
	crashEnv      = "DATACCEL_CACHE_CRASH_DIR"
	crashRoundEnv = "DATACCEL_CACHE_CRASH_ROUND"
)

// crashKeys is the key space the crash child writes.
const crashKeys = 300

// crashKey is key i of crash round r; each round uses a new ETag so that
// every child has new blocks to write.
func crashKey(r, i int) Key {
	return Key{Object: keyName(i), ETag: "e" + strconv.Itoa(r), Block: int64(i)}
}

func crashSize(k Key) int {
	if k.Block%7 == 0 {
		return 256 << 10 // large blocks make a kill during a write likely
	}
	return sizeFor(k)
}

// TestHelperProcess is the crash child: it writes blocks until killed. The
// cache is small, so blocks are evicted and segments compacted all along.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("helper for TestDiskCrash")
	}
	d, err := NewDisk(DiskOptions{Dir: dir, MaxBytes: 2 << 20, Compress: true, QueueLen: 8, MinFreeFraction: -1, Sync: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		os.Exit(2)
	}
	round, _ := strconv.Atoi(os.Getenv(crashRoundEnv))
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 3))
	for {
		k := crashKey(round, rng.IntN(crashKeys))
		if b, ok := d.Get(k); ok && !bytes.Equal(b, blockFor(k, crashSize(k))) {
			os.Exit(3) // wrong bytes served inside the child
		}
		d.Put(k, blockFor(k, crashSize(k)))
	}
}

func TestDiskCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(42, 42))
	served, torn := 0, 0
	for round := 0; round < 6; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir, crashRoundEnv+"="+strconv.Itoa(round))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(150+rng.IntN(250)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v before the kill", round, err)
		}
		found, err := scanSegments(filepath.Join(dir, segDirName), false)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range found {
			if sc.why == scanCorrupt {
				t.Fatalf("round %d: segment %s holds bytes that are not a record at %d", round, sc.path, sc.end)
			}
			if sc.why == scanTorn || sc.end != sc.size {
				torn++
			}
		}
		stats := new(Stats)
		d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 2 << 20, MinFreeFraction: -1, Stats: stats})
		for r := 0; r <= round; r++ {
			for i := 0; i < crashKeys; i++ {
				k := crashKey(r, i)
				if b, ok := d.Get(k); ok {
					served++
					checkExact(t, k, b, crashSize(k))
				}
			}
		}
		if c := stats.DiskCorruptions.Load(); c != 0 {
			t.Fatalf("round %d: %d corrupt blocks after SIGKILL", round, c)
		}
		d.quiesce()
		checkAccounting(t, d)
		d.Close()
	}
	if served == 0 {
		t.Fatal("no block survived any crash: the test checks nothing")
	}
	t.Logf("%d blocks served byte-exact across 6 SIGKILLs; %d segments ended in a torn record", served, torn)
}

// makeFakeCache creates a cache dir with n records spread over segments of
// about segBytes. With sparse, each record claims a payload of payloadLen
// bytes that is a hole in the file (open reads headers only, so this
// measures opening a cache of that size without writing it); otherwise the
// payloads are real blocks of the keys fakeKey(i).
func makeFakeCache(t testing.TB, dir string, n, payloadLen int, segBytes int64, sparse bool) {
	t.Helper()
	writeMarker(t, dir, markerContent)
	if err := os.MkdirAll(filepath.Join(dir, segDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	var (
		f   *os.File
		off int64
		seq uint64
	)
	closeSeg := func() {
		if f == nil {
			return
		}
		if err := f.Truncate(off); err != nil {
			t.Fatal(err)
		}
		f.Close()
		f = nil
	}
	for i := 0; i < n; i++ {
		if f == nil {
			seq++
			var err error
			f, err = os.Create(filepath.Join(dir, segDirName, segmentName(seq)))
			if err != nil {
				t.Fatal(err)
			}
			f.Write(segmentHeader(seq, 0))
			off = segHeaderLen
		}
		k := fakeKey(i)
		var rec []byte
		if sparse {
			hdr, _, _ := new(compressor).encodeBlock(k, make([]byte, payloadLen), false)
			rec = hdr
		} else {
			rec = encodeRecord(k, blockFor(k, payloadLen))
		}
		if _, err := f.WriteAt(rec, off); err != nil {
			t.Fatal(err)
		}
		off += int64(len(rec))
		if sparse {
			off += int64(payloadLen)
		}
		if off >= segBytes {
			closeSeg()
		}
	}
	closeSeg()
}

func fakeKey(i int) Key { return testKey("fake/"+strconv.Itoa(i), 1) }

// Many entries reopen from their record headers.
func TestDiskReopenManyEntries(t *testing.T) {
	dir := t.TempDir()
	const n = 3000
	makeFakeCache(t, dir, n, 1000, 1<<20, false)
	stats := new(Stats)
	start := time.Now()
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 1 << 40, Stats: stats, MinFreeFraction: -1})
	t.Logf("opened %d entries in %v", n, time.Since(start))
	if got := stats.DiskEntries.Load(); got != n {
		t.Fatalf("%d entries loaded, want %d", got, n)
	}
	for i := 0; i < n; i += 97 {
		k := fakeKey(i)
		b, ok := d.Get(k)
		if !ok {
			t.Fatalf("%v missed", k)
		}
		checkExact(t, k, b, 1000)
	}
	checkAccounting(t, d)
}

// A duplicate id resolves to the newer record: higher seq first, then
// higher offset. The older copies are dead, and a segment left with no
// live record is deleted at open.
func TestDiskDuplicateNewerWins(t *testing.T) {
	dir := t.TempDir()
	writeMarker(t, dir, markerContent)
	k, other := testKey("dup", 1), testKey("other", 1)
	v1, v2, v3 := bytes.Repeat([]byte{1}, 3000), bytes.Repeat([]byte{2}, 3000), bytes.Repeat([]byte{3}, 3000)
	old := writeSegment(t, dir, 7, encodeRecord(k, v1))
	writeSegment(t, dir, 9, encodeRecord(k, v2), encodeRecord(other, v1), encodeRecord(k, v3))
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Stats: stats})
	if b, ok := d.Get(k); !ok || !bytes.Equal(b, v3) {
		t.Fatalf("Get(dup) = %d bytes of %v, %v; want the newest copy", len(b), b[:min(1, len(b))], ok)
	}
	if b, ok := d.Get(other); !ok || !bytes.Equal(b, v1) {
		t.Fatal("other record of the segment lost")
	}
	if n := stats.DiskEntries.Load(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("segment holding only a superseded record kept: %v", err)
	}
	checkAccounting(t, d)
	d.mu.Lock()
	dead := d.dead
	d.mu.Unlock()
	if want := int64(segHeaderLen + len(encodeRecord(k, v2))); dead != want {
		t.Fatalf("dead bytes %d, want %d (segment header and the superseded copy)", dead, want)
	}
}

// Evicted blocks become dead bytes; the compactor copies the live records
// of mostly-dead segments and deletes them. Every live block stays
// readable, during and after, and across a restart.
func TestDiskCompaction(t *testing.T) {
	dir := t.TempDir()
	stats := new(Stats)
	// 1 MiB segments; 120 blocks of ~30 KB fill about 3.5 of them.
	opts := DiskOptions{Dir: dir, MaxBytes: 4 << 20, MinFreeFraction: -1, Stats: stats, Writers: 1, QueueLen: 256}
	d := openDisk(t, opts)
	var keys []Key
	for i := 0; i < 120; i++ {
		k := testKey(keyName(i), 1)
		keys = append(keys, k)
		d.Put(k, blockFor(k, 30000))
	}
	d.quiesce()
	before := totalBytes(segFiles(t, dir))
	segsBefore := segFiles(t, dir)
	// Evict two blocks in three: 2.4 MB dead, over a quarter of 4 MiB.
	var gone, kept []Key
	for i, k := range keys {
		if i%3 != 0 {
			gone = append(gone, k)
		} else {
			kept = append(kept, k)
		}
	}
	evict(t, d, gone)
	d.quiesce()
	after := totalBytes(segFiles(t, dir))
	checkAccounting(t, d)
	d.mu.Lock()
	dead := d.dead
	d.mu.Unlock()
	t.Logf("segment bytes %d -> %d; dead %d; segments %d -> %d", before, after, dead, len(segsBefore), len(segFiles(t, dir)))
	if dead > d.deadLimit() || after > before-(1<<20) {
		t.Fatalf("compaction left %d dead bytes, %d of %d segment bytes", dead, after, before)
	}
	deleted := 0
	for p := range segsBefore {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			deleted++
		}
	}
	if deleted == 0 {
		t.Fatal("no segment was compacted")
	}
	for _, k := range kept {
		b, ok := d.Get(k)
		if !ok {
			t.Fatalf("live block %v lost by compaction", k)
		}
		checkExact(t, k, b, 30000)
	}
	for _, k := range gone {
		if _, ok := d.Get(k); ok {
			t.Fatalf("evicted block %v served", k)
		}
	}
	d.Close()
	stats2 := new(Stats)
	opts.Stats = stats2
	d2 := openDisk(t, opts)
	if n := stats2.DiskEntries.Load(); n != int64(len(kept)) {
		t.Fatalf("reopened with %d entries, want %d", n, len(kept))
	}
	for _, k := range kept {
		b, ok := d2.Get(k)
		if !ok {
			t.Fatalf("%v lost across a restart after compaction", k)
		}
		checkExact(t, k, b, 30000)
	}
	if c := stats2.DiskCorruptions.Load(); c != 0 {
		t.Fatalf("%d corruptions after compaction and restart", c)
	}
	checkAccounting(t, d2)
}

// A write rejected for lack of space while dead bytes exist reclaims a
// mostly-dead segment, even below the quarter threshold.
func TestDiskCompactionOnReject(t *testing.T) {
	dir := t.TempDir()
	opts := DiskOptions{Dir: dir, MaxBytes: 8 << 20, MinFreeFraction: -1, Writers: 1, QueueLen: 256}
	d := openDisk(t, opts)
	var keys []Key
	for i := 0; i < 40; i++ { // 1.2 MB: one full 1 MiB segment and the start of a second
		k := testKey(keyName(i), 1)
		keys = append(keys, k)
		d.Put(k, blockFor(k, 30000))
	}
	d.quiesce()
	// Evict most of the first (sealed) segment: under a quarter of MaxBytes.
	d.mu.Lock()
	var first []Key
	for _, k := range keys {
		if loc := d.index[keyHash(k)]; loc.seg.sealed {
			first = append(first, k)
		}
	}
	d.mu.Unlock()
	if len(first) < 10 {
		t.Fatalf("only %d blocks in a sealed segment", len(first))
	}
	evict(t, d, first[:len(first)*3/4])
	d.quiesce()
	d.mu.Lock()
	deadBefore := d.dead
	d.compactWanted = true // what a rejected write sets
	d.kickLocked(true)
	d.mu.Unlock()
	d.quiesce()
	d.mu.Lock()
	deadAfter := d.dead
	d.mu.Unlock()
	if deadAfter >= deadBefore/2 {
		t.Fatalf("dead bytes %d -> %d after a rejected write", deadBefore, deadAfter)
	}
	checkAccounting(t, d)
	for _, k := range first[len(first)*3/4:] {
		b, ok := d.Get(k)
		if !ok {
			t.Fatalf("%v lost", k)
		}
		checkExact(t, k, b, 30000)
	}
}

// Readers keep reading while segments are compacted and deleted under
// them: every hit is byte-exact (run with -race).
func TestDiskSegmentDeletedWhileReading(t *testing.T) {
	dir := t.TempDir()
	stats := new(Stats)
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 4 << 20, MinFreeFraction: -1, Stats: stats, Writers: 2, QueueLen: 512})
	const nkeys, size = 200, 8000
	key := func(i int) Key { return testKey(keyName(i), 1) }
	var stop atomic.Bool
	var wg sync.WaitGroup
	var hits atomic.Int64
	errs := make(chan string, 8)
	for r := 0; r < 4; r++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for !stop.Load() {
				k := key(rng.IntN(nkeys))
				if b, ok := d.Get(k); ok {
					hits.Add(1)
					if !bytes.Equal(b, blockFor(k, size)) {
						errs <- k.Object
						return
					}
				}
			}
		})
	}
	// Rounds of: fill, evict most, let the compactor delete and copy.
	deadline := time.Now().Add(time.Second)
	rounds := 0
	for time.Now().Before(deadline) || rounds < 3 {
		rounds++
		for i := 0; i < nkeys; i++ {
			d.Put(key(i), blockFor(key(i), size))
		}
		d.Flush()
		var victims []Key
		d.mu.Lock()
		for i := 0; i < nkeys; i++ {
			if _, ok := d.index[keyHash(key(i))]; ok && (i+rounds)%4 != 0 {
				victims = append(victims, key(i))
			}
		}
		d.mu.Unlock()
		evict(t, d, victims)
		// A reader holding a segment while it is deleted keeps its fd.
		d.mu.Lock()
		var held *segment
		var at recLoc
		for _, loc := range d.index {
			held, at = loc.seg, loc
			held.acquire()
			break
		}
		d.mu.Unlock()
		if held != nil {
			d.mu.Lock()
			for id, loc := range d.index {
				if loc.seg == held {
					delete(d.index, id)
					d.policy.Remove(id)
					d.killLocked(loc, nil)
				}
			}
			held.sealed = true
			drop := d.reclaimLocked(held, nil)
			d.publish()
			d.mu.Unlock()
			d.removeSegments(drop)
			buf := make([]byte, at.n)
			if _, err := held.f.ReadAt(buf, at.off); err != nil {
				t.Fatalf("read from a deleted segment still held: %v", err)
			}
			held.release()
			if held.refs.Load() == 0 {
				if _, err := held.f.ReadAt(buf, at.off); err == nil {
					t.Fatal("fd of a deleted segment still open after the last release")
				}
			}
		}
		d.quiesce()
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for o := range errs {
		t.Errorf("wrong bytes served for %s", o)
	}
	checkAccounting(t, d)
	if hits.Load() == 0 {
		t.Fatal("readers never hit: the test checks nothing")
	}
	if c := stats.DiskCorruptions.Load(); c != 0 {
		t.Fatalf("%d corruptions", c)
	}
	t.Logf("%d rounds, %d hits, %d evictions", rounds, hits.Load(), stats.DiskEvictions.Load())
}

// A format 1 directory (fan-out directories of block files) is ours: its
// blocks are dropped, the marker rewritten, the learned policy state kept.
func TestDiskConvertsFormat1(t *testing.T) {
	dir := t.TempDir()
	writeMarker(t, dir, markerFormat1)
	for _, sub := range []string{"00", "7f", "ff"} {
		os.MkdirAll(filepath.Join(dir, sub), 0o755)
		os.WriteFile(filepath.Join(dir, sub, sub+"00000000000000-1000"), make([]byte, 100), 0o644)
		os.WriteFile(filepath.Join(dir, sub, tempPrefix+"x"), nil, 0o644)
	}
	st := append([]byte(stateMagicV1), make([]byte, 16)...)
	st[len(stateMagicV1)] = 0x40 // any float
	st[len(stateMagicV1)+8] = 77 // samples
	os.WriteFile(filepath.Join(dir, StateName), st, 0o644)
	if s, err := StatDir(dir); err != nil || s.TempFiles != 6 || s.Entries != 0 {
		t.Fatalf("StatDir of a format 1 dir = %+v, %v", s, err)
	}
	var logs logRecorder
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Logger: slog.New(&logs)})
	for _, sub := range []string{"00", "7f", "ff"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("format 1 directory %s kept: %v", sub, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, MarkerName)); string(b) != markerContent {
		t.Fatalf("marker says %q", b)
	}
	if infos := logs.count(slog.LevelInfo, "format 1"); infos != 1 {
		t.Fatalf("%d info lines about the conversion, want 1", infos)
	}
	d.mu.Lock()
	_, samples := d.policy.ReuseDistance()
	d.mu.Unlock()
	if samples != 77 {
		t.Fatalf("reuse distance samples %d after conversion, want 77 (format 1 state)", samples)
	}
	k := testKey("k", 1)
	d.Put(k, blockFor(k, 5000))
	d.Flush()
	if b, ok := d.Get(k); !ok {
		t.Fatal("converted cache does not serve")
	} else {
		checkExact(t, k, b, 5000)
	}
	d.Close()
	// Opened again: no conversion, the block is there.
	var logs2 logRecorder
	d2 := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Logger: slog.New(&logs2)})
	if _, ok := d2.Get(k); !ok || logs2.count(slog.LevelInfo, "format 1") != 0 {
		t.Fatal("second open of a converted cache")
	}
}

// logRecorder keeps log messages.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) count(level slog.Level, substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level == level && strings.Contains(r.Message, substr) {
			n++
		}
	}
	return n
}

// A bound that shrank between runs trims at open, newest records first,
// and the trimmed records stay dead after another clean restart.
func TestDiskMaxBytesShrink(t *testing.T) {
	dir := t.TempDir()
	opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, QueueLen: 512}
	d := openDisk(t, opts)
	keys := fillDisk(d, 300) // ~5 MB
	d.Close()
	const small = 2 << 20
	stats := new(Stats)
	opts.MaxBytes, opts.Stats = small, stats
	d2 := openDisk(t, opts)
	d2.quiesce()
	checkAccounting(t, d2)
	n := stats.DiskEntries.Load()
	if n == 0 || n >= 300 {
		t.Fatalf("%d entries after shrinking the bound", n)
	}
	if total := totalBytes(segFiles(t, dir)); total > small {
		t.Fatalf("%d segment bytes after trimming to %d", total, small)
	}
	served := 0
	for _, k := range keys {
		if b, ok := d2.Get(k); ok {
			served++
			checkExact(t, k, b, sizeFor(k))
		}
	}
	if int64(served) != n {
		t.Fatalf("served %d, index has %d", served, n)
	}
	d2.Close()
	stats3 := new(Stats)
	opts.Stats = stats3
	openDisk(t, opts)
	if got := stats3.DiskEntries.Load(); got != n {
		t.Fatalf("entries %d after another restart, want %d", got, n)
	}
	if got := stats3.DiskEvictions.Load(); got != 0 {
		t.Fatalf("%d evictions at the second open: trimmed records came back", got)
	}
}

func TestStateEncoding(t *testing.T) {
	dead := []recKey{{1, 16}, {1, 5000}, {0xffff, 1 << 40}}
	buf := encodeState(12.5, 99, dead)
	mean, samples, got, ok := decodeState(buf)
	if !ok || mean != 12.5 || samples != 99 || len(got) != 3 {
		t.Fatalf("decodeState = %v %v %v %v", mean, samples, got, ok)
	}
	for _, r := range dead {
		if _, ok := got[r]; !ok {
			t.Fatalf("%v lost", r)
		}
	}
	for i := range buf {
		bad := bytes.Clone(buf)
		bad[i] ^= 0x10
		if _, _, _, ok := decodeState(bad); ok {
			t.Fatalf("flipped byte %d accepted", i)
		}
	}
	if _, _, _, ok := decodeState(buf[:len(buf)-1]); ok {
		t.Fatal("truncated state accepted")
	}
}

// Cut anywhere, a segment scans to its last complete record and reports a
// torn tail, never a corruption: what a crash leaves is never counted as
// bad data.
func TestScanSegmentTorn(t *testing.T) {
	k1, k2 := testKey("one", 1), testKey("two", 2)
	r1 := encodeRecord(k1, blockFor(k1, 3000))
	hdr, payload, _ := new(compressor).encodeBlock(k2, blockFor(k2, 9000), true)
	r2 := append(hdr, payload...)
	seg := append(append(segmentHeader(5, 0), r1...), r2...)
	for cut := 0; cut <= len(seg); cut++ {
		var got []recInfo
		_, end, why, err := scanSegment(bytes.NewReader(seg[:cut]), 5, int64(cut), func(r recInfo) bool {
			got = append(got, r)
			return true
		})
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		want := 0
		switch {
		case cut == len(seg):
			want = 2
		case cut >= segHeaderLen+len(r1):
			want = 1
		}
		complete := cut == segHeaderLen || cut == segHeaderLen+len(r1) || cut == len(seg)
		if len(got) != want || (complete && why != scanComplete) || (!complete && why != scanTorn) {
			t.Fatalf("cut %d: %d records, end %d, %v", cut, len(got), end, why)
		}
		if want >= 1 && (got[0].id != keyHash(k1) || got[0].n != int64(len(r1))) {
			t.Fatalf("cut %d: first record %+v", cut, got[0])
		}
	}
	// Any other segment number, or garbage after the records, is corrupt.
	if _, _, why, _ := scanSegment(bytes.NewReader(seg), 6, int64(len(seg)), func(recInfo) bool { return true }); why != scanCorrupt {
		t.Fatalf("wrong seq: %v", why)
	}
	junk := append(bytes.Clone(seg), bytes.Repeat([]byte{0xab}, 100)...)
	n := 0
	if _, _, why, _ := scanSegment(bytes.NewReader(junk), 5, int64(len(junk)), func(recInfo) bool { n++; return true }); why != scanCorrupt || n != 2 {
		t.Fatalf("garbage after the records: %v after %d records", why, n)
	}
}

// RAM hits reach the disk policy through Tiered, so blocks hot in RAM are
// not evicted from disk as unused. A disk hit is promoted to a RAM tier on
// the heap, not to one in a memory file (a copy for each block read).
func TestTieredTouchesDisk(t *testing.T) {
	for _, heap := range []bool{false, true} {
		t.Run(fmt.Sprintf("heap=%v", heap), func(t *testing.T) {
			r := newRAMOf(t, heap, 64<<20, nil)
			d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, MinFreeFraction: -1})
			tt := NewTiered(r, d)
			k := testKey("hot", 0)
			tt.Put(k, blockFor(k, 5000))
			tt.Flush()
			d.mu.Lock()
			before := d.policy.clock
			d.mu.Unlock()
			if _, ok := tt.Get(k); !ok {
				t.Fatal("miss")
			}
			d.mu.Lock()
			after := d.policy.clock
			d.mu.Unlock()
			if after != before+1 {
				t.Fatalf("disk policy clock %d -> %d on a RAM hit, want +1", before, after)
			}
			k2 := testKey("diskonly", 0)
			d.Put(k2, blockFor(k2, 5000))
			d.Flush()
			if b, ok := tt.Get(k2); !ok {
				t.Fatal("disk block missed through Tiered")
			} else {
				checkExact(t, k2, b, 5000)
			}
			r.Flush()
			b, promoted := r.Get(k2)
			if want := !r.PutCopies(); promoted != want {
				t.Fatalf("disk hit promoted to RAM: %v, want %v", promoted, want)
			}
			if promoted {
				checkExact(t, k2, b, 5000)
			}
		})
	}
}

// The disk tier wires the policy in: shuffled epochs over a dataset 3x the
// bound keep hitting on about a third from the second epoch on, also across
// a restart (restored blocks are protected like resident ones), whether the
// policy state was saved (clean Close) or lost (crash).
func TestDiskShuffledEpochs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dropState bool
	}{{"cleanRestart", false}, {"stateLost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const n, size, cacheBlocks = 150, 8 << 10, 50
			k0 := testKey(keyName(0), 1)
			hl, _, _ := new(compressor).encodeBlock(k0, nil, false)
			span := alignUp(int64(size+len(hl)), recordAlign(t))
			opts := DiskOptions{Dir: t.TempDir(), MaxBytes: cacheBlocks * span, MinFreeFraction: -1}
			d := openDisk(t, opts)
			rng := rand.New(rand.NewPCG(5, 5))
			order := rng.Perm(n)
			for epoch := 1; epoch <= 5; epoch++ {
				if epoch == 3 {
					d.Close()
					st := filepath.Join(opts.Dir, StateName)
					if _, err := os.Stat(st); err != nil {
						t.Fatalf("no policy state after Close: %v", err)
					}
					if tc.dropState {
						os.Remove(st)
					}
					d = openDisk(t, opts)
				}
				rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
				hits := 0
				for _, i := range order {
					k := testKey(keyName(i), 1)
					if b, ok := d.Get(k); ok {
						hits++
						checkExact(t, k, b, size)
						continue
					}
					d.Put(k, blockFor(k, size))
					d.Flush()
				}
				ratio := float64(hits) / n
				t.Logf("epoch %d: hit ratio %.3f", epoch, ratio)
				if epoch > 1 && ratio < 0.9*cacheBlocks/n {
					t.Errorf("epoch %d: hit ratio %.3f < 0.9 x %.3f", epoch, ratio, float64(cacheBlocks)/n)
				}
			}
		})
	}
}

// Records finds every record (60), and a byte flipped 100 bytes before the
// end of every other one (as cmd/dataccel's TestCorruptCacheThroughMount
// does) lands in a payload and is found by Get.
func TestDiskFlipEveryOtherRecord(t *testing.T) {
	dir := t.TempDir()
	opts := DiskOptions{Dir: dir, MaxBytes: 1 << 30, MinFreeFraction: -1, Writers: 4, QueueLen: 256}
	d := openDisk(t, opts)
	rng := rand.New(rand.NewPCG(1, 2))
	var keys []Key
	var sizes []int
	for i := 0; i < 60; i++ {
		k := testKey(keyName(i), 1)
		n := 15<<10 + rng.IntN(30<<10)
		keys, sizes = append(keys, k), append(sizes, n)
		d.Put(k, blockFor(k, n))
	}
	d.Close()
	flipped := 0
	recs, err := Records(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Len < 1000 {
			continue
		}
		if flipped%2 == 0 { // a payload byte of every other record
			f, err := os.OpenFile(r.Path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, r.Off+r.Len-100); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0xff
			if _, err := f.WriteAt(b, r.Off+r.Len-100); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		flipped++
	}
	if flipped != 60 {
		t.Fatalf("found %d records, want 60", flipped)
	}
	stats := new(Stats)
	opts.Stats = stats
	d2 := openDisk(t, opts)
	served := 0
	for i, k := range keys {
		if b, ok := d2.Get(k); ok {
			served++
			checkExact(t, k, b, sizes[i])
		}
	}
	if c := stats.DiskCorruptions.Load(); c != int64((flipped+1)/2) || served != flipped-int(c) {
		t.Fatalf("%d corruptions, %d served, of %d records with %d flipped", c, served, flipped, (flipped+1)/2)
	}
}

// With direct I/O, records sit at 4 KiB multiples and their padding counts
// as theirs (live, not dead bytes for the compactor to chase); the blocks
// read back after a restart, also by a run that writes through the page
// cache, and a cache written that way reads back in a direct run.
func TestDiskAlignedRecords(t *testing.T) {
	if recordAlign(t) == 0 {
		testenv.Missing(t, "no direct I/O on the file system of t.TempDir()")
	}
	dir := t.TempDir()
	opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, Compress: true, MinFreeFraction: -1, Writers: 2, QueueLen: 256}
	d := openDisk(t, opts)
	if !d.direct.Load() || d.align != dioAlign {
		t.Fatalf("direct %v, align %d: want direct I/O with %d", d.direct.Load(), d.align, dioAlign)
	}
	hl, _, _ := new(compressor).encodeBlock(testKey(keyName(0), 1), nil, false)
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := map[Key]int{}
	for i := 0; i < 60; i++ {
		n := 1 + rng.IntN(100<<10)
		switch i {
		case 0:
			n = dioAlign - len(hl) // a record of exactly one page
		case 1:
			n = 3 << 20 // larger than a staging buffer's first size
		}
		k := testKey(keyName(i), 1)
		sizes[k] = n
		d.Put(k, blockFor(k, n))
	}
	d.Flush()
	checkAccounting(t, d)
	d.mu.Lock()
	for id, loc := range d.index {
		if loc.off%dioAlign != 0 || loc.n%dioAlign != 0 {
			t.Errorf("record %x at %d, %d bytes: not aligned to %d", id, loc.off, loc.n, dioAlign)
		}
	}
	for _, s := range d.segs {
		if s.hdr != dioAlign || s.dead != s.hdr {
			t.Errorf("segment %d: header %d bytes, %d dead: padding must count as live", s.seq, s.hdr, s.dead)
		}
	}
	d.mu.Unlock()
	check := func(d *Disk) {
		t.Helper()
		for k, n := range sizes {
			b, ok := d.Get(k)
			if !ok {
				t.Fatalf("block %s missed", k.Object)
			}
			checkExact(t, k, b, n)
		}
	}
	check(d)
	d.Close()

	// Read back by a run that writes through the page cache, which then
	// adds records back to back; then by a direct run again.
	bopts := opts
	bopts.Buffered = true
	b := openDisk(t, bopts)
	check(b)
	checkAccounting(t, b)
	extra := testKey("extra", 1)
	sizes[extra] = 5000
	b.Put(extra, blockFor(extra, 5000))
	b.Flush()
	b.Close()
	d2 := openDisk(t, opts)
	check(d2)
	checkAccounting(t, d2)
}

// Segments end near the target size (MaxBytes/64, at least 1 MiB); a record
// larger than the target gets a segment of its own.
func TestDiskSegmentRotation(t *testing.T) {
	dir := t.TempDir()
	d := openDisk(t, DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Writers: 1, QueueLen: 256})
	if d.segTarget != 1<<20 {
		t.Fatalf("segment target %d, want 1 MiB", d.segTarget)
	}
	sizes := []int{100 << 10, 2 << 20, 100 << 10, 400 << 10, 400 << 10, 400 << 10}
	for i, n := range sizes {
		k := testKey(keyName(i), 1)
		d.Put(k, blockFor(k, n))
	}
	d.Flush()
	segOf := map[int]uint64{}
	d.mu.Lock()
	for i := range sizes {
		segOf[i] = d.index[keyHash(testKey(keyName(i), 1))].seg.seq
	}
	d.mu.Unlock()
	// [100K] [2M] [100K 400K 400K] [400K]
	want := []int{0, 1, 2, 2, 2, 3}
	for i := range sizes {
		if got := int(segOf[i] - segOf[0]); got != want[i] {
			t.Fatalf("block %d (%d bytes) in segment +%d, want +%d (%v)", i, sizes[i], got, want[i], segOf)
		}
	}
	for p, size := range segFiles(t, dir) {
		if size > 1<<20 && size < 2<<20 {
			t.Fatalf("segment %s of %d bytes grew past the target", p, size)
		}
	}
}

// A writer takes the blocks already queued with the one it has, within the
// batch bounds; the block that would overflow a batch starts the next one.
func TestDiskGather(t *testing.T) {
	item := func(n int) putItem { return putItem{key: testKey(keyName(n), 1), data: make([]byte, n)} }
	sizes := func(b []putItem) (out []int) {
		for _, it := range b {
			out = append(out, len(it.data))
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		segTarget, max int64
		first          int
		queued         []int
		close          bool
		want           []int
		wantNext       int // 0: none
		wantOpen       bool
	}{
		{"empty queue", 1 << 30, 1 << 40, 10, nil, false, []int{10}, 0, true},
		{"all fit", 1 << 30, 1 << 40, 10, []int{20, 30}, false, []int{10, 20, 30}, 0, true},
		{"overflow carried", 4 << 20, 1 << 40, 600 << 10, []int{400 << 10, 200 << 10, 5}, false, []int{600 << 10, 400 << 10}, 200 << 10, true},
		{"a big first block goes alone", 4 << 20, 1 << 40, 3 << 20, []int{10}, false, []int{3 << 20}, 10, true},
		{"small cache, small batches", 1 << 30, 64 << 10, 3 << 10, []int{1 << 10, 1 << 10}, false, []int{3 << 10, 1 << 10}, 1 << 10, true},
		{"closed queue", 1 << 30, 1 << 40, 10, []int{20}, true, []int{10, 20}, 0, false},
		{"item bound", 1 << 30, 1 << 40, 1, make([]int, 100), false, make([]int, maxBatchItems), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Disk{queue: make(chan putItem, 128), segTarget: tc.segTarget, max: tc.max}
			for _, n := range tc.queued {
				d.queue <- item(n)
			}
			if tc.close {
				close(d.queue)
			}
			tc.want[0] = tc.first
			batch, next, have, open := d.gather([]putItem{item(tc.first)})
			if !slices.Equal(sizes(batch), tc.want) {
				t.Fatalf("batch %v, want %v", sizes(batch), tc.want)
			}
			if have != (tc.wantNext != 0) || (have && len(next.data) != tc.wantNext) || open != tc.wantOpen {
				t.Fatalf("next %d (have %v), open %v; want next %d, open %v", len(next.data), have, open, tc.wantNext, tc.wantOpen)
			}
		})
	}
}

// With direct I/O, a disk hit fills no page cache: the mount hands the
// block on to the kernel, which caches it under the mount's file, so a
// page-cache copy of the segment would be a second one. Checked with
// mincore on the segments, for records written by this run and for those
// of an earlier run (read after a restart).
func TestDiskDirectReadsSkipPageCache(t *testing.T) {
	if recordAlign(t) == 0 {
		testenv.Missing(t, "no direct I/O on the file system of t.TempDir()")
	}
	dir := t.TempDir()
	opts := DiskOptions{Dir: dir, MaxBytes: 64 << 20, MinFreeFraction: -1, Writers: 1, QueueLen: 256}
	sizes := map[Key]int{}
	for i := range 40 {
		k := testKey(keyName(i), 1)
		sizes[k] = 1 + i*5000
	}
	// check forgets what the writes (the segment headers) and a restart's
	// scan left in the page cache, then reads every block.
	check := func(when string, d *Disk) {
		t.Helper()
		segs := segFiles(t, dir)
		before := 0
		for p := range segs {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
			f.Close()
			before += residentPages(t, p)
		}
		for k, n := range sizes {
			b, ok := d.Get(k)
			if !ok {
				t.Fatalf("%s: block %s missed", when, k.Object)
			}
			checkExact(t, k, b, n)
		}
		after := 0
		for p := range segs {
			after += residentPages(t, p)
		}
		if after > before {
			t.Errorf("%s: reading %d blocks left %d segment pages in the page cache (%d before)", when, len(sizes), after, before)
		}
	}
	d := openDisk(t, opts)
	for k, n := range sizes {
		d.Put(k, blockFor(k, n))
	}
	d.Flush()
	check("written by this run", d)
	d.Close()
	check("after a restart", openDisk(t, opts))
}

// residentPages counts the pages of the file at p in the page cache.
func residentPages(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (st.Size()+4095)/4096)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(m))), uintptr(len(m)), uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// A block from a direct read stays the caller's: a small record's memory
// goes back to a pool, so its raw block must be copied out of it; a large
// record is read into memory of its own; a decompressed block is a copy.
// Every block is read, then read blocks pile up (reusing the pooled memory)
// before the first ones are checked.
func TestDiskDirectHitsOwnTheirBytes(t *testing.T) {
	if recordAlign(t) == 0 {
		testenv.Missing(t, "no direct I/O on the file system of t.TempDir()")
	}
	for _, n := range []int{8 << 10, 64 << 10} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, Compress: true, MinFreeFraction: -1, QueueLen: 256})
			var keys []Key
			for i := range 16 {
				keys = append(keys, testKey(keyName(i)+".txt", 0), testKey(keyName(i), 1))
			}
			for _, k := range keys {
				d.Put(k, blockFor(k, n))
			}
			d.Flush()
			got := map[Key][]byte{}
			for range 2 {
				for _, k := range keys {
					b, ok := d.Get(k)
					if !ok {
						t.Fatalf("%v missed", k)
					}
					if got[k] == nil {
						got[k] = b
					}
				}
			}
			for _, k := range keys {
				checkExact(t, k, got[k], n)
			}
		})
	}
}

// A record too large for a small-object size class is read with direct
// I/O into aligned memory of its own, which its raw block is handed out in
// (no copy); a smaller one into pooled memory.
func TestDiskDirectReadBuffers(t *testing.T) {
	if recordAlign(t) == 0 {
		testenv.Missing(t, "no direct I/O on the file system of t.TempDir()")
	}
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, MinFreeFraction: -1, QueueLen: 256})
	for _, tc := range []struct {
		n          int
		wantPooled bool
	}{
		{100, true},
		{20 << 10, true},
		{40 << 10, false},
		{1 << 20, false},
		{3<<20 + 5, false},
	} {
		k := testKey(keyName(tc.n), 1) // odd block: incompressible, stored raw
		d.Put(k, blockFor(k, tc.n))
		d.Flush()
		d.mu.Lock()
		loc, ok := d.index[keyHash(k)]
		d.mu.Unlock()
		if !ok {
			t.Fatalf("%d bytes: not indexed", tc.n)
		}
		buf, pooled, ok := d.readDirect(loc)
		if !ok {
			t.Fatalf("%d bytes: no direct read of the record at %d (+%d)", tc.n, loc.off, loc.n)
		}
		if pooled != tc.wantPooled {
			t.Errorf("%d bytes: pooled %v, want %v", tc.n, pooled, tc.wantPooled)
		}
		if a := uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % dioAlign; a != 0 {
			t.Errorf("%d bytes: buffer %d bytes off alignment", tc.n, a)
		}
		raw, err := decodeBlock(buf, k)
		if err != nil {
			t.Fatalf("%d bytes: %v", tc.n, err)
		}
		checkExact(t, k, raw, tc.n)
		if !pooled && cap(buf)-len(buf) != 0 {
			t.Errorf("%d bytes: own buffer has %d bytes to spare", tc.n, cap(buf)-len(buf))
		}
		if b, ok := d.Get(k); !ok || (!pooled && cap(b)-len(b) >= dioAlign) {
			t.Errorf("%d bytes: Get ok %v, %d bytes to spare after the block", tc.n, ok, cap(b)-len(b))
		}
	}
}

// TestDiskQueueBytes: the write queue holds at most QueueBytes of blocks:
// Puts beyond them are dropped (a queue long in blocks does not help), the
// queue says it is backlogged while half full, and a Drain (putWait) waits
// for room instead of dropping.
func TestDiskQueueBytes(t *testing.T) {
	stats := new(Stats)
	const block, n = 64 << 10, 200
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 1 << 30, QueueLen: 1024, QueueBytes: block, Writers: 1,
		Stats: stats, Sync: true, MinFreeFraction: -1})
	if d.Backlogged() {
		t.Fatal("an idle queue is backlogged")
	}
	blocks := make([][]byte, n)
	for i := range blocks {
		blocks[i] = blockFor(testKey(keyName(i), 1), block)
	}
	backlogged := false
	// Puts in a tight loop outrun one writer that fdatasyncs each block:
	// with room for one block, a Put while another waits or is written drops.
	for i := range n {
		d.Put(testKey(keyName(i), 1), blocks[i])
		backlogged = backlogged || d.Backlogged()
	}
	d.Flush()
	s := stats.Snapshot()
	if s.DiskDropped == 0 || s.DiskDropped+s.DiskWrites != n {
		t.Fatalf("dropped %d, written %d of %d puts; want some dropped, the rest written", s.DiskDropped, s.DiskWrites, n)
	}
	if !backlogged || d.Backlogged() {
		t.Fatalf("backlogged while filling: %v, after Flush: %v; want true, false", backlogged, d.Backlogged())
	}
	for i := range 20 {
		k := testKey(keyName(i), 2)
		if !d.putWait(k, blockFor(k, block), time.Now().Add(time.Minute)) {
			t.Fatal("putWait refused")
		}
	}
	d.Flush()
	if got := stats.Snapshot(); got.DiskDropped != s.DiskDropped || got.DiskWrites != s.DiskWrites+20 {
		t.Fatalf("putWait: %d dropped, %d written; want none dropped, 20 written", got.DiskDropped-s.DiskDropped, got.DiskWrites-s.DiskWrites)
	}
}

// putFortyBlocks puts 40 blocks of 64 KiB into d, waits for the writes and
// returns their keys and how many d serves (each checked byte for byte).
func putFortyBlocks(t *testing.T, d *Disk) (keys []Key, served int) {
	t.Helper()
	for i := range 40 {
		k := testKey(keyName(i), 1)
		keys = append(keys, k)
		d.Put(k, blockFor(k, 64<<10))
		// In batches of at most four (256 KiB): a writer slow to start
		// (a loaded machine) took all forty in one write, which a full
		// file system refuses whole, where some would have fit.
		if i%4 == 3 {
			d.Flush()
		}
	}
	d.Flush()
	for _, k := range keys {
		if b, ok := d.Get(k); ok {
			served++
			checkExact(t, k, b, 64<<10)
		}
	}
	return keys, served
}

// A process out of file descriptors (a loader with many files open) cannot
// create a segment: the blocks are refused with one warning, and the tier
// caches again once descriptors free, instead of turning itself off for
// the mount's life.
func TestDiskOutOfFiles(t *testing.T) {
	var wc warnCounter
	stats := new(Stats)
	d, err := NewDisk(DiskOptions{Dir: t.TempDir(), MaxBytes: 1 << 30, QueueLen: 256, Logger: slog.New(&wc), Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	var held []*os.File
	restore := func() {
		for _, f := range held {
			f.Close()
		}
		held = nil
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(restore)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := limit
	low.Cur = uint64(len(fds) + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	for range 64 { // take every descriptor left
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		held = append(held, f)
	}
	if len(held) == 64 {
		t.Fatal("the lowered limit did not stop opens")
	}
	_, served := putFortyBlocks(t, d)
	restore()
	if served != 0 || d.Disabled() || stats.DiskErrors.Load() != 0 || stats.DiskRejected.Load() == 0 || wc.warns.Load() != 1 {
		t.Fatalf("out of descriptors: served=%d disabled=%v errors=%d rejected=%d warnings=%d; want 0 false 0 >0 1",
			served, d.Disabled(), stats.DiskErrors.Load(), stats.DiskRejected.Load(), wc.warns.Load())
	}
	if _, served = putFortyBlocks(t, d); served != 40 || wc.warns.Load() != 1 {
		t.Fatalf("descriptors free again: served %d of 40, %d warnings", served, wc.warns.Load())
	}
	d.quiesce()
	checkAccounting(t, d)
}

// TestFootprint: a block's footprint, which warm plans with, is the room
// its record takes when stored raw.
func TestFootprint(t *testing.T) {
	d := openDisk(t, DiskOptions{Dir: t.TempDir(), MaxBytes: 64 << 20, MinFreeFraction: -1})
	for _, n := range []int{0, 100, 1 << sumShift, 1<<sumShift + 1, 3 << 20} {
		k := testKey(keyName(n), 1)
		hdr, payload, _ := (&compressor{}).encodeBlock(k, make([]byte, n), false)
		if want, got := alignUp(int64(len(hdr)+len(payload)), d.align), d.Footprint(k, int64(n)); got != want {
			t.Errorf("Footprint of %d bytes: %d, want %d (its record's span)", n, got, want)
		}
	}
}
