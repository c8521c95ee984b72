package prefetch

import (
	"os"

	"github.com/dataccel/dataccel/store"
)

// PageCache is where blocks fetched ahead of the reader can be put so that
// the reader finds them without asking: the kernel's page cache of the
// mounted file (the fuse layer implements it with FUSE_NOTIFY_STORE). A
// read served there costs no request to this process, no wait and no copy
// out of the loader on the reader's path.
//
// Store puts data at offset off of obj's file. It must be safe for
// concurrent use, may wait briefly (for pages a read in progress holds) and
// must never wait for the loader. An error means nothing was stored, or not
// all of it: the block stays ready for a read.
type PageCache interface {
	Store(obj store.Object, off int64, data []byte) error
}

// Pushes waiting for a pusher, at most: a block waiting here keeps its
// budget, so a full queue turns pushes into plain ready blocks.
const pushQueue = 64

// pushers push queued blocks; two, so that one waiting on a page lock does
// not stop the other.
const pushers = 2

// push is a block handed to the page cache.
type push struct {
	f      *flight
	pc     PageCache
	charge int64 // f's charge when queued, counted in Loader.pushBytes
}

// pushCap is the most budget that blocks queued for or in a push may hold:
// half of it, and always room for one read's block besides. A push
// can wait on the pages a kernel READ of its file locks, and that READ on
// the budget: evicting a pushed block from the ready map frees no budget
// while its push holds it, so without the cap pushes could hold all of it
// and the READ, the push and every later read of those files would wait
// for good.
func pushCap(limit, readCharge int64) int64 {
	return max(min(limit/2, limit-readCharge), 0)
}

// SetPageCache sets where cross-file prefetch puts the files it fetches
// ahead of the reader, besides the ready map (nil: nowhere). It does
// nothing without CrossFile.
func (l *Loader) SetPageCache(pc PageCache) {
	l.mu.Lock()
	l.pc = pc
	l.mu.Unlock()
}

// pushLocked queues f for the page cache, holding a reference on it until
// the push ends. A full queue skips the push. Called with l.mu held.
func (l *Loader) pushLocked(f *flight) {
	if l.pc == nil || l.closed {
		return
	}
	if l.pushBytes+f.charge > l.pushCap {
		l.stats.PushSkipped.Add(1)
		return
	}
	select {
	case l.pushq <- push{f: f, pc: l.pc, charge: f.charge}:
		f.refs++
		l.pushBytes += f.charge
	default:
		l.stats.PushSkipped.Add(1)
	}
}

// pusher stores queued blocks until the loader closes, then drops the rest
// (Close sets closed before it cancels, so nothing is queued after).
func (l *Loader) pusher() {
	defer l.wg.Done()
	for {
		select {
		case p := <-l.pushq:
			off := keyOff(p.f.key)
			if data := pushedPart(p.f, off); len(data) > 0 {
				l.pushed(p, data, p.pc.Store(p.f.obj, off, data))
			} else {
				l.dropPush(p) // a file of one page, left to its read
			}
		case <-l.ctx.Done():
			for {
				select {
				case p := <-l.pushq:
					l.dropPush(p)
				default:
					return
				}
			}
		}
	}
}

// pushedPart is what of f's block at offset off goes into the page cache:
// all of it, or with landTail, all but the file's last page when the block
// holds it.
func pushedPart(f *flight, off int64) []byte {
	if f.land&landTail == 0 || off+int64(len(f.data)) < f.obj.Size {
		return f.data
	}
	page := int64(os.Getpagesize())
	return f.data[:max((f.obj.Size-1)/page*page-off, 0)]
}

// pushed ends a push. A block wholly in the page cache leaves the ready
// map: the reader will find it there (or, if the kernel dropped it, in the
// cache tier). A block pushed but for its tail stays ready for the read of
// that tail, and a failed push leaves it ready, as if it had not been tried.
func (l *Loader) pushed(p push, data []byte, err error) {
	f := p.f
	var charge int64
	l.mu.Lock()
	l.pushBytes -= p.charge
	if err == nil {
		l.handed.mark(f.key, int64(len(data)))
		l.stats.Pushed.Add(1)
		l.stats.PushedBytes.Add(int64(len(data)))
		if !f.used && len(data) == len(f.data) {
			charge = l.removeReadyLocked(f)
		}
	} else {
		l.stats.PushFailed.Add(1)
	}
	charge += l.unrefLocked(f)
	l.mu.Unlock()
	if charge > 0 {
		l.mem.release(charge)
	}
	if err != nil {
		l.log.Debug("prefetch: block not pushed to the page cache", "key", f.key.Object, "offset", keyOff(f.key), "err", err)
	}
}

// dropPush ends a push that stores nothing.
func (l *Loader) dropPush(p push) {
	l.mu.Lock()
	l.pushBytes -= p.charge
	charge := l.unrefLocked(p.f)
	l.mu.Unlock()
	if charge > 0 {
		l.mem.release(charge)
	}
}
