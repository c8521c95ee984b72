// Package s3 implements store.Store on any S3-compatible server with
// minio-go v7; only it and cmd/dataccel (for credential sources) import
// minio-go. It maps S3 error codes to the store's sentinel errors and pins
// ranged reads to an ETag. It builds and signs GETs itself (get.go) and
// sends them on HTTP/1.1 connections it pools itself (wire.go, http1.go),
// lists long directories in parallel key ranges and decodes LIST pages
// itself (list.go, listpage.go).
// It does not retry beyond a small bounded count (retries with backoff,
// timeouts and hedging are store decorators), cache, or read flags and env:
// the caller passes a Config.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/dataccel/dataccel/store"
)

// CheckBucketName says why name is not a bucket name as S3 defines one
// today (3-63 lower-case letters, digits, '.' and '-'), or returns nil.
// Some stores take other names (AWS's oldest buckets, Ceph relaxed), so it
// explains a failure; it refuses nothing by itself.
func CheckBucketName(name string) error {
	return s3utils.CheckValidBucketNameStrict(name)
}

// Credentials are static keys; an empty AccessKey means anonymous access.
type Credentials struct {
	AccessKey    string
	SecretKey    string
	SessionToken string
}

// String never prints the secret, so a Config can be logged safely.
func (c Credentials) String() string {
	if c.AccessKey == "" {
		return "anonymous"
	}
	return "key " + c.AccessKey[:min(4, len(c.AccessKey))] + "…"
}

// Config says where and how to reach the bucket.
type Config struct {
	// Endpoint is a URL (http://host:port or https://host); empty means AWS S3.
	Endpoint string
	Region   string
	Bucket   string
	// PathStyle forces path-style requests (needed by most non-AWS servers).
	PathStyle bool
	// DualStack reaches AWS at its dual-stack (IPv4 and IPv6) hosts,
	// s3.dualstack.REGION.amazonaws.com; off, at the regional ones,
	// s3.REGION.amazonaws.com, as AWS's SDKs do unless asked: those are
	// the names a VPC's private DNS for S3 interface endpoints answers.
	DualStack   bool
	Credentials Credentials
	// Provider, when set, hands out keys in place of Credentials, and
	// renews them when it says they expired (temporary keys from STS, a
	// container credentials endpoint or the instance profile, a credentials
	// file that is replaced): every request signs with its current keys.
	Provider credentials.Provider
	// MaxConns bounds idle keep-alive connections kept to the server; it
	// should be at least the number of GETs in flight.
	MaxConns int
	// ListParallel bounds the LIST requests of one listing in flight (0:
	// 8; 1: page after page).
	ListParallel int
	// ListPage is the number of keys asked per LIST request (0: the
	// server's default, 1000 on S3).
	ListPage int
	// MaxRetries bounds minio-go's own tries of a request (default 1: no
	// retries; store.Retrying is the one retry layer, so each retry is counted).
	MaxRetries int
	// Dial opens the store's connections (nil: a net.Dialer). A test
	// routes the hosts a virtual-hosted bucket is reached at (AWS's) to a
	// local server with it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Store is a store.Store backed by one bucket.
type Store struct {
	client  *minio.Client
	oneShot *minio.Client // same, without keep-alive
	bucket  string

	http                       *http.Client  // the client's transport, for LIST pages (listpage.go)
	get                        *getter       // GETs (get.go)
	presigner                  *minio.Client // client, or one with stand-in keys when anonymous
	anonymous                  bool
	listParallel, listPageKeys int
}

var _ store.Store = (*Store)(nil)

// New builds a client. It does not contact the server: call Check for that.
func New(cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: no bucket given")
	}
	host, secure := "s3.amazonaws.com", true
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("s3: endpoint %q: want http://host[:port] or https://host[:port]", cfg.Endpoint)
		}
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("s3: endpoint %q: a path is not supported; give the bucket separately", cfg.Endpoint)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 256
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 1
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	var creds *credentials.Credentials
	anonymous := false
	switch {
	case cfg.Provider != nil:
		creds = credentials.New(newRenewing(cfg.Provider))
	case cfg.Credentials.AccessKey != "":
		creds = credentials.NewStaticV4(cfg.Credentials.AccessKey, cfg.Credentials.SecretKey, cfg.Credentials.SessionToken)
	default:
		creds, anonymous = credentials.New(&credentials.Static{}), true
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	newClient := func(creds *credentials.Credentials, t http.RoundTripper, retries int) (*minio.Client, error) {
		c, err := minio.New(host, &minio.Options{
			Creds: creds, Secure: secure, Region: cfg.Region, BucketLookup: lookup, Transport: t, MaxRetries: retries,
		})
		if err != nil {
			return nil, fmt.Errorf("s3: client for %s: %w", host, err)
		}
		c.SetAppInfo("dataccel", "1")
		c.SetS3EnableDualstack(cfg.DualStack) // minio-go's default for AWS is on
		return c, nil
	}
	transport := newTransport(cfg.MaxConns, cfg.Dial)
	client, err := newClient(creds, transport, cfg.MaxRetries)
	if err != nil {
		return nil, err
	}
	presigner := client
	if anonymous {
		if presigner, err = newClient(credentials.NewStaticV4("anonymous", "anonymous", ""), transport, 0); err != nil {
			return nil, err
		}
	}
	t := newTransport(1, cfg.Dial)
	t.DisableKeepAlives = true
	oneShot, err := newClient(creds, t, cfg.MaxRetries)
	if err != nil {
		return nil, err
	}
	if cfg.ListParallel <= 0 {
		cfg.ListParallel = 8
	}
	hc := &http.Client{Transport: transport}
	get := &getter{presigner: presigner, bucket: cfg.Bucket, http: hc, wire: newWire(cfg.MaxConns, hc, cfg.Dial)}
	if !anonymous {
		get.creds, get.renews = creds, cfg.Provider != nil
	}
	return &Store{client: client, oneShot: oneShot, bucket: cfg.Bucket,
		http: hc, get: get, presigner: presigner, anonymous: anonymous, listParallel: cfg.ListParallel, listPageKeys: max(cfg.ListPage, 0)}, nil
}

