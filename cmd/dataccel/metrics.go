package main

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/localcopy"
	"github.com/dataccel/dataccel/prefetch"
	"github.com/dataccel/dataccel/store"
)

// mountStats are all the counters of one mount, owned here and handed to
// each layer; metrics and .dataccel/stats read the same atomics.
type mountStats struct {
	start    time.Time
	getLat   prometheus.Histogram
	store    store.Counts
	retry    store.RetryStats
	cache    cache.Stats
	prefetch prefetch.Stats
	copies   localcopy.Stats
	// The caches' bounds, set once at start (0: no such tier): a warm
	// through the mount tells from them what it could keep.
	ramLimit, diskLimit atomic.Int64
}

func newMountStats() *mountStats {
	return &mountStats{start: time.Now(), getLat: prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "dataccel", Name: "store_get_latency_seconds",
		Help:    "time from sending a GET to its response headers (or error)",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms .. 8 s
	})}
}

type metric struct {
	name, help string
	v          *atomic.Int64
	gauge      bool
}

func (s *mountStats) metrics() []metric {
	c, p, lc := &s.cache, &s.prefetch, &s.copies
	return []metric{
		{"store_requests_stat_total", "HEAD requests sent to the object store", &s.store.Stats, false},
		{"store_requests_list_total", "listings asked of the object store: of one directory, or of a tree (a long one is several LIST requests)", &s.store.Lists, false},
		{"store_requests_get_total", "GET requests sent to the object store", &s.store.Gets, false},
		{"store_get_bytes_total", "bytes received from the object store", &s.store.Bytes, false},
		{"store_retries_total", "requests sent again after a retryable failure", &s.retry.Retries, false},
		{"store_timeouts_total", "requests cut for no first byte or no progress", &s.retry.Timeouts, false},
		{"store_gave_up_total", "operations that failed after retrying (EIO)", &s.retry.GaveUp, false},
		{"loader_gets_total", "block fetches started by the loader", &p.Gets, false},
		{"loader_part_gets_total", "fetches of part of a block for a reader at random offsets, with the cache full", &p.PartGets, false},
		{"loader_get_errors_total", "block fetches that failed", &p.GetErrors, false},
		{"inflight_gets", "block fetches in flight", &p.Inflight, true},
		{"loader_cache_hits_total", "blocks (or parts of blocks read from the RAM cache) served from the cache tiers", &p.CacheHits, false},
		{"loader_ready_hits_total", "blocks served from prefetched memory", &p.ReadyHits, false},
		{"loader_shared_total", "reads that joined a fetch already in flight", &p.Shared, false},
		{"prefetch_issued_total", "prefetch fetches started", &p.PrefetchIssued, false},
		{"prefetch_used_total", "prefetched blocks a read took while the loader still held them (not those read later from a cache tier or the page cache)", &p.PrefetchUsed, false},
		{"prefetch_wasted_total", "prefetched blocks dropped unread that no cache tier kept", &p.PrefetchWasted, false},
		{"prefetch_skipped_total", "read-ahead skipped for lack of memory or slots", &p.PrefetchSkipped, false},
		{"prefetch_memory_bytes", "bytes of blocks in flight or read ahead", &p.MemInUse, true},
		{"prefetch_pushed_total", "prefetched blocks put in the kernel's page cache", &p.Pushed, false},
		{"prefetch_pushed_bytes_total", "bytes put in the kernel's page cache", &p.PushedBytes, false},
		{"prefetch_push_failed_total", "pushes the kernel refused (file not looked up, nor its directory listed) or not made (a file read from its local copy)", &p.PushFailed, false},
		{"prefetch_push_skipped_total", "pushes skipped for a full push queue", &p.PushSkipped, false},
		{"prefetch_pool_reused_total", "bodies received into a pooled buffer received into before", &p.PoolReused, false},
		{"prefetch_pool_made_total", "buffers the receive pool made", &p.PoolMade, false},
		{"prefetch_pool_missed_total", "bodies received into a buffer of their own, the receive pool lent out to its bound", &p.PoolMissed, false},
		{"hedged_gets_total", "duplicate GETs sent for late small objects", &p.Hedges, false},
		{"hedged_wins_total", "duplicate GETs that answered first", &p.HedgeWins, false},
		{"cache_ram_hits_total", "RAM cache hits", &c.RAMHits, false},
		{"cache_ram_misses_total", "RAM cache misses", &c.RAMMisses, false},
		{"cache_ram_evictions_total", "RAM cache evictions", &c.RAMEvictions, false},
		{"cache_disk_hits_total", "disk cache hits", &c.DiskHits, false},
		{"cache_disk_misses_total", "disk cache misses", &c.DiskMisses, false},
		{"cache_disk_part_hits_total", "reads of part of a block served from the disk cache", &c.DiskPartHits, false},
		{"cache_disk_read_bytes_total", "bytes read from the disk cache", &c.DiskReadBytes, false},
		{"cache_disk_write_bytes_total", "bytes written to the disk cache", &c.DiskWriteBytes, false},
		{"cache_disk_evictions_total", "disk cache evictions", &c.DiskEvictions, false},
		{"cache_disk_rejected_total", "blocks the disk cache declined (full, resident set kept)", &c.DiskRejected, false},
		{"cache_disk_dropped_total", "disk writes dropped because the write queue was full", &c.DiskDropped, false},
		{"cache_corruptions_total", "disk cache blocks that failed their checksum", &c.DiskCorruptions, false},
		{"cache_disk_errors_total", "disk cache I/O errors", &c.DiskErrors, false},
		{"cache_ram_bytes", "bytes of blocks in the RAM cache", &c.RAMBytes, true},
		{"cache_ram_file_errors_total", "copies into the RAM cache's memory file that failed, and pages it could not give back", &c.RAMFileErrors, false},
		{"cache_ram_bytes_limit", "the RAM cache's bound (--ram-cache-size; 0: none)", &s.ramLimit, true},
		{"cache_disk_bytes_limit", "the disk cache's bound (--cache-size; 0: no disk cache)", &s.diskLimit, true},
		{"cache_disk_entries", "blocks in the disk cache", &c.DiskEntries, true},
		{"cache_disk_bytes", "bytes in the disk cache", &c.DiskBytes, true},
		{"cache_disk_saved_bytes_total", "bytes saved by compression", &c.DiskSavedBytes, false},
		{"cache_disk_compress_skipped_total", "blocks written raw without trying compression, the write queue backlogged", &c.DiskCompressSkipped, false},
		{"local_copies_made_total", "whole local copies made for passthrough", &lc.Made, false},
		{"local_copies_reused_total", "opens served by a local copy made before", &lc.Reused, false},
		{"local_copies_failed_total", "local copies not made (no room, a failed read or write): the file is read through the mount", &lc.Failed, false},
		{"local_copies_evicted_total", "local copies removed for room", &lc.Evicted, false},
		{"local_copies_bytes", "bytes the local copies hold", &lc.Bytes, true},
		{"local_copies_written_bytes_total", "bytes written into local copies", &lc.Written, false},
		{"local_copies_inflight", "local copies being made or checked", &lc.Inflight, true},
		{"local_copies_adopted_total", "local copies kept from the last mount (or dataccel warm) and found intact at first use", &lc.Adopted, false},
		{"local_copies_rejected_total", "local copies kept from before whose bytes did not match their hash, made again", &lc.Rejected, false},
	}
}

// registry exposes every counter as dataccel_*. No label carries anything
// but fixed names: never a key, bucket credential or path.
func (s *mountStats) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	for _, m := range s.metrics() {
		v := m.v
		f := func() float64 { return float64(v.Load()) }
		opts := prometheus.Opts{Namespace: "dataccel", Name: m.name, Help: m.help}
		if m.gauge {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts), f))
		} else {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts(opts), f))
		}
	}
	reg.MustRegister(s.getLat)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "dataccel", Name: "uptime_seconds", Help: "seconds since the mount started",
	}, func() float64 { return time.Since(s.start).Seconds() }))
	return reg
}

// snapshot is the JSON of .dataccel/stats: the same counters, by name.
func (s *mountStats) snapshot() []byte {
	out := make(map[string]int64, 40)
	for _, m := range s.metrics() {
		out[m.name] = m.v.Load()
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	return append(b, '\n')
}

// control serves the mount's control files.
type control struct {
	loader *prefetch.Loader
	stats  *mountStats
}

func (c control) Announce(order []store.Object) { c.loader.Announce(order) }
func (c control) Stats() []byte                 { return c.stats.snapshot() }
