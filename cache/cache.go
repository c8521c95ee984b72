// Package cache holds fetched object blocks: a RAM tier (ristretto), a disk
// tier (files on local NVMe, checksummed, optionally compressed) and a tiered
// lookup that promotes disk hits to RAM.
//
// The cache is best effort: a failure is a miss and a counter, never a failed
// read. It does not fetch anything and never imports store; callers fill it.
package cache

// Key names one block of one version of an object.
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
