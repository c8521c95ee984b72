package s3

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/dataccel/dataccel/store"
)

// GETs are built and signed here (SigV4, unsigned payload, the signing key
// kept for the day) rather than by minio-go, whose request building and
// signing cost about as much client CPU as the rest of a small GET, and
// sent on connections of our own (wire), not through net/http's Transport,
// for the same reason. How the bucket is addressed (path or virtual host)
// and the region are learned once from a URL minio-go presigns, so both
// paths address the same URL.

// getter sends GETs for one bucket.
type getter struct {
	presigner *minio.Client
	creds     *credentials.Credentials // nil: anonymous
	renews    bool                     // creds come from a provider that can hand out new keys
	bucket    string
	http      *http.Client // credentials, and GETs through a proxy
	wire      *wire        // GETs

	mu sync.Mutex
	// expired: the keys (access key and token) last dropped for an
	// ExpiredToken answer, and when. Guarded by mu.
	expired   string
	expiredAt time.Time
	base      string // guarded by mu; scheme://host, "" until learned
	prefix    string // guarded by mu; the path before a key ("/bucket/" or "/")
	region    string // guarded by mu
	day       string // guarded by mu; the date (yyyymmdd) of key
	secret    string // guarded by mu; the secret key was derived from
	key       []byte // guarded by mu; signing key for day, region, s3
}

// target returns the base URL, the path prefix and the region, learning
// them on first use. The presign runs outside g.mu: it may fetch keys or
// ask the bucket's region, and a request waiting on the lock could not be
// cancelled; first callers at once each presign, and agree.
func (g *getter) target(ctx context.Context) (base, prefix, region string, err error) {
	g.mu.Lock()
	base, prefix, region = g.base, g.prefix, g.region
	g.mu.Unlock()
	if base != "" {
		return base, prefix, region, nil
	}
	const probe = "k"
	u, err := g.presigner.Presign(ctx, http.MethodGet, g.bucket, probe, time.Minute, nil)
	if err != nil {
		return "", "", "", g.mapErr(ctx, err)
	}
	// X-Amz-Credential is key-id/date/region/s3/aws4_request.
	scope := strings.Split(u.Query().Get("X-Amz-Credential"), "/")
	if len(scope) != 5 || !strings.HasSuffix(u.Path, "/"+probe) {
		return "", "", "", fmt.Errorf("unexpected presigned URL form for bucket %q", g.bucket)
	}
	base, prefix, region = u.Scheme+"://"+u.Host, strings.TrimSuffix(u.Path, probe), scope[2]
	g.mu.Lock()
	g.base, g.prefix, g.region = base, prefix, region
	g.mu.Unlock()
	return base, prefix, region, nil
}

// mapErr is mapErr, but for an answer that says the keys expired before
// their provider said they would (clock skew, a session ended early): it
// drops them once, so the next request fetches new ones, and the error
// stays retryable. When the provider hands out the keys it dropped again,
// they cannot be renewed: ErrAccess, as for keys that never renew. The
// failures of requests in flight when the keys were dropped (signed with
// them too) drop nothing more for a second: one fetch, not one each.
func (g *getter) mapErr(ctx context.Context, err error) error { return g.mapErrSigned(ctx, err, "") }

// signedWith names keys as mapErrSigned compares them.
func signedWith(v credentials.Value) string { return v.AccessKeyID + "\x00" + v.SessionToken }

// mapErrSigned is mapErr for a request signed with the keys signed names
// (signedWith; "" if unknown). An answer to a request signed with keys
// replaced since drops nothing and stays retryable, however late it comes:
// a slow answer to the old keys once dropped the new ones, and when the
// provider handed those out again, failed for good though they worked.
func (g *getter) mapErrSigned(ctx context.Context, err error, signed string) error {
	code := minio.ToErrorResponse(err).Code
	if !g.renews || code != "ExpiredToken" && code != "TokenRefreshRequired" {
		return mapErr(err)
	}
	v, verr := g.creds.GetWithContext(&credentials.CredContext{Client: g.http, Context: ctx})
	if verr != nil {
		return fmt.Errorf("the keys expired early, and new ones could not be fetched (%v): %w", verr, mapErr(err))
	}
	keys := signedWith(v)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case signed != "" && signed != keys:
		// Signed with keys replaced since: the current ones are new.
	case keys == g.expired:
		return mapErr(err) // the provider has no others
	case signed == "" && time.Since(g.expiredAt) < time.Second:
		// Signed before the keys dropped a moment ago; these are new.
	default:
		g.expired, g.expiredAt = keys, time.Now()
		g.creds.Expire()
	}
	return fmt.Errorf("the keys expired early; new ones are fetched: %w", err)
}

