package s3

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// retryKeysAfter is how long after a failed fetch of keys the next one
// waits, doubling with each failure in a row up to maxRetryKeysAfter:
// requests meanwhile get the last keys while they are valid, or the
// failure at once.
const (
	retryKeysAfter    = 5 * time.Second
	maxRetryKeysAfter = time.Minute
)

// fetchTimeout bounds one fetch of keys, all its requests together (an
// instance profile's takes three); fetchWhileValid bounds a renewal while
// the last keys are still valid: minio-go fetches under its lock, so every
// request waits on the fetch, and a hung source must not stall them while
// keys exist.
const (
	fetchTimeout    = 10 * time.Second
	fetchWhileValid = time.Second
)

// renewing wraps a Provider of keys that expire. minio-go's Credentials
// fetches under its lock and, after a failure, again for every request
// that waits: with a hung endpoint each waiting request would pay a whole
// fetch timeout in turn. Here a failure is remembered (retryKeysAfter,
// doubling), a fetch gets fetchTimeout, a renewal while the last keys are
// valid fetchWhileValid,
// and those keys keep serving while renewals fail.
type renewing struct {
	p   credentials.Provider
	now func() time.Time

	mu       sync.Mutex
	last     credentials.Value // guarded by mu; the last keys fetched
	err      error             // guarded by mu; the last fetch's failure, or nil
	failedAt time.Time         // guarded by mu
	failures int               // guarded by mu; in a row
	// failedValid: the last failure was a renewal cut at fetchWhileValid,
	// which says little of a source slower than that. Guarded by mu.
	failedValid bool
}

func newRenewing(p credentials.Provider) *renewing { return &renewing{p: p, now: time.Now} }

func (r *renewing) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Once the keys expire, a renewal that only had fetchWhileValid gets
	// a whole fetch at once: waiting out its backoff failed every request
	// for up to a minute, from a source that answers in two seconds.
	if r.err != nil && !(r.failedValid && !r.valid()) && r.now().Sub(r.failedAt) < min(retryKeysAfter<<(r.failures-1), maxRetryKeysAfter) {
		return r.fallback()
	}
	var caller context.Context
	fetch := credentials.CredContext{}
	if cc != nil {
		fetch, caller = *cc, cc.Context
	}
	timeout := fetchTimeout
	if r.valid() {
		timeout = fetchWhileValid
	}
	ctx, cancel := context.WithTimeout(cmp.Or(caller, context.Background()), timeout)
	defer cancel()
	fetch.Context = ctx
	v, err := r.p.RetrieveWithCredContext(&fetch)
	if err == nil {
		r.last, r.err, r.failures, r.failedValid = v, nil, 0, false
		return v, nil
	}
	if caller != nil && caller.Err() != nil {
		return credentials.Value{}, err // the caller gave up: no failure of the source
	}
	r.err, r.failedAt, r.failedValid = err, r.now(), timeout == fetchWhileValid
	r.failures = min(r.failures+1, 8)
	return r.fallback()
}

// valid says whether the last keys have not expired. Called with r.mu held.
func (r *renewing) valid() bool {
	return r.last.AccessKeyID != "" && (r.last.Expiration.IsZero() || r.now().Before(r.last.Expiration))
}

// fallback returns the last keys while they are valid, else the failure.
// Called with r.mu held.
func (r *renewing) fallback() (credentials.Value, error) {
	if r.valid() {
		return r.last, nil
	}
	return credentials.Value{}, r.err
}

func (r *renewing) Retrieve() (credentials.Value, error) { return r.RetrieveWithCredContext(nil) }

func (r *renewing) IsExpired() bool { return r.p.IsExpired() }
