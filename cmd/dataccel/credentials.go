package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/dataccel/dataccel/store/s3"
)

// credSource is where a command's S3 keys come from: fixed keys, a provider
// that renews them, or neither (anonymous). what names the source for
// messages; it never holds a secret.
type credSource struct {
	static   s3.Credentials
	provider credentials.Provider
	what     string
}

// credentialFetchTimeout bounds each request of a fetch of temporary keys
// (STS, a container endpoint, the instance metadata service), and the
// first fetch at start as a whole (later ones: s3's renewing wrapper).
const credentialFetchTimeout = 10 * time.Second

// imdsProbeTimeout bounds the first fetch from the instance metadata
// service, with nothing else configured: off EC2 the address does not
// answer.
const imdsProbeTimeout = time.Second

// credentials finds the keys, the first source set winning: the
// environment's keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN); a credentials file or profile the user named
// (--credentials-file, $AWS_SHARED_CREDENTIALS_FILE, --profile,
// $AWS_PROFILE); a web identity token exchanged at STS (EKS IRSA:
// AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN); a container credentials
// endpoint (EKS Pod Identity, ECS: AWS_CONTAINER_CREDENTIALS_FULL_URI or
// _RELATIVE_URI); ~/.aws/credentials; for AWS S3 (no --endpoint) or with
// AWS_EC2_METADATA_SERVICE_ENDPOINT set, the EC2 instance profile if the
// metadata service answers (AWS_EC2_METADATA_DISABLED=true skips it); else
// anonymous access. A credentials file is read again when it changes (a
// Kubernetes Secret mounted as a file is replaced when rotated), and
// temporary keys are renewed before they expire. region is the bucket's,
// for STS.
func (f *s3Flags) credentials(ctx context.Context, region string) (credSource, error) {
	if id := os.Getenv("AWS_ACCESS_KEY_ID"); id != "" {
		secret := os.Getenv("AWS_SECRET_ACCESS_KEY")
		if secret == "" {
			return credSource{}, errors.New("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not")
		}
		c := s3.Credentials{AccessKey: id, SecretKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN")}
		return credSource{static: c, what: "AWS_ACCESS_KEY_ID, " + c.String()}, nil
	}
	path := f.credentialsFile
	if path == "" {
		path = os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	}
	profile := f.profile
	if profile == "" {
		profile = os.Getenv("AWS_PROFILE")
	}
	if path != "" || profile != "" {
		return fileSource(f.logger(), path, profile, true)
	}
	client := &http.Client{Timeout: credentialFetchTimeout}
	if file := os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE"); file != "" {
		role := os.Getenv("AWS_ROLE_ARN")
		if role == "" {
			return credSource{}, errors.New("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not")
		}
		p := &credentials.IAM{Client: client}
		p.EKSIdentity.TokenFile, p.EKSIdentity.RoleARN = file, role
		// The bucket's regional STS (reachable through a VPC endpoint
		// where the global one is not), or the SDKs' override.
		p.Endpoint = os.Getenv("AWS_ENDPOINT_URL_STS")
		if p.Endpoint == "" {
			p.Endpoint = "https://sts." + region + ".amazonaws.com"
			if strings.HasPrefix(region, "cn-") {
				p.Endpoint += ".cn"
			}
		}
		return firstKeys(ctx, p, "web identity token "+file+" for role "+role)
	}
	if full, rel := os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI"), os.Getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); full != "" || rel != "" {
		// credentials.IAM reads these and the authorization token itself.
		return firstKeys(ctx, &credentials.IAM{Client: client}, "container credentials endpoint")
	}
	if src, err := fileSource(f.logger(), "", "", false); err != nil || src.provider != nil {
		return src, err
	}
	imds := os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT")
	if (f.endpoint == "" || imds != "") && os.Getenv("AWS_EC2_METADATA_DISABLED") != "true" {
		pctx, cancel := context.WithTimeout(ctx, imdsProbeTimeout)
		src, err := firstKeys(pctx, &credentials.IAM{Client: client, Endpoint: imds}, "EC2 instance profile")
		cancel()
		if err == nil {
			return src, nil
		}
	}
	return credSource{what: "anonymous: no AWS_ACCESS_KEY_ID, web identity, container endpoint, credentials file or instance profile"}, nil
}