// signingKey returns the SigV4 key for secret on day, derived once a day.
func (g *getter) signingKey(secret, day, region string) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.day != day || g.secret != secret {
		k := hmacSHA256([]byte("AWS4"+secret), day)
		k = hmacSHA256(k, region)
		k = hmacSHA256(k, "s3")
		g.key, g.day, g.secret = hmacSHA256(k, "aws4_request"), day, secret
	}
	return g.key
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

const unsignedPayload = "UNSIGNED-PAYLOAD"

// encodePath is s3utils.EncodePath without the regexp it runs on every
// path first: a path of unreserved characters only (most keys) is its own
// encoding; any other goes to EncodePath.
func encodePath(p string) string {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == '~', c == '/':
		default:
			return s3utils.EncodePath(p)
		}
	}
	return p
}

// get sends GET for obj's bytes [off, off+n) (n < 0: to the end), If-Match
// its ETag (If-Unmodified-Since its time, for a made one), and returns the
// body of a 200 or 206 answer of obj's size.
func (g *getter) get(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	base, prefix, region, err := g.target(ctx)
	if err != nil {
		return nil, err
	}
	path := encodePath(prefix + obj.Key)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	var rng string
	switch {
	case off == 0 && n == obj.Size:
		// The whole object: no Range. Some servers send a whole object
		// straight from the file (sendfile) and copy any range through
		// user space, even one that covers it all.
	case n > 0:
		rng = "bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+n-1, 10)
	case off > 0:
		rng = "bytes=" + strconv.FormatInt(off, 10) + "-"
	}
	var match string
	switch {
	case store.IsMadeETag(obj.ETag):
		if !obj.ModTime.IsZero() {
			// The next second: a HEAD's time has lost the object's
			// fraction of a second, which some servers compare.
			since := obj.ModTime.Truncate(time.Second).Add(time.Second)
			req.Header.Set("If-Unmodified-Since", since.UTC().Format(http.TimeFormat))
		}
	case obj.ETag != "":
		match = `"` + obj.ETag + `"`
		req.Header.Set("If-Match", match)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	req.Header.Set("User-Agent", "dataccel/1")
	var signed string
	if g.creds != nil {
		v, err := g.creds.GetWithContext(&credentials.CredContext{Client: g.http, Context: req.Context()})
		if err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
		if v.AccessKeyID != "" {
			g.sign(req, v, region, path, match, rng, unsignedPayload, time.Now())
			signed = signedWith(v)
		}
	}
	resp, err := g.wire.Do(req)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent || (resp.StatusCode == http.StatusOK && off == 0):
	case resp.StatusCode == http.StatusOK:
		resp.Body.Close()
		return nil, fmt.Errorf("the server ignored the range %s (status %s): %w", rng, resp.Status, store.ErrRefused)
	default:
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, g.mapErrSigned(ctx, errorResponse(resp, body, g.bucket, obj.Key), signed)
	}
	size := resp.ContentLength // of a 200: the whole object
	if resp.StatusCode == http.StatusPartialContent {
		var err error
		if size, err = checkRange(resp.Header.Get("Content-Range"), off, n); err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("range %s: %w", rng, err)
		}
	}
	// A server that ignores If-Match (or that sent no ETag to match) would
	// hand out the new version: check what can be checked.
	if size >= 0 && obj.Size > 0 && size != obj.Size {
		resp.Body.Close()
		return nil, fmt.Errorf("the object has %d bytes, want %d: %w", size, obj.Size, store.ErrChanged)
	}
	if etag := strings.Trim(resp.Header.Get("ETag"), `"`); obj.ETag != "" && !store.IsMadeETag(obj.ETag) && etag != "" && etag != obj.ETag {
		resp.Body.Close()
		return nil, fmt.Errorf("etag %s, want %s: %w", etag, obj.ETag, store.ErrChanged)
	}
	return resp.Body, nil
}

