package cache

import (
	"container/list"
	"fmt"
	"math/rand/v2"
	"testing"
)

// tracePolicy is what the trace simulator needs from a policy.
type tracePolicy interface {
	// access looks id up and, on a miss, offers it for admission.
	access(id uint64) (hit bool)
}

// ourPolicy drives Policy the way the disk tier does: Get (Access), then on
// a miss Put (Admit) with unit-size blocks.
type ourPolicy struct {
	p        *Policy
	capacity int64
}

func (o *ourPolicy) access(id uint64) bool {
	if _, ok := o.p.Access(id); ok {
		return true
	}
	o.p.Admit(id, 1, o.capacity)
	return false
}

// lruPolicy is plain LRU, the baseline the policy must beat.
type lruPolicy struct {
	capacity int
	ll       *list.List
	m        map[uint64]*list.Element
}

func newLRU(capacity int) *lruPolicy {
	return &lruPolicy{capacity: capacity, ll: list.New(), m: make(map[uint64]*list.Element)}
}

func (l *lruPolicy) access(id uint64) bool {
	if e, ok := l.m[id]; ok {
		l.ll.MoveToFront(e)
		return true
	}
	if l.ll.Len() >= l.capacity {
		old := l.ll.Back()
		l.ll.Remove(old)
		delete(l.m, old.Value.(uint64))
	}
	l.m[id] = l.ll.PushFront(id)
	return false
}

// runEpochs reads a dataset of n blocks for epochs epochs, each in a new
// shuffle, and returns the hit ratio of each epoch.
func runEpochs(p tracePolicy, n, epochs int, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	order := make([]uint64, n)
	for i := range order {
		order[i] = uint64(i) * 0x9E3779B97F4A7C15 // spread ids like hashes
	}
	ratios := make([]float64, epochs)
	for e := 0; e < epochs; e++ {
		rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
		hits := 0
		for _, id := range order {
			if p.access(id) {
				hits++
			}
		}
		ratios[e] = float64(hits) / float64(n)
	}
	return ratios
}

func TestPolicyShuffledEpochs(t *testing.T) {
	const cacheBlocks = 2000
	for _, factor := range []int{2, 5} {
		t.Run(fmt.Sprintf("dataset%dx", factor), func(t *testing.T) {
			n := cacheBlocks * factor
			ideal := float64(cacheBlocks) / float64(n)
			ours := runEpochs(&ourPolicy{p: NewPolicy(), capacity: cacheBlocks}, n, 4, 1)
			lru := runEpochs(newLRU(cacheBlocks), n, 4, 1)
			t.Logf("ideal %.3f; ours %.3f; LRU %.3f", ideal, ours, lru)
			for e := 1; e < len(ours); e++ {
				if ours[e] < 0.9*ideal {
					t.Errorf("epoch %d: hit ratio %.3f < 0.9 x %.3f", e+1, ours[e], ideal)
				}
				if ours[e] <= lru[e] {
					t.Errorf("epoch %d: hit ratio %.3f not above LRU %.3f", e+1, ours[e], lru[e])
				}
			}
		})
	}
}