// fileSource reads a profile of a credentials file (path "": ~/.aws/credentials;
// profile "": default). A missing or unusable file is an error when named,
// else no source (a credSource without keys).
func fileSource(log *slog.Logger, path, profile string, named bool) (credSource, error) {
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			if named {
				return credSource{}, fmt.Errorf("credentials file for profile %q: %w", profile, err)
			}
			return credSource{}, nil
		}
		path = filepath.Join(home, ".aws", "credentials")
	}
	if profile == "" {
		profile = "default"
	}
	p := &fileCredentials{path: path, profile: profile, log: log}
	v, err := p.Retrieve()
	if err != nil {
		if !named {
			// ~/.aws/credentials without a usable default profile (only
			// named ones, say): the sources after it, as the SDKs do.
			return credSource{}, nil
		}
		return credSource{}, err
	}
	// The store's first request gets the keys read here, not a second read.
	return credSource{provider: &primed{Provider: p, first: &v}, what: fmt.Sprintf("credentials file %s, profile %s", path, profile)}, nil
}

// firstKeys fetches p's first keys, so that a source set up wrong (a token
// file missing, STS or the endpoint refusing) fails the command at start
// with its name, not as an unreachable bucket. The store's first request
// gets these keys, not a second fetch.
func firstKeys(ctx context.Context, p credentials.Provider, what string) (credSource, error) {
	ctx, cancel := context.WithTimeout(ctx, credentialFetchTimeout) // all its requests together
	defer cancel()
	v, err := p.RetrieveWithCredContext(&credentials.CredContext{Context: ctx})
	if err != nil {
		return credSource{}, fmt.Errorf("keys from the %s: %w", what, err)
	}
	return credSource{provider: &primed{Provider: p, first: &v}, what: what}, nil
}

// primed hands out keys fetched already once, then its Provider's. Its
// callers take turns (minio-go's Credentials calls it under a lock).
type primed struct {
	credentials.Provider
	first *credentials.Value
}

func (p *primed) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	if v := p.first; v != nil {
		p.first = nil
		return *v, nil
	}
	return p.Provider.RetrieveWithCredContext(cc)
}

func (p *primed) Retrieve() (credentials.Value, error) { return p.RetrieveWithCredContext(nil) }

// fileCheckEvery is how often a credentials file is checked for a change.
const fileCheckEvery = time.Second

// fileCredentials reads a profile of a shared credentials file, and again
// once the file changed: a rotated Kubernetes Secret mounted as a file is
// swapped in whole (a new inode), and a rewrite changes its time or size.
type fileCredentials struct {
	path, profile string
	log           *slog.Logger // says when a changed file is read, or cannot be

	mu      sync.Mutex
	read    fileStamp         // guarded by mu; the file as last read
	checked time.Time         // guarded by mu
	changed bool              // guarded by mu; since it was read
	last    credentials.Value // guarded by mu; the keys read last
}

// fileStamp tells one version of a file from another.
type fileStamp struct {
	ino, size int64
	mod       time.Time
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	st := fileStamp{size: fi.Size(), mod: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = int64(sys.Ino)
	}
	return st, nil
}

func (p *fileCredentials) Retrieve() (credentials.Value, error) {
	st, err := stampOf(p.path)
	if err != nil {
		return credentials.Value{}, fmt.Errorf("credentials file: %w", err)
	}
	c, err := readCredentialsFile(p.path, p.profile)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.read, p.checked, p.changed = st, time.Now(), false
	if err != nil {
		if p.last.AccessKeyID != "" {
			// Half written, or the profile gone: the keys read last serve
			// until the file changes again.
			p.log.Warn("the credentials file changed and has no usable keys: the keys read before stay in use until it changes again",
				"file", p.path, "profile", p.profile, "err", err)
			return p.last, nil
		}
		return credentials.Value{}, err
	}
	if p.last.AccessKeyID != "" {
		p.log.Info("the credentials file changed: its keys are in use", "file", p.path, "profile", p.profile)
	}
	p.last = credentials.Value{AccessKeyID: c.AccessKey, SecretAccessKey: c.SecretKey, SessionToken: c.SessionToken,
		SignerType: credentials.SignatureV4}
	return p.last, nil
}

func (p *fileCredentials) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	return p.Retrieve()
}

// IsExpired says whether the file changed since it was read, looking at
// most every fileCheckEvery; once it has, until it is read again (a caller
// may ask without reading). A file that is gone keeps the keys read last.
func (p *fileCredentials) IsExpired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.changed && time.Since(p.checked) >= fileCheckEvery {
		p.checked = time.Now()
		st, err := stampOf(p.path)
		p.changed = err == nil && st != p.read
	}
	return p.changed
}
