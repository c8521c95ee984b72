package prefetch

import "sync/atomic"

// Stats are the loader's counters. The caller allocates one and passes it in
// Options (and HedgeOptions), so metrics can read it and several loaders in
// one process never share hidden state. All fields are safe for concurrent use.
type Stats struct {
	Gets      atomic.Int64 // block GETs started by the loader
	GetBytes  atomic.Int64 // bytes received by those GETs
	GetErrors atomic.Int64 // GETs that failed (not counting loader shutdown)
	Inflight  atomic.Int64 // gauge: loader GETs in flight now
	PartGets  atomic.Int64 // GETs of part of a block only, for a reader at random offsets (in Gets too)

	CacheHits atomic.Int64 // blocks served from the cache tier (or parts, from a RAM tier in a memory file)
	ReadyHits atomic.Int64 // blocks served from the ready map
	Shared    atomic.Int64 // waiters that joined a fetch already in flight (singleflight shares)

	PrefetchIssued  atomic.Int64 // prefetch fetches started (read-ahead and cross-file)
	PrefetchUsed    atomic.Int64 // prefetched blocks a read took while the loader held them (ready or in flight)
	PrefetchWasted  atomic.Int64 // prefetched blocks dropped before any read that no cache tier kept
	PrefetchSkipped atomic.Int64 // read-ahead skipped for lack of memory budget or slots

	Pushed      atomic.Int64 // prefetched blocks put in the kernel's page cache (PageCache), whole or but for a file's last page
	PushedBytes atomic.Int64 // bytes put there
	PushFailed  atomic.Int64 // pushes the page cache refused (file not looked up, unmounted)
	PushSkipped atomic.Int64 // pushes skipped because the push queue was full

	PoolReused atomic.Int64 // bodies received into a buffer received into before (bufPool)
	PoolMade   atomic.Int64 // buffers the pool made
	PoolMissed atomic.Int64 // bodies received into a buffer of their own, the pool lent out to its bound

	MemInUse atomic.Int64 // gauge: bytes charged to the memory budget now
	MemPeak  atomic.Int64 // high-water mark of MemInUse

	Hedges    atomic.Int64 // duplicate GETs sent by Hedged
	HedgeWins atomic.Int64 // hedges that answered first
}

// storeMax raises a high-water mark to v.
func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
