package cache

import "sync/atomic"

// Stats holds the cache counters. The caller creates one and passes it to the
// tiers (several tiers may share one); the package keeps no global state.
// All fields are safe for concurrent use.
type Stats struct {
	RAMHits      atomic.Int64
	RAMMisses    atomic.Int64
	RAMPuts      atomic.Int64
	RAMDropped   atomic.Int64 // Sets ristretto refused or dropped (best effort)
	RAMEvictions atomic.Int64
	RAMBytes     atomic.Int64 // gauge: bytes of blocks the RAM tier holds or is about to
	// RAMFileErrors: copies into the RAM tier's memory file that failed
	// (the block dropped) and pages it could not give back.
	RAMFileErrors atomic.Int64

	DiskHits        atomic.Int64
	DiskMisses      atomic.Int64
	DiskPartHits    atomic.Int64 // reads of part of a block served from disk (Disk.ReadPart)
	DiskReadBytes   atomic.Int64 // raw bytes served from disk
	DiskWrites      atomic.Int64 // blocks written
	DiskWriteBytes  atomic.Int64 // bytes written to disk (headers and compressed payloads)
	DiskRejected    atomic.Int64 // writes the eviction policy did not admit
	DiskEvictions   atomic.Int64
	DiskCorruptions atomic.Int64
	DiskErrors      atomic.Int64
	DiskDropped     atomic.Int64 // writes dropped because the write queue was full
	DiskSavedBytes  atomic.Int64 // raw minus stored bytes, over blocks written compressed
	// DiskCompressSkipped: blocks written without trying compression, the
	// write queue backlogged.
	DiskCompressSkipped atomic.Int64
	DiskEntries         atomic.Int64 // gauge: blocks on disk
	DiskBytes           atomic.Int64 // gauge: bytes on disk
}

// StatsSnapshot is a plain copy of Stats at one moment.
type StatsSnapshot struct {
	RAMHits, RAMMisses, RAMPuts, RAMDropped, RAMEvictions, RAMBytes int64
	RAMFileErrors                                                   int64

	DiskHits, DiskMisses, DiskPartHits, DiskReadBytes, DiskWrites int64
	DiskWriteBytes                                                int64
	DiskRejected, DiskEvictions, DiskCorruptions, DiskErrors      int64
	DiskDropped, DiskSavedBytes, DiskEntries, DiskBytes           int64
	DiskCompressSkipped                                           int64
}

// Snapshot copies the counters. Each counter is read atomically; the set as
// a whole is not one consistent cut, which is fine for metrics.
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{
		RAMHits:             s.RAMHits.Load(),
		RAMMisses:           s.RAMMisses.Load(),
		RAMPuts:             s.RAMPuts.Load(),
		RAMDropped:          s.RAMDropped.Load(),
		RAMEvictions:        s.RAMEvictions.Load(),
		RAMBytes:            s.RAMBytes.Load(),
		RAMFileErrors:       s.RAMFileErrors.Load(),
		DiskHits:            s.DiskHits.Load(),
		DiskMisses:          s.DiskMisses.Load(),
		DiskPartHits:        s.DiskPartHits.Load(),
		DiskReadBytes:       s.DiskReadBytes.Load(),
		DiskWrites:          s.DiskWrites.Load(),
		DiskWriteBytes:      s.DiskWriteBytes.Load(),
		DiskRejected:        s.DiskRejected.Load(),
		DiskEvictions:       s.DiskEvictions.Load(),
		DiskCorruptions:     s.DiskCorruptions.Load(),
		DiskErrors:          s.DiskErrors.Load(),
		DiskDropped:         s.DiskDropped.Load(),
		DiskSavedBytes:      s.DiskSavedBytes.Load(),
		DiskCompressSkipped: s.DiskCompressSkipped.Load(),
		DiskEntries:         s.DiskEntries.Load(),
		DiskBytes:           s.DiskBytes.Load(),
	}
}
