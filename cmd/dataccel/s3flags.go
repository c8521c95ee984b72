package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/dataccel/dataccel/store"
	"github.com/dataccel/dataccel/store/s3"
)

// s3Flags are the flags every command that talks to a bucket shares.
// Secrets never come from flags: only from the environment or a file.
type s3Flags struct {
	endpoint        string
	region          string
	pathStyle       string
	credentialsFile string
	profile         string
	// refused secret-carrying flags: set means the user tried to pass one.
	accessKey, secretKey string
	// log is the command's logger, set before the store is opened; nil
	// discards.
	log *slog.Logger
}

func (f *s3Flags) logger() *slog.Logger {
	if f.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.log
}

func (f *s3Flags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoint, "endpoint", "", "S3 endpoint URL, http:// or https:// (default: AWS S3)")
	fs.StringVar(&f.region, "region", "", "S3 region (default: $AWS_REGION, else the region an AWS --endpoint names, else us-east-1)")
	fs.StringVar(&f.pathStyle, "path-style", "auto", "path-style requests: auto (on for non-AWS endpoints), on, off")
	fs.StringVar(&f.credentialsFile, "credentials-file", "", "AWS credentials file, read again when it changes (default: $AWS_SHARED_CREDENTIALS_FILE; else web identity or container credentials from the environment, then ~/.aws/credentials); AWS_ACCESS_KEY_ID in the environment takes precedence")
	fs.StringVar(&f.profile, "profile", "", "profile in the credentials file (default: $AWS_PROFILE, else default)")
	// Accepted only to refuse them with a clear message: a secret in argv is
	// visible to every user through ps and /proc.
	fs.StringVar(&f.accessKey, "access-key", "", "refused: use AWS_ACCESS_KEY_ID or a credentials file")
	fs.StringVar(&f.secretKey, "secret-key", "", "refused: use AWS_SECRET_ACCESS_KEY or a credentials file")
	fs.MarkHidden("access-key")
	fs.MarkHidden("secret-key")
}

// parseS3URL splits s3://bucket[/prefix] into bucket and a prefix that is
// empty or ends in "/".
func parseS3URL(raw string) (bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return "", "", usageError{fmt.Errorf("%q: want s3://bucket[/prefix]", raw)}
	}
	prefix = strings.TrimPrefix(u.Path, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return u.Host, prefix, nil
}

// config builds the s3.Config for bucket from flags, env and files, and
// says where its keys come from (for messages: never a secret).
func (f *s3Flags) config(ctx context.Context, bucket string) (s3.Config, string, error) {
	if f.accessKey != "" || f.secretKey != "" {
		return s3.Config{}, "", usageError{errors.New("credentials are not accepted as flags (they would show in ps): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use --credentials-file")}
	}
	if strings.Contains(f.endpoint, "@") { // user info, parsed or not: an endpoint has no other "@"
		// The value is not echoed: it holds a credential, which the client
		// would not even use (it takes the host alone).
		return s3.Config{}, "", usageError{errors.New("--endpoint must not carry credentials (user:password@host): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use --credentials-file")}
	}
	cfg := s3.Config{Endpoint: f.endpoint, Bucket: bucket, Region: f.region,
		DualStack: strings.EqualFold(os.Getenv("AWS_USE_DUALSTACK_ENDPOINT"), "true")} // AWS's SDKs' switch
	if cfg.Region == "" {
		cfg.Region = os.Getenv("AWS_REGION")
	}
	if cfg.Region == "" { // an AWS endpoint's host names its region
		cfg.Region = s3.EndpointRegion(f.endpoint)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	switch f.pathStyle {
	case "auto":
		cfg.PathStyle = f.endpoint != "" && !strings.Contains(f.endpoint, "amazonaws.com")
	case "on":
		cfg.PathStyle = true
	case "off":
	default:
		return s3.Config{}, "", usageError{fmt.Errorf("--path-style %q: want auto, on or off", f.pathStyle)}
	}
	src, err := f.credentials(ctx, cfg.Region)
	if err != nil {
		return s3.Config{}, "", err
	}
	cfg.Credentials, cfg.Provider = src.static, src.provider
	return cfg, src.what, nil
}

// readCredentialsFile reads one profile of an AWS shared credentials file
// (INI: [profile] then key = value lines).
func readCredentialsFile(path, profile string) (s3.Credentials, error) {
	fh, err := os.Open(path)
	if err != nil {
		return s3.Credentials{}, fmt.Errorf("credentials file: %w", err)
	}
	defer fh.Close()
	var c s3.Credentials
	found, in := false, false
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			name := strings.TrimSpace(strings.TrimPrefix(line[1:len(line)-1], "profile "))
			in = name == profile
			found = found || in
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !in || !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "aws_access_key_id":
			c.AccessKey = strings.TrimSpace(v)
		case "aws_secret_access_key":
			c.SecretKey = strings.TrimSpace(v)
		case "aws_session_token":
			c.SessionToken = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return s3.Credentials{}, fmt.Errorf("credentials file %s: %w", path, err)
	}
	if !found || c.AccessKey == "" || c.SecretKey == "" {
		return s3.Credentials{}, fmt.Errorf("credentials file %s: profile %q has no aws_access_key_id and aws_secret_access_key", path, profile)
	}
	return c, nil
}

