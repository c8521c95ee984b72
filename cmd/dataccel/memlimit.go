package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// memHeadroom is the least the Go heap may grow past the RAM cache before
// the collector runs: room for metadata, the disk cache's write queue and
// garbage (blocks in flight and read ahead share the RAM cache's bound).
// With the runtime's own memory on top, a mount with a full RAM cache stays
// within --ram-cache-size + 300 MiB.
const memHeadroom = 192 << 20

// memoryLimitFor returns the soft memory limit for a mount with a RAM cache
// of ram bytes on the heap, holding held bytes (the RAM cache's blocks and
// the loader's), whose live heap is live bytes. The
// default pacing (GOGC=100) lets the heap grow to twice the live heap before
// collecting, and a full RAM cache is most of the live heap: the process
// would hold the cache twice over. Only what is not the mount's blocks
// (metadata, the disk cache's write queue) gets room to grow, half again its
// size (like GOGC=50), and at least memHeadroom; the blocks get room to fill
// up to ram.
func memoryLimitFor(ram, held, live int64) int64 {
	other := max(0, live-min(held, ram))
	return ram + max(memHeadroom, other+other/2)
}

// limitMemory keeps the runtime's soft memory limit at memoryLimitFor as
// the live heap changes, until ctx ends, and then puts back the limit it
// found. blocks returns the bytes of the mount's blocks on the heap, and
// off it: a RAM cache in a memory file holds the process's memory outside
// the heap, which leaves the heap that much less of ram. A limit set with
// GOMEMLIMIT (the Kubernetes manifests set one from the container's limit)
// is kept, less the memory file: the container's limit counts the file
// too, and a heap allowed up to GOMEMLIMIT beside a full RAM cache would
// go past it.
func limitMemory(ctx context.Context, ram int64, blocks func() (onHeap, offHeap int64), logger *slog.Logger) {
	found := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(found)
	fromEnv := os.Getenv("GOMEMLIMIT") != ""
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	set := func() int64 {
		onHeap, offHeap := blocks()
		var limit int64
		if fromEnv {
			limit = max(found-offHeap, memHeadroom)
		} else {
			metrics.Read(sample)
			var live int64
			if sample[0].Value.Kind() == metrics.KindUint64 {
				live = int64(sample[0].Value.Uint64())
			}
			limit = memoryLimitFor(max(0, ram-offHeap), onHeap, live)
		}
		debug.SetMemoryLimit(limit)
		return limit
	}
	logger.Debug("Go memory limit", "bytes", set())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			set()
		}
	}
}