func newTransport(maxConns int, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dial,
		MaxIdleConns:          maxConns,
		MaxIdleConnsPerHost:   maxConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Objects are read as they are (images, shards): gzip would only cost CPU.
		DisableCompression: true,
		WriteBufferSize:    64 << 10,
		// Small: a body read into a block larger than the buffer goes
		// straight from the socket into the block, not through the buffer
		// (one copy less). 16 KiB still takes the headers in one read.
		ReadBufferSize: 16 << 10,
	}
}

// EndpointRegion is the region an AWS endpoint's host names
// (s3.eu-west-1.amazonaws.com: eu-west-1), or "" for any other endpoint.
func EndpointRegion(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return ""
	}
	return s3utils.GetRegionFromURL(*u)
}

// Bucket is the bucket this store reads.
func (s *Store) Bucket() string { return s.bucket }

// Check contacts the server once and says whether the bucket can be read
// under prefix: an unreachable endpoint, bad credentials or a missing bucket
// each give a distinct error. It lists under prefix, not the bucket's root,
// which a policy may allow to the dataset's prefix only. Bound it with a
// context deadline.
func (s *Store) Check(ctx context.Context, prefix string) error {
	lctx, cancel := context.WithCancel(ctx)
	objects := s.client.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, MaxKeys: 1})
	first, ok := <-objects
	// Stop the listing after its first answer, and drain it: minio-go's
	// lister, cancelled, still sends the cancel's error, and would wait on
	// a full channel for good.
	cancel()
	for range objects {
	}
	if ok && first.Err != nil {
		// Keys just fetched: an ExpiredToken here is not worth renewing.
		return fmt.Errorf("check bucket %q: %w", s.bucket, mapErr(first.Err))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("check bucket %q: %w", s.bucket, err)
	}
	return nil
}

