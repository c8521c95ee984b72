package s3

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// fakeKeys is a Provider that hands out val or fails with err, counting
// fetches; it always says its keys expired.
type fakeKeys struct {
	val      credentials.Value
	err      error
	fetches  int
	deadline time.Duration // the last fetch's time to its deadline (0: none)
}

func (f *fakeKeys) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	f.fetches++
	f.deadline = 0
	if d, ok := cc.Context.Deadline(); ok {
		f.deadline = time.Until(d)
	}
	return f.val, f.err
}
func (f *fakeKeys) Retrieve() (credentials.Value, error) { return f.RetrieveWithCredContext(nil) }
func (f *fakeKeys) IsExpired() bool                      { return true }

// renewingAt returns a provider of keys A1 that expire a minute after
// *now, a renewing over it whose clock is *now (the test moves it), and a
// get of the key id through that.
func renewingAt(now *time.Time) (*fakeKeys, *renewing, func() (string, error)) {
	p := &fakeKeys{val: credentials.Value{AccessKeyID: "A1", SecretAccessKey: "s1", Expiration: now.Add(time.Minute)}}
	r := newRenewing(p)
	r.now = func() time.Time { return *now }
	return p, r, func() (string, error) {
		v, err := r.RetrieveWithCredContext(&credentials.CredContext{Context: context.Background()})
		return v.AccessKeyID, err
	}
}

// TestRenewing: after a failed fetch of keys, requests get the last keys
// while they are valid (else the failure) without a fetch each, until
// retryKeysAfter; a fetch the caller gave up on is no failure.
func TestRenewing(t *testing.T) {
	start := time.Now()
	now := start
	p, r, get := renewingAt(&now)
	// A fetch with no valid keys gets fetchTimeout, all its requests together.
	whole := func() bool { return p.deadline > fetchWhileValid && p.deadline <= fetchTimeout }
	if k, err := get(); k != "A1" || err != nil || !whole() {
		t.Fatalf("first keys %q %v (deadline %v: want at most %v)", k, err, p.deadline, fetchTimeout)
	}
	p.err = errors.New("endpoint down")
	for range 10 {
		if k, err := get(); k != "A1" || err != nil {
			t.Fatalf("while renewals fail, valid keys must serve: %q %v", k, err)
		}
	}
	if p.fetches != 2 {
		t.Fatalf("%d fetches, want 2: one failure holds the fetches off for %v", p.fetches, retryKeysAfter)
	}
	if p.deadline <= 0 || p.deadline > fetchWhileValid {
		t.Fatalf("a renewal while the keys are valid had %v to its deadline, want at most %v", p.deadline, fetchWhileValid)
	}
	now = start.Add(retryKeysAfter + time.Second)
	get()
	if p.fetches != 3 {
		t.Fatalf("%d fetches after %v, want 3", p.fetches, retryKeysAfter)
	}
	now = now.Add(retryKeysAfter + time.Second) // the wait doubled after the second failure
	get()
	if p.fetches != 3 {
		t.Fatalf("%d fetches %v after the second failure, want 3 (the wait doubles)", p.fetches, retryKeysAfter+time.Second)
	}
	now = start.Add(2 * time.Minute) // the last keys expired
	if _, err := get(); err == nil || !whole() {
		t.Fatalf("expired keys served while renewals fail (err %v), or their fetch cut short (%v)", err, p.deadline)
	}
	if _, err := get(); err == nil || p.fetches != 4 {
		t.Fatalf("err %v after %d fetches; want the failure again, without a fetch", err, p.fetches)
	}
	// A caller that gave up: the failure is not remembered.
	now = now.Add(maxRetryKeysAfter)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.RetrieveWithCredContext(&credentials.CredContext{Context: ctx})
	p.err = nil
	p.val.Expiration = now.Add(time.Hour)
	if k, err := get(); k != "A1" || err != nil || p.fetches != 6 {
		t.Fatalf("after a cancelled fetch: %q %v, %d fetches; want a fetch at once", k, err, p.fetches)
	}
}

// TestRenewingAtExpiry: a renewal that failed while the keys were valid
// (cut at fetchWhileValid: a slow source) does not hold off the whole fetch
// once they expire: requests failed for the backoff, up to a minute, with
// a source that answers within fetchTimeout.
func TestRenewingAtExpiry(t *testing.T) {
	start := time.Now()
	now := start
	p, _, get := renewingAt(&now)
	if k, err := get(); k != "A1" || err != nil {
		t.Fatalf("first keys %q %v", k, err)
	}
	now = start.Add(58 * time.Second)
	p.err = context.DeadlineExceeded // the source took longer than fetchWhileValid
	if k, err := get(); k != "A1" || err != nil {
		t.Fatalf("a renewal cut short while the keys are valid: %q %v; want the valid keys", k, err)
	}
	now = start.Add(61 * time.Second) // expired, 3 s after the failure: within its backoff
	p.err = nil
	p.val = credentials.Value{AccessKeyID: "A2", SecretAccessKey: "s2", Expiration: now.Add(time.Hour)}
	if k, err := get(); k != "A2" || err != nil || p.fetches != 3 || p.deadline <= fetchWhileValid {
		t.Fatalf("keys %q %v after %d fetches (deadline %v); want A2 from a whole fetch at once", k, err, p.fetches, p.deadline)
	}
	// A whole fetch that fails holds the next ones off as before.
	now = start.Add(2 * time.Hour)
	p.err = errors.New("endpoint down")
	if _, err := get(); err == nil {
		t.Fatal("expired keys served")
	}
	if _, err := get(); err == nil || p.fetches != 4 {
		t.Fatalf("err %v after %d fetches; want the failure again without a fetch", err, p.fetches)
	}
}