// sign adds SigV4 headers to req, a GET of path (as encoded in the URL)
// with the given If-Match and Range values ("": none) and payload hash.
func (g *getter) sign(req *http.Request, v credentials.Value, region, path, match, rng, payload string, now time.Time) {
	stamp := now.UTC().Format("20060102T150405Z")
	day := stamp[:8]
	req.Header.Set("X-Amz-Date", stamp)
	req.Header.Set("X-Amz-Content-Sha256", payload)
	if v.SessionToken != "" {
		req.Header.Set("X-Amz-Security-Token", v.SessionToken)
	}
	// Canonical request: headers in sorted order, lower case.
	var cr, signed strings.Builder
	cr.Grow(256 + len(path))
	cr.WriteString("GET\n")
	cr.WriteString(path)
	cr.WriteString("\n\nhost:")
	cr.WriteString(req.URL.Host)
	cr.WriteByte('\n')
	signed.WriteString("host")
	if match != "" {
		cr.WriteString("if-match:" + match + "\n")
		signed.WriteString(";if-match")
	}
	if rng != "" {
		cr.WriteString("range:" + rng + "\n")
		signed.WriteString(";range")
	}
	cr.WriteString("x-amz-content-sha256:" + payload + "\nx-amz-date:" + stamp + "\n")
	signed.WriteString(";x-amz-content-sha256;x-amz-date")
	if v.SessionToken != "" {
		cr.WriteString("x-amz-security-token:" + v.SessionToken + "\n")
		signed.WriteString(";x-amz-security-token")
	}
	cr.WriteString("\n" + signed.String() + "\n" + payload)
	sum := sha256.Sum256([]byte(cr.String()))
	scope := day + "/" + region + "/s3/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + stamp + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	sig := hex.EncodeToString(hmacSHA256(g.signingKey(v.SecretAccessKey, day, region), toSign))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+v.AccessKeyID+"/"+scope+
		", SignedHeaders="+signed.String()+", Signature="+sig)
}

// maxErrorBody bounds the error document read from a failed request.
const maxErrorBody = 64 << 10

// errorResponse decodes the body of an S3 error answer. A body without an
// error document (a HEAD-like answer, a proxy's page) gets a code from the
// status, as minio-go gives it.
func errorResponse(resp *http.Response, body []byte, bucket, key string) minio.ErrorResponse {
	e := minio.ErrorResponse{}
	if xml.Unmarshal(body, &e) != nil || e.Code == "" {
		e = minio.ErrorResponse{Message: strings.TrimSpace(string(body[:min(len(body), 200)]))}
		switch resp.StatusCode {
		case http.StatusNotFound:
			e.Code = "NoSuchKey"
		case http.StatusForbidden:
			e.Code = "AccessDenied"
		case http.StatusPreconditionFailed:
			e.Code = "PreconditionFailed"
		default:
			e.Code = resp.Status
		}
	}
	e.StatusCode, e.BucketName, e.Key = resp.StatusCode, bucket, key
	return e
}

// checkRange checks that a 206 answer's Content-Range ("bytes a-b/total")
// holds the bytes asked for, [off, off+n) (n < 0: to the end): a proxy
// that answers another range would otherwise hand out wrong bytes as
// these. A range past the object's end ends at its last byte. It returns the
// object's size the answer gives (-1: "*", unknown).
func checkRange(cr string, off, n int64) (int64, error) {
	spec, ok := strings.CutPrefix(cr, "bytes ")
	span, total, ok2 := strings.Cut(spec, "/")
	first, last, ok3 := strings.Cut(span, "-")
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	if !ok || !ok2 || !ok3 || err1 != nil || err2 != nil || b < a {
		return 0, fmt.Errorf("a partial answer with Content-Range %q", cr)
	}
	size, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		size = -1 // "*": unknown
	}
	end := off + n - 1
	switch {
	case n < 0 && size >= 0:
		end = size - 1
	case n < 0:
		end = b
	case size >= 0 && end >= size:
		end = size - 1
	}
	if a != off || b != end {
		return 0, fmt.Errorf("the server answered bytes %d-%d for %d-%d", a, b, off, end)
	}
	return size, nil
}