// openStore builds the store and checks within timeout that the bucket
// answers, turning the failure into a message a user can act on.
func (f *s3Flags) openStore(ctx context.Context, bucket, prefix string, timeout time.Duration) (*s3.Store, error) {
	cfg, creds, err := f.config(ctx, bucket)
	if err != nil {
		return nil, err
	}
	st, err := s3.New(cfg)
	if err != nil {
		return nil, usageError{err}
	}
	if err := checkStore(ctx, st, prefix, cfg, creds, timeout); err != nil {
		return nil, err
	}
	return st, nil
}

// checkStore checks within timeout that the bucket of st (built from cfg,
// with keys from creds) answers a listing under prefix, turning the failure into a message a user
// can act on. A missing bucket's error is store.ErrNoBucket, for callers
// that create it.
func checkStore(ctx context.Context, st *s3.Store, prefix string, cfg s3.Config, creds string, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := st.Check(cctx, prefix)
	where := cfg.Endpoint
	if where == "" {
		where = "AWS S3"
	}
	// A forgotten --endpoint sends a MinIO user's requests to AWS.
	notAWS := ""
	if cfg.Endpoint == "" {
		notAWS = " (another S3 server than AWS? give its --endpoint)"
	}
	badName := s3.CheckBucketName(cfg.Bucket)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil: // a signal, not the endpoint
		return fmt.Errorf("stopped while checking bucket %q at %s: %w", cfg.Bucket, where, context.Cause(ctx))
	case badName != nil:
		return fmt.Errorf("bucket %q at %s failed, and its name is not an S3 bucket name (%v): %w", cfg.Bucket, where, badName, err)
	case errors.Is(err, store.ErrNoBucket):
		return noBucketError{bucket: cfg.Bucket, where: where}
	case errors.Is(err, store.ErrAccess):
		return fmt.Errorf("access to bucket %q at %s denied: check the credentials (%s): %w", cfg.Bucket, where, creds, err)
	case errors.Is(err, store.ErrRefused):
		// The endpoint answered: a wrong --region (a 301 or a 400 naming
		// the region), or a request it does not take.
		return fmt.Errorf("bucket %q at %s refused the request (a wrong region? check --region): %w", cfg.Bucket, where, err)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return fmt.Errorf("endpoint %s unreachable%s: no answer within %s", where, notAWS, timeout)
	default:
		return fmt.Errorf("endpoint %s unreachable or failing%s: %w", where, notAWS, err)
	}
}

// noBucketError says which bucket is missing where; it is store.ErrNoBucket.
type noBucketError struct{ bucket, where string }

func (e noBucketError) Error() string {
	// A bare 404 from a server that is no S3 (a wrong port or URL) reads
	// as NoSuchBucket too.
	return fmt.Sprintf("bucket %q does not exist at %s (or that is not an S3 endpoint)", e.bucket, e.where)
}

func (e noBucketError) Unwrap() error { return store.ErrNoBucket }

// waitFlags bound waiting for the store, the same for every command that
// reads it: a check at start, each request's first byte and progress, and
// each operation with its retries.
type waitFlags struct{ connect, io, stall time.Duration }

// register adds --connect-timeout, --io-timeout (described by ioHelp: what
// the command does when it passes) and --stall-timeout.
func (w *waitFlags) register(fl *pflag.FlagSet, ioHelp string) {
	fl.DurationVar(&w.connect, "connect-timeout", 10*time.Second, "how long to wait for the endpoint at start")
	fl.DurationVar(&w.io, "io-timeout", time.Minute, ioHelp)
	fl.DurationVar(&w.stall, "stall-timeout", 10*time.Second, "cut and retry a request with no first byte, or a body slower than 6.5 KB/s (64 KiB in 10 s), for this long")
}

func (w waitFlags) validate() error {
	if w.connect <= 0 {
		return usageError{fmt.Errorf("--connect-timeout %s: must be positive", w.connect)}
	}
	if w.io <= 0 || w.stall <= 0 {
		return usageError{fmt.Errorf("--io-timeout and --stall-timeout must be positive, got %s and %s", w.io, w.stall)}
	}
	return nil
}

// retry is how a command retries the store: until --io-timeout, cutting
// stalls at --stall-timeout.
func (w waitFlags) retry(stats *store.RetryStats, logger *slog.Logger) store.RetryOptions {
	return store.RetryOptions{IOTimeout: w.io, FirstByteTimeout: w.stall, ProgressTimeout: w.stall,
		MaxDelay: 5 * time.Second, Attempts: 1000, Stats: stats, Logger: logger}
}