// Stat implements store.Store.
func (s *Store) Stat(ctx context.Context, key string) (store.Object, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return store.Object{}, fmt.Errorf("stat %q: %w", key, s.get.mapErr(ctx, err))
	}
	return toObject(info), nil
}

// ReadRange implements store.Store with a ranged GET carrying If-Match.
func (s *Store) ReadRange(ctx context.Context, obj store.Object, off, n int64) (io.ReadCloser, error) {
	if n == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	body, err := s.get.get(ctx, obj, off, n)
	if err != nil {
		return nil, fmt.Errorf("read %q [%d,+%d): %w", obj.Key, off, n, err)
	}
	return body, nil
}

// MakeBucket creates the bucket if it does not exist (tests, bench gen).
func (s *Store) MakeBucket(ctx context.Context) error {
	err := s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{})
	if err != nil {
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			return nil
		}
		return fmt.Errorf("make bucket %q: %w", s.bucket, s.get.mapErr(ctx, err))
	}
	return nil
}

// Put uploads one object of a known size and returns its metadata.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) (store.Object, error) {
	client := s.client
	if size == 0 {
		// An empty body goes out chunk-encoded, and some servers (versitygw)
		// leave its trailer unread and answer it with a stray 400 that the
		// next request on the connection would take for its own: send it
		// on a connection used once.
		client = s.oneShot
	}
	info, err := client.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{
		ContentType:      "application/octet-stream",
		DisableMultipart: size >= 0 && size < 64<<20,
	})
	if err != nil {
		return store.Object{}, fmt.Errorf("put %q: %w", key, s.get.mapErr(ctx, err))
	}
	return object(key, info.Size, info.ETag, info.LastModified), nil
}

// Remove deletes one object; a missing object is not an error.
func (s *Store) Remove(ctx context.Context, key string) error {
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("remove %q: %w", key, s.get.mapErr(ctx, err))
	}
	return nil
}

func toObject(info minio.ObjectInfo) store.Object {
	return object(info.Key, info.Size, info.ETag, info.LastModified)
}

// object is the metadata of an object as the server sent it, with the ETag
// unquoted, or made from size and time when the server sent none: every
// object the store hands out can be pinned.
func object(key string, size int64, etag string, mod time.Time) store.Object {
	o := store.Object{Key: key, Size: size, ETag: strings.Trim(etag, `"`), ModTime: mod}
	if o.ETag == "" {
		o.ETag = store.MadeETag(size, mod)
	}
	return o
}

// mapErr turns S3 error responses into the store's sentinel errors, keeping
// the original error in the chain for its message.
func mapErr(err error) error {
	resp := minio.ToErrorResponse(err)
	var sentinel error
	switch resp.Code {
	case "NoSuchKey", "NotFound":
		sentinel = store.ErrNotExist
	case "NoSuchBucket":
		sentinel = store.ErrNoBucket
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "AllAccessDisabled",
		"XAdminUserNotFound": // versitygw: an unknown access key (with a 404)
		sentinel = store.ErrAccess
	case "PreconditionFailed":
		sentinel = store.ErrChanged
	case "PermanentRedirect": // a 301: the bucket lives in another region
		sentinel = store.ErrRefused
	case "RequestTimeout", "Throttling", "ThrottlingException", "RequestThrottled", "SlowDown":
		// retryable, whatever the status (S3 sends RequestTimeout as a 400)
	default:
		switch resp.StatusCode {
		case http.StatusNotFound:
			sentinel = store.ErrNotExist
		case http.StatusForbidden:
			sentinel = store.ErrAccess
		case http.StatusPreconditionFailed:
			sentinel = store.ErrChanged
		case http.StatusRequestTimeout, http.StatusTooManyRequests:
			// retryable
		default:
			if resp.StatusCode >= 400 && resp.StatusCode < 500 {
				sentinel = store.ErrRefused
			}
		}
	}
	if sentinel == nil {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}
