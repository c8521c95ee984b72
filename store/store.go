// Package store defines what dataccel needs from object storage: the Store
// interface, object metadata, sentinel errors, decorators that add
// behaviour around any Store (retries with deadlines, request counting),
// helpers over any Store (ListAll, the parallel walk) and the namespace
// manifest's file format.
//
// It owns no network code: store/s3 is the only implementation that talks to
// a server. It knows nothing of caches or FUSE.
package store

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
)

// Object is the metadata of one object, or of a common prefix (a directory)
// when IsPrefix is set; a prefix has only Key (ending in "/").
type Object struct {
	Key      string
	Size     int64
	ETag     string
	ModTime  time.Time
	IsPrefix bool
}

// MadeETag stands in for the ETag of an object its server listed without one
// (some S3-compatible servers send none): its size and modification time, to
// the second (a listing's times have milliseconds, a HEAD's seconds). Caches
// keyed by ETag then never mix two versions of the object, and a store pins
// a read of it by its time instead, to the second after (a version written
// that soon at the same size is not told apart).
func MadeETag(size int64, mod time.Time) string {
	return madeETagPrefix + strconv.FormatInt(size, 10) + "@" + strconv.FormatInt(mod.Unix(), 10)
}

// madeETagPrefix cannot start a real ETag: an entity tag holds no space
// (RFC 9110).
const madeETagPrefix = "~ "

// IsMadeETag reports whether etag was made by MadeETag.
func IsMadeETag(etag string) bool { return strings.HasPrefix(etag, madeETagPrefix) }

// Store is the read side of an object store.
type Store interface {
	// Stat returns the metadata of key, or an error wrapping ErrNotExist.
	Stat(ctx context.Context, key string) (Object, error)
	// List calls fn for every object under prefix. With
	// recursive false, it lists one level: keys past the next "/" are
	// folded into common prefixes, reported as Objects with IsPrefix set.
	// Entries come in no fixed order (a long listing may be read in key
	// ranges at once): callers that need one order sort. fn is never
	// called concurrently. An error returned by fn stops the listing and
	// is returned.
	List(ctx context.Context, prefix string, recursive bool, fn func(Object) error) error
	// ReadRange returns n bytes of obj from off (n < 0: to the end), pinned
	// to obj.ETag (to obj.ModTime for a MadeETag): if the object changed,
	// the error wraps ErrChanged and no byte of the new version is returned.
	ReadRange(ctx context.Context, obj Object, off, n int64) (io.ReadCloser, error)
}

// Sentinel errors. Implementations wrap them with the operation and key.
var (
	ErrNotExist = errors.New("object does not exist")
	ErrChanged  = errors.New("object changed since it was listed")
	ErrAccess   = errors.New("access denied")
	// ErrNoBucket: the bucket itself is missing (not just a key).
	ErrNoBucket = errors.New("bucket does not exist")
	// ErrRefused: the store refused the request itself (a 4xx answer
	// other than those above, a timeout or throttling: a bad range, a
	// wrong region), which sending it again cannot change.
	ErrRefused = errors.New("request refused by the store")
	// ErrGaveUp: Retrying sent the request until its tries or IOTimeout ran
	// out; the error wraps the last failure too.
	ErrGaveUp = errors.New("gave up after retries")
)
