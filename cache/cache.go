// Package cache holds fetched object blocks: a RAM tier (ristretto; the
// blocks' bytes in an anonymous memory file where the system has one), a disk
// tier (log-structured: checksummed records, optionally compressed with s2,
// appended to a few large segment files on local NVMe with direct I/O where
// the file system allows it, found through an in-memory index rebuilt at
// open) and a tiered lookup that promotes disk hits to a RAM tier on the
// heap and writes to
// disk what RAM gives up (and, at Drain, what it still holds). It owns the
// on-disk cache format (format.go), the disk eviction policy (Policy: a
// stable resident set that survives reshuffled epochs, where LRU fails), the
// reclaiming of dead bytes in segments (compaction), the cache counters
// (Stats) and helpers for the CLI (StatDir, PurgeDir, ParseSize).
//
// The cache is best effort: a failure is a miss and a counter, never a failed
// read. It does not fetch anything and never imports store; callers fill it.
// It keeps no package-level state: loggers and Stats are passed in.
package cache

// Key names one block of one version of an object. Block identifies the
// block within the object; the cache gives it no meaning (the loader stores
// where the block starts, so that a cache written under one block size
// never answers for another).
type Key struct {
	Object string
	ETag   string
	Block  int64
}

// Tier is one level of the cache. Get returns a block that must not be
// modified by the caller; Put takes ownership of the slice.
type Tier interface {
	Get(Key) ([]byte, bool)
	Put(Key, []byte)
}
