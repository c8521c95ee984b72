package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/dataccel/dataccel/internal/testenv"
)

// keySwitch hands out the test server's key with the right secret, or a
// wrong one while bad is set, and counts the hand-outs.
type keySwitch struct {
	bad     atomic.Bool
	fetches atomic.Int64
}

func (k *keySwitch) secret() string {
	k.fetches.Add(1)
	if k.bad.Load() {
		return "wrong-" + srv.SecretKey
	}
	return srv.SecretKey
}

// credLifetime is how long the fake endpoints' keys last: the mount renews
// them after about 80% of it.
const credLifetime = 2 * time.Second

// TestRenewedCredentials mounts with keys that renew (a container
// credentials endpoint as EKS Pod Identity and ECS give, a web identity
// exchanged at STS as EKS IRSA does, a credentials file a rotated
// Kubernetes Secret replaces) and checks that every request signs with the
// current keys: after a renewal that hands out a wrong secret reads fail,
// after one that hands out the right one again they succeed. Before, the
// first two were not read at all (anonymous access) and the file was read
// once, so a mount lived only as long as its first keys.
func TestRenewedCredentials(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, k *keySwitch) []string // the mount's environment
		wait  time.Duration                             // for a renewal to show
	}{
		{"container endpoint", func(t *testing.T, k *keySwitch) []string {
			const token = "pod-identity-token"
			tokenFile := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
				t.Fatal(err)
			}
			ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != token {
					http.Error(w, "no token", http.StatusUnauthorized)
					return
				}
				json.NewEncoder(w).Encode(map[string]string{"AccessKeyId": srv.AccessKey, "SecretAccessKey": k.secret(),
					"Expiration": time.Now().Add(credLifetime).UTC().Format(time.RFC3339Nano)})
			}))
			t.Cleanup(ep.Close)
			return []string{"AWS_CONTAINER_CREDENTIALS_FULL_URI=" + ep.URL + "/creds", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=" + tokenFile}
		}, credLifetime + time.Second},
		{"web identity", func(t *testing.T, k *keySwitch) []string {
			tokenFile := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tokenFile, []byte("a-jwt"), 0o600); err != nil {
				t.Fatal(err)
			}
			sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.ParseForm()
				if r.Form.Get("Action") != "AssumeRoleWithWebIdentity" || r.Form.Get("WebIdentityToken") != "a-jwt" ||
					r.Form.Get("RoleArn") != "arn:aws:iam::123456789012:role/reader" {
					http.Error(w, "bad request: "+r.Form.Encode(), http.StatusBadRequest)
					return
				}
				fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>
<Expiration>%s</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>`,
					srv.AccessKey, k.secret(), time.Now().Add(credLifetime).UTC().Format(time.RFC3339Nano))
			}))
			t.Cleanup(sts.Close)
			return []string{"AWS_WEB_IDENTITY_TOKEN_FILE=" + tokenFile, "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/reader",
				"AWS_ENDPOINT_URL_STS=" + sts.URL}
		}, credLifetime + time.Second},
		{"credentials file", func(t *testing.T, k *keySwitch) []string {
			// A Kubernetes Secret volume: the file is a link into a directory
			// that the kubelet swaps on rotation.
			dir := t.TempDir()
			write := func() {
				data := filepath.Join(dir, fmt.Sprintf("..data-%d", k.fetches.Load()))
				os.Mkdir(data, 0o700)
				body := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.AccessKey, k.secret())
				if err := os.WriteFile(filepath.Join(data, "credentials"), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				os.Remove(filepath.Join(dir, "..data.tmp"))
				if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data.tmp")); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(dir, "..data.tmp"), filepath.Join(dir, "..data")); err != nil {
					t.Fatal(err)
				}
			}
			write()
			if err := os.Symlink("..data/credentials", filepath.Join(dir, "credentials")); err != nil {
				t.Fatal(err)
			}
			go func() { // the kubelet, writing what the switch says now
				last := k.bad.Load()
				for {
					select {
					case <-t.Context().Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
					if now := k.bad.Load(); now != last {
						last = now
						write()
					}
				}
			}()
			return []string{"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "credentials")}
		}, 2 * fileCheckEvery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := srv.NewBucket(t)
			const tries = 20
			dirs := []string{"first"}
			for i := range tries {
				dirs = append(dirs, fmt.Sprintf("wrong%d", i), fmt.Sprintf("again%d", i))
			}
			for _, d := range dirs {
				testenv.Put(t, st, d+"/f", []byte("content of "+d))
			}
			k := &keySwitch{}
			env := tc.setup(t, k)
			mnt := t.TempDir()
			cmd := exec.Command(bin, "mount", "--endpoint", srv.Endpoint, "--prefetch", "off", "--list-ahead", "0",
				"--io-timeout", "5s", "s3://"+st.Bucket(), mnt)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "AWS_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, env...)
			logs := &testenv.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = logs, logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Signal(syscall.SIGTERM)
				done := make(chan struct{})
				go func() { cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					cmd.Process.Kill()
					<-done
				}
				syscall.Unmount(mnt, syscall.MNT_DETACH)
			})
			waitFor(t, 15*time.Second, func() bool { return strings.Contains(logs.String(), "msg=mounted") })
			read := func(dir string) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				got, err := readFileCtx(ctx, filepath.Join(mnt, dir, "f"))
				if err == nil && string(got) != "content of "+dir {
					t.Fatalf("%s/f read %q", dir, got)
				}
				return err
			}
			if err := read("first"); err != nil {
				t.Fatalf("read with the first keys: %v\n%s", err, logs)
			}
			// Each try reads a file not read before (a read that worked
			// leaves its bytes in the page cache), a quarter of the wait
			// apart: the renewal shows within a few waits on a busy machine.
			until := func(dir string, fails bool) error {
				var err error
				for i := range tries {
					if err = read(fmt.Sprintf("%s%d", dir, i)); (err != nil) == fails {
						return nil
					}
					time.Sleep(tc.wait / 4)
				}
				return fmt.Errorf("%d reads, the last: %v", tries, err)
			}
			k.bad.Store(true)
			if err := until("wrong", true); err != nil {
				t.Fatalf("every read after the keys were renewed with a wrong secret succeeded: the renewal was not used (%v, %d hand-outs)\n%s", err, k.fetches.Load(), logs)
			}
			k.bad.Store(false)
			if err := until("again", false); err != nil {
				t.Fatalf("no read worked after the right keys came back: %v (%d hand-outs)\n%s", err, k.fetches.Load(), logs)
			}
			if strings.Contains(logs.String(), srv.SecretKey) {
				t.Fatal("the secret is in the mount's log")
			}
		})
	}
}

// readFileCtx reads a file, giving up (with the read left behind) when ctx
// ends: a read that hangs fails the test instead of stalling it.
func readFileCtx(ctx context.Context, path string) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := os.ReadFile(path)
		ch <- result{b, err}
	}()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("read %s: %w", path, ctx.Err())
	}
}

// TestCredentialSources: the order the keys are looked for in, as the AWS
// SDKs look (the first source set wins), and the errors for a half-set
// source. The instance profile is a fake metadata service (IMDSv2).
func TestCredentialSources(t *testing.T) {
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			fmt.Fprint(w, "imds-token")
		case r.Header.Get("X-aws-ec2-metadata-token") != "imds-token":
			http.Error(w, "no token", http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
			fmt.Fprint(w, "gpu-node-role")
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/gpu-node-role":
			json.NewEncoder(w).Encode(map[string]string{"Code": "Success", "AccessKeyId": "AKIDIMDS", "SecretAccessKey": "imds-secret",
				"Token": "t", "Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(imds.Close)
	keys := func(key string) map[string]string {
		return map[string]string{"AccessKeyId": key, "SecretAccessKey": "container-secret", "Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	}
	var containerFetches, stsFetches atomic.Int64
	container := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		containerFetches.Add(1)
		json.NewEncoder(w).Encode(keys("AKIDCONTAINER"))
	}))
	t.Cleanup(container.Close)
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stsFetches.Add(1)
		fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>AKIDSTS</AccessKeyId><SecretAccessKey>sts-secret</SecretAccessKey>
<Expiration>%s</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	t.Cleanup(sts.Close)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("a-jwt"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "credentials")
	if err := os.WriteFile(file, []byte("[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		home     bool   // a ~/.aws/credentials
		homeBody string // its content, if not the shared file's
		endpoint string // "": AWS S3
		want     string // the start of what the source says, or of the error
		wantErr  bool
		wantKey  string        // the key it hands out, if any
		fetches  *atomic.Int64 // the source's fetches: one for the check at start and the first request
	}{
		{name: "environment first", env: map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "env-secret",
			"AWS_WEB_IDENTITY_TOKEN_FILE": "/t", "AWS_ROLE_ARN": "r", "AWS_SHARED_CREDENTIALS_FILE": file}, want: "AWS_ACCESS_KEY_ID", wantKey: "AKIDENV"},
		{name: "key without secret", env: map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV"}, want: "AWS_ACCESS_KEY_ID is set but", wantErr: true},
		{name: "a named file before web identity", env: map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": token, "AWS_ROLE_ARN": "r",
			"AWS_ENDPOINT_URL_STS": sts.URL, "AWS_SHARED_CREDENTIALS_FILE": file}, want: "credentials file " + file, wantKey: "AKIDFILE"},
		{name: "a named profile that is missing", env: map[string]string{"AWS_PROFILE": "training", "AWS_WEB_IDENTITY_TOKEN_FILE": token},
			home: true, want: "credentials file", wantErr: true},
		{name: "web identity before the default file", env: map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": token, "AWS_ROLE_ARN": "r",
			"AWS_ENDPOINT_URL_STS": sts.URL}, home: true, want: "web identity token " + token + " for role r", wantKey: "AKIDSTS", fetches: &stsFetches},
		{name: "web identity without a role", env: map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": token}, want: "AWS_WEB_IDENTITY_TOKEN_FILE is set but", wantErr: true},
		{name: "web identity token missing", env: map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": token + ".missing", "AWS_ROLE_ARN": "r",
			"AWS_ENDPOINT_URL_STS": sts.URL}, want: "keys from the web identity token", wantErr: true},
		{name: "container endpoint before the default file", env: map[string]string{"AWS_CONTAINER_CREDENTIALS_FULL_URI": container.URL},
			home: true, want: "container credentials endpoint", wantKey: "AKIDCONTAINER", fetches: &containerFetches},
		{name: "a default file without the default profile", env: map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.URL},
			home: true, homeBody: "[training]\naws_access_key_id = AKIDT\naws_secret_access_key = t\n", want: "EC2 instance profile", wantKey: "AKIDIMDS"},
		{name: "the default file before the instance profile", env: map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.URL},
			home: true, want: "credentials file", wantKey: "AKIDFILE"},
		{name: "container endpoint that does not answer", env: map[string]string{"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:1/"},
			want: "keys from the container credentials endpoint", wantErr: true},
		{name: "file before the instance profile", env: map[string]string{"AWS_SHARED_CREDENTIALS_FILE": file,
			"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.URL}, want: "credentials file " + file, wantKey: "AKIDFILE"},
		{name: "a named file that is missing", env: map[string]string{"AWS_SHARED_CREDENTIALS_FILE": file + ".missing"}, want: "credentials file", wantErr: true},
		{name: "instance profile", env: map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.URL}, endpoint: "http://minio:9000",
			want: "EC2 instance profile", wantKey: "AKIDIMDS"},
		{name: "instance profile turned off", env: map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.URL, "AWS_EC2_METADATA_DISABLED": "true"},
			want: "anonymous"},
		{name: "no metadata service", env: map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:1"}, want: "anonymous"},
		{name: "another endpoint: no instance profile asked", endpoint: "http://minio:9000", want: "anonymous"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range os.Environ() {
				if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
					t.Setenv(k, "")
					os.Unsetenv(k)
				}
			}
			home := t.TempDir()
			t.Setenv("HOME", home)
			if tc.home {
				os.Mkdir(filepath.Join(home, ".aws"), 0o700)
				var err error
				if tc.homeBody != "" {
					err = os.WriteFile(filepath.Join(home, ".aws", "credentials"), []byte(tc.homeBody), 0o600)
				} else {
					err = os.Link(file, filepath.Join(home, ".aws", "credentials"))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			f := &s3Flags{endpoint: tc.endpoint}
			if tc.endpoint == "" && tc.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] == "" {
				t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // this machine is no EC2 instance
			}
			if tc.fetches != nil {
				tc.fetches.Store(0)
			}
			src, err := f.credentials(t.Context(), "us-east-1")
			if tc.wantErr {
				if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
					t.Fatalf("err %v, want one starting %q", err, tc.want)
				}
				return
			}
			if err != nil || !strings.HasPrefix(src.what, tc.want) {
				t.Fatalf("source %q, err %v; want %q", src.what, err, tc.want)
			}
			if tc.wantKey == "" {
				return
			}
			v := credentials.Value{AccessKeyID: src.static.AccessKey, SecretAccessKey: src.static.SecretKey}
			if src.provider != nil {
				if v, err = src.provider.RetrieveWithCredContext(&credentials.CredContext{Client: http.DefaultClient}); err != nil {
					t.Fatal(err)
				}
			}
			if v.AccessKeyID != tc.wantKey {
				t.Fatalf("key %q, want %q", v.AccessKeyID, tc.wantKey)
			}
			if tc.fetches != nil && tc.fetches.Load() != 1 {
				t.Fatalf("%d fetches of keys for the start's check and the first request, want 1", tc.fetches.Load())
			}
			if strings.Contains(src.what, v.SecretAccessKey) {
				t.Fatalf("the source's description holds the secret: %q", src.what)
			}
		})
	}
}

// TestFileCredentialsChange: a credentials file is read again once it
// changed; a change that leaves it unusable (half written, the profile
// gone) keeps the keys read last until the next change.
func TestFileCredentialsChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path+".new", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer // read only between Retrieves
	p := &fileCredentials{path: path, profile: "default", log: slog.New(slog.NewTextHandler(&logs, nil))}
	key := func() string {
		t.Helper()
		if !p.IsExpired() {
			return "(not expired)"
		}
		v, err := p.Retrieve()
		if err != nil {
			t.Fatal(err)
		}
		return v.AccessKeyID
	}
	write("[default]\naws_access_key_id = A\naws_secret_access_key = a\n")
	if v, err := p.Retrieve(); err != nil || v.AccessKeyID != "A" {
		t.Fatalf("first read: %q %v", v.AccessKeyID, err)
	}
	if p.IsExpired() {
		t.Fatal("expired with no change")
	}
	for _, step := range []struct{ body, want, log string }{
		{"[default]\naws_access_key_id = B\n", "A", "level=WARN msg=\"the credentials file changed and has no usable keys"}, // half written: the last keys
		{"[default]\naws_access_key_id = B\naws_secret_access_key = b\n", "B", "level=INFO msg=\"the credentials file changed: its keys are in use"},
		{"[other]\naws_access_key_id = C\naws_secret_access_key = c\n", "B", "level=WARN"}, // the profile gone
	} {
		logs.Reset()
		write(step.body)
		p.mu.Lock()
		p.checked = time.Time{} // as if fileCheckEvery had passed
		p.mu.Unlock()
		if got := key(); got != step.want {
			t.Fatalf("after writing %q: key %q, want %q", step.body, got, step.want)
		}
		if out := logs.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, step.log) || strings.Contains(out, "= b") {
			t.Fatalf("after writing %q: logged %q, want one line with %q", step.body, out, step.log)
		}
	}
}

// TestS3Config: how the flags and the environment set the request style,
// the region and AWS's dual-stack hosts, and that a wrong --path-style is
// a usage error.
func TestS3Config(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		flags                 s3Flags
		region, dualStack     string // AWS_REGION, AWS_USE_DUALSTACK_ENDPOINT
		wantPath, wantDual    bool
		wantRegion, wantUsage string
	}{
		{name: "AWS", flags: s3Flags{pathStyle: "auto"}, wantRegion: "us-east-1"},
		{name: "AWS by its endpoint", flags: s3Flags{pathStyle: "auto", endpoint: "https://s3.eu-west-1.amazonaws.com"}, wantRegion: "eu-west-1"},
		{name: "AWS by its endpoint, --region over it", flags: s3Flags{pathStyle: "auto", endpoint: "https://s3.eu-west-1.amazonaws.com", region: "eu-north-1"}, wantRegion: "eu-north-1"},
		{name: "another server", flags: s3Flags{pathStyle: "auto", endpoint: "http://minio:9000"}, wantPath: true, wantRegion: "us-east-1"},
		{name: "another server, virtual-hosted", flags: s3Flags{pathStyle: "off", endpoint: "http://minio:9000"}, wantRegion: "us-east-1"},
		{name: "AWS, path-style", flags: s3Flags{pathStyle: "on"}, wantPath: true, wantRegion: "us-east-1"},
		{name: "wrong path-style", flags: s3Flags{pathStyle: "yes"}, wantUsage: `--path-style "yes"`},
		{name: "region from the environment", flags: s3Flags{pathStyle: "auto"}, region: "eu-central-1", wantRegion: "eu-central-1"},
		{name: "--region over the environment", flags: s3Flags{pathStyle: "auto", region: "ap-south-1"}, region: "eu-central-1", wantRegion: "ap-south-1"},
		{name: "dual-stack", flags: s3Flags{pathStyle: "auto"}, dualStack: "true", wantDual: true, wantRegion: "us-east-1"},
		{name: "dual-stack off", flags: s3Flags{pathStyle: "auto"}, dualStack: "false", wantRegion: "us-east-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
			t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
			t.Setenv("AWS_REGION", tc.region)
			t.Setenv("AWS_USE_DUALSTACK_ENDPOINT", tc.dualStack)
			cfg, _, err := tc.flags.config(t.Context(), "bucket")
			if tc.wantUsage != "" {
				var u usageError
				if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.wantUsage) {
					t.Fatalf("err %v, want a usage error naming %s", err, tc.wantUsage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.PathStyle != tc.wantPath || cfg.DualStack != tc.wantDual || cfg.Region != tc.wantRegion || cfg.Bucket != "bucket" {
				t.Fatalf("path-style %v, dual-stack %v, region %q, bucket %q; want %v, %v, %q, bucket",
					cfg.PathStyle, cfg.DualStack, cfg.Region, cfg.Bucket, tc.wantPath, tc.wantDual, tc.wantRegion)
			}
		})
	}
}
