package s3

import (
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// retryKeysAfter is how long after a failed fetch of keys the next one
// waits: requests meanwhile get the last keys while they are valid, or the
// failure at once.
const retryKeysAfter = 5 * time.Second

// renewing wraps a Provider of keys that expire. minio-go's Credentials
// fetches under its lock and, after a failure, again for every request
// that waits: with a hung endpoint each waiting request would pay a whole
// fetch timeout in turn. Here a failure is remembered for retryKeysAfter,
// and keys that have not expired yet keep serving while a renewal fails.
type renewing struct {
	p   credentials.Provider
	now func() time.Time

	mu       sync.Mutex
	last     credentials.Value // guarded by mu; the last keys fetched
	err      error             // guarded by mu; the last fetch's failure, or nil
	failedAt time.Time         // guarded by mu
}

func newRenewing(p credentials.Provider) *renewing { return &renewing{p: p, now: time.Now} }

func (r *renewing) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil && r.now().Sub(r.failedAt) < retryKeysAfter {
		return r.fallback()
	}
	v, err := r.p.RetrieveWithCredContext(cc)
	if err == nil {
		r.last, r.err = v, nil
		return v, nil
	}
	if cc != nil && cc.Context != nil && cc.Context.Err() != nil {
		return credentials.Value{}, err // the caller gave up: no failure of the source
	}
	r.err, r.failedAt = err, r.now()
	return r.fallback()
}

// fallback returns the last keys while they are valid, else the failure.
// Called with r.mu held.
func (r *renewing) fallback() (credentials.Value, error) {
	if r.last.AccessKeyID != "" && (r.last.Expiration.IsZero() || r.now().Before(r.last.Expiration)) {
		return r.last, nil
	}
	return credentials.Value{}, r.err
}

func (r *renewing) Retrieve() (credentials.Value, error) { return r.RetrieveWithCredContext(nil) }

func (r *renewing) IsExpired() bool { return r.p.IsExpired() }