// The disk tier sees more than one access per block read: a miss is looked
// up by the reader, its read-ahead and the sweep, and a block RAM gave up
// may be read back just after it was written. Those short gaps must not
// teach the policy that a block untouched for most of an epoch is stale,
// or it keeps no stable set and hits on almost nothing.
func TestPolicyShuffledEpochsRepeatedLookups(t *testing.T) {
	const n, c = 222, 64 // a dataset of 222 blocks, a cache of 64
	for _, tc := range []struct {
		name            string
		lookups, backAt int // lookups per read; a read-back that many reads later (0: none)
	}{
		{"one lookup", 1, 0},
		{"four lookups", 4, 0},
		{"read back", 1, 3},
		{"four lookups, read back", 4, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPolicy()
			rng := rand.New(rand.NewPCG(1, 7))
			order := make([]uint64, n)
			for i := range order {
				order[i] = uint64(i+1) * 0x9E3779B97F4A7C15
			}
			var ratios []float64
			for range 5 {
				rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
				hits := 0
				for i, id := range order {
					hit := false
					for range tc.lookups {
						_, ok := p.Access(id)
						hit = hit || ok
					}
					if hit {
						hits++
					} else {
						p.Admit(id, 1, c)
					}
					if tc.backAt > 0 && i >= tc.backAt {
						p.Access(order[i-tc.backAt])
					}
				}
				ratios = append(ratios, float64(hits)/n)
			}
			ideal := float64(c) / n
			t.Logf("hit ratios %.3f, ideal %.3f", ratios, ideal)
			for e, r := range ratios[2:] {
				if r < 0.9*ideal {
					t.Errorf("epoch %d: hit ratio %.3f < 0.9 x %.3f", e+3, r, ideal)
				}
			}
		})
	}
}

// A block read again after more than sameUse accesses teaches the reuse
// distance even when that is shorter than the resident count: a large cache
// with a hot set learns it.
func TestPolicyLearnsReuseInLargeCache(t *testing.T) {
	const n, hot = 4000, 1500
	p := NewPolicy()
	for id := range uint64(n) {
		p.Access(id)
		p.Admit(id, 1, n)
	}
	for range 3 {
		for id := range uint64(hot) {
			p.Access(id)
		}
	}
	mean, samples := p.ReuseDistance()
	if samples < hot || mean < hot/2 || mean > 2*n {
		t.Fatalf("reuse distance %.0f from %d samples, want about %d from %d or more", mean, samples, hot, hot)
	}
}

// A dataset that is replaced must rotate into the cache: the old blocks stop
// being hit, go stale, and the new ones take their place.
func TestPolicyDatasetChangeRotatesIn(t *testing.T) {
	const cacheBlocks = 1000
	p := &ourPolicy{p: NewPolicy(), capacity: cacheBlocks}
	runEpochs(p, 3*cacheBlocks, 3, 1)
	// New dataset: ids offset so none overlap.
	shifted := &shiftPolicy{p, 1 << 40}
	r := runEpochs(shifted, 3*cacheBlocks, 12, 2)
	t.Logf("per epoch after the change: %.3f", r)
	last := r[len(r)-1]
	if last < 0.9*(1.0/3) {
		t.Fatalf("after a dataset change the hit ratio stays at %.3f (per epoch %.3f)", last, r)
	}
}

// A new dataset smaller than the cache, after one larger than it: the old
// blocks are hit no more, and the new dataset must be cached whole once
// about an old epoch's worth of reads has found no reuse (it waited for
// three times the old reuse distance, with no disk hit: eight epochs of the
// new one here).
func TestPolicySmallerDatasetTakesOver(t *testing.T) {
	const cacheBlocks = 1660
	p := &ourPolicy{p: NewPolicy(), capacity: cacheBlocks}
	runEpochs(p, 2000, 3, 1)
	r := runEpochs(&shiftPolicy{p, 1 << 40}, 1000, 5, 2)
	t.Logf("per epoch after the change: %.3f", r)
	if r[3] == 0 || r[4] < 0.99 {
		t.Fatalf("the new dataset, 60%% of the cache, hits %.3f per epoch", r)
	}
	// The resident set of a dataset larger than the cache still holds, in
	// a shuffled order and in the same order each epoch (the resident
	// blocks first, then a run of misses longer than the cache): epochs of
	// no hit at all are what marks the old set as unused.
	d := &ourPolicy{p: NewPolicy(), capacity: cacheBlocks}
	order := make([]uint64, 3*cacheBlocks)
	for i := range order {
		order[i] = uint64(i) * 0x9E3779B97F4A7C15
	}
	for e := range 6 {
		hits := 0
		for _, id := range order {
			if d.access(id) {
				hits++
			}
		}
		if e > 0 && hits < cacheBlocks*99/100 {
			t.Fatalf("the same order each epoch, epoch %d: %d hits, want the %d resident", e, hits, cacheBlocks)
		}
	}
	q := &ourPolicy{p: NewPolicy(), capacity: cacheBlocks}
	r = runEpochs(q, 10*cacheBlocks, 8, 3)
	if last := r[len(r)-1]; last < 0.08 {
		t.Fatalf("a dataset ten times the cache hits %.3f per epoch", r)
	}
}

