package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dataccel/dataccel/store"
)

// Fetched is what the store sent during one epoch of a path whose fetches
// can be counted: a dataccel mount (its own counters) or direct GETs (the
// bench's). A peer's mount or a local directory has none.
type Fetched struct {
	Gets  int64 `json:"gets"`
	Bytes int64 `json:"bytes"`
	// BytesPerRead is Bytes over the bytes the epoch read: above 1 is what
	// prefetch fetched beyond the reads (or ahead, for the next epoch).
	BytesPerRead float64 `json:"bytes_per_read"`
	// HitRatio is the share of the bytes read that the store did not send
	// during the epoch: served by a cache (page cache, RAM, disk) or
	// fetched before it began.
	HitRatio float64 `json:"cache_hit_ratio"`
}

func newFetched(gets, bytes, read int64) *Fetched {
	f := &Fetched{Gets: gets, Bytes: bytes}
	if read > 0 {
		f.BytesPerRead = float64(bytes) / float64(read)
		f.HitRatio = max(0, 1-f.BytesPerRead)
	}
	return f
}

// MountFile returns the path of the control file name (".dataccel/NAME") of
// the dataccel mount that dir lies in, and that mount's root; "" if there is
// none in dir or above it.
func MountFile(dir, name string) (file, root string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", ""
	}
	for d := abs; ; d = filepath.Dir(d) {
		p := filepath.Join(d, filepath.FromSlash(controlDir), name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, d
		}
		if filepath.Dir(d) == d {
			return "", ""
		}
	}
}

// fetchCounter reads a path's running count of GETs and bytes fetched.
type fetchCounter func() (gets, bytes int64, err error)

// statsFresh is how long a mount may serve the same stats snapshot (the
// fuse package's statsFresh, 200 ms, and a margin): counters read sooner
// after an epoch's start could be from before it. Every path's epoch is
// followed by at least this much from its start, counted or not, so that
// none gets more idle time between epochs than another.
const statsFresh = 250 * time.Millisecond

// mountCounter reads a dataccel mount's GET and byte counters from its
// stats file.
func mountCounter(file string) fetchCounter {
	return func() (int64, int64, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return 0, 0, err
		}
		var c struct {
			Gets  *int64 `json:"store_requests_get_total"`
			Bytes *int64 `json:"store_get_bytes_total"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", file, err)
		}
		if c.Gets == nil || c.Bytes == nil {
			return 0, 0, fmt.Errorf("%s: no store_requests_get_total or store_get_bytes_total", file)
		}
		return *c.Gets, *c.Bytes, nil
	}
}

// storeCounter reads the counters of a direct-GET source's store.
func storeCounter(c *store.Counts) fetchCounter {
	return func() (int64, int64, error) { return c.Gets.Load(), c.Bytes.Load(), nil }
}