// A restart keeps the resident set of a dataset larger than the cache: the
// restored blocks that are hit count as the cache serving, so the ones not
// read yet in the epoch are not taken for a dataset the job left.
func TestPolicyRestartKeepsResidentSet(t *testing.T) {
	const cacheBlocks = 1000
	p := &ourPolicy{p: NewPolicy(), capacity: cacheBlocks}
	runEpochs(p, 2*cacheBlocks, 3, 1)
	q := &ourPolicy{p: NewPolicy(), capacity: cacheBlocks}
	for e := p.p.tail; e != nil; e = e.prev { // oldest first, as the disk tier restores
		q.p.Restore(e.ID, e.Size)
	}
	q.p.SetReuseDistance(p.p.ReuseDistance())
	r := runEpochs(q, 2*cacheBlocks, 3, 1)
	t.Logf("per epoch after the restart: %.3f", r)
	for _, h := range r {
		if h < 0.49 {
			t.Fatalf("after a restart the hit ratio is %.3f per epoch, want the resident half", r)
		}
	}
}

type shiftPolicy struct {
	p     tracePolicy
	shift uint64
}

func (s *shiftPolicy) access(id uint64) bool { return s.p.access(id + s.shift) }

// A small hot set read again and again beside a long scan stays resident.
func TestPolicyHotSetSurvivesScan(t *testing.T) {
	p := &ourPolicy{p: NewPolicy(), capacity: 100}
	hits := 0
	for i := 0; i < 20000; i++ {
		hot := uint64(i % 50)
		if p.access(hot) && i >= 1000 {
			hits++
		}
		p.access(1_000_000 + uint64(i)) // never reused
	}
	if want := 19000 * 9 / 10; hits < want {
		t.Fatalf("hot set hits %d, want >= %d", hits, want)
	}
}

func TestPolicyBookkeeping(t *testing.T) {
	p := NewPolicy()
	if ok, _ := p.Admit(1, 10, 5); ok {
		t.Fatal("admitted a block larger than the limit")
	}
	for id := uint64(1); id <= 3; id++ {
		if ok, v := p.Admit(id, 10, 30); !ok || len(v) != 0 {
			t.Fatalf("Admit(%d) into free space = %v %v", id, ok, v)
		}
	}
	if p.Used() != 30 || p.Len() != 3 {
		t.Fatalf("used %d len %d, want 30 3", p.Used(), p.Len())
	}
	if ok, v := p.Admit(4, 10, 30); ok || len(v) != 0 {
		t.Fatalf("full cache with fresh residents admitted a newcomer: %v %v", ok, v)
	}
	if e, ok := p.Remove(2); !ok || e.Size != 10 {
		t.Fatalf("Remove(2) = %v %v", e, ok)
	}
	if _, ok := p.Access(2); ok {
		t.Fatal("removed block still resident")
	}
	if !p.Restore(9, 20) || p.Restore(9, 20) {
		t.Fatal("Restore must insert once")
	}
	v := p.Trim(15)
	if p.Used() > 15 || len(v) == 0 {
		t.Fatalf("Trim(15) left %d used, evicted %v", p.Used(), v)
	}
	// The restored block is the oldest, so it goes first.
	if v[0].ID != 9 {
		t.Fatalf("Trim evicted %d first, want the restored block 9", v[0].ID)
	}
}
