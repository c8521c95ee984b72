package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/fuse"
	"github.com/dataccel/dataccel/internal/testenv"
)

var (
	srv *testenv.Server
	bin string // the dataccel binary, built once for process-level tests
)

func TestMain(m *testing.M) {
	// Tests read mounts served by this same process: see inProcessMounts
	// in the fuse tests for why the runtime needs spare Ps for that.
	runtime.GOMAXPROCS(max(16, runtime.NumCPU()))
	dir, err := os.MkdirTemp("", "dataccel-bin-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "dataccel")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build dataccel: %v\n%s", err, out)
		os.Exit(1)
	}
	code := testenv.Run(m, &srv)
	os.RemoveAll(dir)
	os.Exit(code)
}

// execCmd runs the root command in-process and returns its error.
func execCmd(t *testing.T, args ...string) error {
	t.Helper()
	root := newRootCmd()
	root.SetArgs(args)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return root.ExecuteContext(ctx)
}

func setCreds(t *testing.T, key, secret string) {
	t.Setenv("AWS_ACCESS_KEY_ID", key)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
}

// TestMountErrors: each bad input gives a clear error and leaves nothing mounted.
func TestMountErrors(t *testing.T) {
	st := srv.NewBucket(t)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	busy := startMount(t, t.TempDir(), "--endpoint", srv.Endpoint, "s3://"+st.Bucket()).dir
	deadPort, _ := testenv.FreePort()
	// A volume (tmpfs, like a Kubernetes emptyDir) may be mounted on: the
	// error must come from the next check, the endpoint.
	volume := t.TempDir()
	if err := syscall.Mount("tmpfs", volume, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(volume, syscall.MNT_DETACH) })

	busy2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy2.Close() })
	busyAddr := busy2.Addr().String()

	tests := []struct {
		name         string
		key, secret  string
		args         []string
		wantMsg      string
		maxDuration  time.Duration
		checkMounted bool
	}{
		{name: "bad url", args: []string{"mount", "http://x/y", "MNT"}, wantMsg: "want s3://bucket"},
		{name: "missing mountpoint", args: []string{"mount", "s3://" + st.Bucket(), "/nonexistent/dir"}, wantMsg: "does not exist"},
		{name: "mountpoint is a file", args: []string{"mount", "s3://" + st.Bucket(), file}, wantMsg: "not a directory"},
		{name: "already mounted", args: []string{"mount", "s3://" + st.Bucket(), busy}, wantMsg: "already a mount point of fuse.dataccel"},
		{name: "volume mount point is fine", args: []string{"mount", "--endpoint", fmt.Sprintf("http://127.0.0.1:%d", deadPort), "s3://" + st.Bucket(), volume},
			wantMsg: "unreachable"},
		{name: "unreachable endpoint", args: []string{"mount", "--endpoint", fmt.Sprintf("http://127.0.0.1:%d", deadPort), "s3://" + st.Bucket(), "MNT"},
			wantMsg: "unreachable", maxDuration: 15 * time.Second, checkMounted: true},
		{name: "wrong secret", secret: "wrong-secret", args: []string{"mount", "--endpoint", srv.Endpoint, "s3://" + st.Bucket(), "MNT"},
			wantMsg: "denied: check the credentials", checkMounted: true},
		{name: "unknown key", key: "nobody", args: []string{"mount", "--endpoint", srv.Endpoint, "s3://" + st.Bucket(), "MNT"},
			wantMsg: "denied", checkMounted: true},
		// The endpoint answered: not "unreachable or failing".
		{name: "wrong region", args: []string{"mount", "--endpoint", srv.Endpoint, "--region", "eu-west-1", "s3://" + st.Bucket(), "MNT"},
			wantMsg: "refused the request (a wrong region? check --region)", checkMounted: true},
		{name: "missing bucket", args: []string{"mount", "--endpoint", srv.Endpoint, "s3://no-such-bucket-x", "MNT"},
			wantMsg: `bucket "no-such-bucket-x" does not exist`, checkMounted: true},
		// Not "a wrong region?": the name is the cause.
		{name: "invalid bucket name", args: []string{"mount", "--endpoint", srv.Endpoint, "s3://My_Bucket/x", "MNT"},
			wantMsg: `bucket "My_Bucket" at ` + srv.Endpoint + " failed, and its name is not an S3 bucket name", checkMounted: true},
		// A MinIO user who forgot --endpoint reaches for AWS, which this
		// machine cannot resolve or reach.
		{name: "forgotten endpoint", args: []string{"mount", "--connect-timeout", "3s", "s3://" + st.Bucket(), "MNT"},
			wantMsg: "(another S3 server than AWS? give its --endpoint)", maxDuration: 15 * time.Second, checkMounted: true},
		{name: "secret as flag", args: []string{"mount", "--secret-key", "s3cr3t", "--endpoint", srv.Endpoint, "s3://" + st.Bucket(), "MNT"},
			wantMsg: "not accepted as flags"},
		{name: "credentials in the endpoint", args: []string{"mount", "--endpoint", strings.Replace(srv.Endpoint, "://", "://"+srv.AccessKey+":"+srv.SecretKey+"@", 1),
			"s3://no-such-bucket-x", "MNT"}, wantMsg: "--endpoint must not carry credentials", checkMounted: true},
		{name: "credentials in an endpoint that does not parse", args: []string{"mount", "--endpoint", "http://k:" + srv.SecretKey + "@x@127.0.0.1:1/%zz",
			"s3://" + st.Bucket(), "MNT"}, wantMsg: "--endpoint must not carry credentials", checkMounted: true},
		{name: "zero connect timeout", args: []string{"mount", "--connect-timeout", "0s", "s3://" + st.Bucket(), "MNT"}, wantMsg: "--connect-timeout 0s: must be positive"},
		{name: "bad ttl", args: []string{"mount", "--metadata-ttl", "-1s", "s3://" + st.Bucket(), "MNT"}, wantMsg: "must be positive"},
		{name: "negative outage grace", args: []string{"mount", "--outage-grace", "-1s", "s3://" + st.Bucket(), "MNT"}, wantMsg: "--outage-grace must be 0 or more"},
		{name: "negative list-ahead", args: []string{"mount", "--list-ahead", "-1", "s3://" + st.Bucket(), "MNT"}, wantMsg: "--list-ahead -1: want 0..256"},
		{name: "bad passthrough-min-size", args: []string{"mount", "--passthrough-min-size", "big", "s3://" + st.Bucket(), "MNT"}, wantMsg: "--passthrough-min-size"},
		{name: "bad local-copies", args: []string{"mount", "--cache-dir", "CACHE", "--local-copies", "lots", "s3://" + st.Bucket(), "MNT"}, wantMsg: "--local-copies"},
		{name: "tiny prefetch-inflight", args: []string{"mount", "--prefetch-inflight", "4KiB", "s3://" + st.Bucket(), "MNT"}, wantMsg: "--prefetch-inflight"},
		// Found before mounting: it mounted, logged "mounted", then exited.
		{name: "http address in use", args: []string{"mount", "--endpoint", srv.Endpoint, "--http", busyAddr, "s3://" + st.Bucket(), "MNT"},
			wantMsg: "--http " + busyAddr, checkMounted: true},
		{name: "http address malformed", args: []string{"mount", "--endpoint", srv.Endpoint, "--http", "no-port", "s3://" + st.Bucket(), "MNT"},
			wantMsg: "--http no-port", checkMounted: true},
		// It only warned, and the sidecar was never ready.
		{name: "ready file without a directory", args: []string{"mount", "--endpoint", srv.Endpoint, "--ready-file", "/nonexistent/ready", "s3://" + st.Bucket(), "MNT"},
			wantMsg: "--ready-file /nonexistent/ready: no directory", checkMounted: true},
		{name: "ready file in a directory it cannot write", args: []string{"mount", "--endpoint", srv.Endpoint, "--ready-file", "ROFILE", "s3://" + st.Bucket(), "MNT"},
			wantMsg: "cannot write in its directory", checkMounted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, secret := srv.AccessKey, srv.SecretKey
			if tc.key != "" {
				key = tc.key
			}
			if tc.secret != "" {
				secret = tc.secret
			}
			setCreds(t, key, secret)
			mnt := t.TempDir()
			args := append([]string(nil), tc.args...)
			for i, a := range args {
				if a == "MNT" {
					args[i] = mnt
				}
				if a == "CACHE" {
					args[i] = t.TempDir()
				}
				if a == "ROFILE" {
					args[i] = filepath.Join(immutableDir(t), "ready")
				}
			}
			start := time.Now()
			err := execCmd(t, args...)
			if err == nil {
				t.Fatal("mount succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %q does not say %q", err, tc.wantMsg)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error %q contains the secret", err)
			}
			if tc.maxDuration > 0 && time.Since(start) > tc.maxDuration {
				t.Fatalf("took %s, want < %s", time.Since(start), tc.maxDuration)
			}
			if tc.checkMounted {
				if m, _ := fuse.IsMountpoint(mnt); m {
					t.Fatal("something stayed mounted")
				}
			}
		})
	}
}

// TestMountLifecycle runs the binary: it says when the mount is ready,
// serves the bucket, and on SIGTERM unmounts (lazily with a file open) and
// exits 0.
func TestMountLifecycle(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "ds/train/a.bin", []byte("alpha"))
	testenv.Put(t, st, "ds/train/b.bin", []byte("bravo"))
	mnt := t.TempDir()
	cmd, logs := mountProcess(t, "--endpoint", srv.Endpoint, "s3://"+st.Bucket()+"/ds", mnt)
	b, err := os.ReadFile(filepath.Join(mnt, "train", "b.bin"))
	if err != nil || string(b) != "bravo" {
		t.Fatalf("read through the mount: %q %v\n%s", b, err, logs.String())
	}
	held, err := os.Open(filepath.Join(mnt, "train", "a.bin")) // keeps the mount busy
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(cmd, 15*time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, logs.String())
	}
	if m, _ := fuse.IsMountpoint(mnt); m {
		t.Fatal("still mounted after exit")
	}
	if strings.Contains(logs.String(), srv.SecretKey) {
		t.Fatal("logs contain the secret")
	}
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "dataccel ") {
		t.Fatalf("version: %q %v", out, err)
	}
	flag, err := exec.Command(bin, "--version").Output()
	if err != nil || string(flag) != string(out) {
		t.Fatalf("--version: %q %v; want what the version command prints, %q", flag, err, out)
	}
}

// TestWarmHelp: warm shares the mount's flag set, but its help lists only
// the flags warm acts on; the mount-only ones would do nothing there.
func TestWarmHelp(t *testing.T) {
	out, err := exec.Command(bin, "warm", "--help").Output()
	if err != nil {
		t.Fatalf("warm --help: %v", err)
	}
	for _, flag := range []string{"--cache-dir", "--block-size", "--concurrency", "--list", "--endpoint", "--passthrough-min-size", "--local-copies"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("warm --help lacks %s", flag)
		}
	}
	for _, flag := range []string{"--allow-other", "--prefetch-push", "--prefetch-inflight", "--prefetch-memory",
		"--max-inflight", "--ram-cache-size", "--hedge", "--manifest", "--metadata-ttl", "--outage-grace", "--list-ahead"} {
		if strings.Contains(string(out), flag+" ") {
			t.Errorf("warm --help lists the mount-only flag %s", flag)
		}
	}
}

// TestCompareReport: compare.sh's summary.json printed with each target's
// verdict and written as HTML; a file that is not such a summary fails
// without writing the page.
func TestCompareReport(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "summary.html")
	out, err := exec.Command(bin, "bench", "compare-report", "../../bench/testdata/compare-summary.json", "--html", page).CombinedOutput()
	if err != nil {
		t.Fatalf("compare-report: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "targets met: 7 of 8") || !strings.Contains(string(out), "0.62  MISSED") {
		t.Errorf("compare-report printed:\n%s", out)
	}
	if b, err := os.ReadFile(page); err != nil || !strings.Contains(string(b), "Targets: 7 of 8 met") {
		t.Errorf("summary.html: %v, %d bytes", err, len(b))
	}
	bad := filepath.Join(dir, "result.json")
	if err := os.WriteFile(bad, []byte(`{"paths": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	badPage := filepath.Join(dir, "bad.html")
	out, err = exec.Command(bin, "bench", "compare-report", bad, "--html", badPage).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a compare.sh summary.json") {
		t.Errorf("compare-report of a bench result: %v\n%s", err, out)
	}
	if _, err := os.Stat(badPage); err == nil {
		t.Error("a page was written for a bad summary")
	}
}

// TestBenchGenSizeErrors: sizes that cannot give the asked-for mix, a
// count or size given as 0 (which Generate would take for its default), or
// an unknown content, are a usage error (exit 2) naming the flag, before
// anything is written or any bucket made.
func TestBenchGenSizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, wantMsg string
		args          []string
	}{
		{"mean under the smallest size", "mean size 5000 lies outside the size bounds [10000, 1000000]", []string{"--mean-size", "5000"}},
		{"mean over the largest size", "mean size 300000 lies outside the size bounds [1000, 200000]",
			[]string{"--mean-size", "300000", "--min-size", "1000", "--max-size", "200000"}},
		{"bounds crossed", "bad size bounds [5000, 4000]", []string{"--mean-size", "4500", "--min-size", "5000", "--max-size", "4000"}},
		{"unknown content", `content "png": want jpeg or text`, []string{"--content", "png"}},
		{"no uploads at a time", "--concurrency -5: want at least 1", []string{"--concurrency", "-5"}},
		{"no smallest size", "--min-size 0: want at least 64", []string{"--min-size", "0", "--max-size", "10000", "--mean-size", "5000"}},
		{"no largest size", "--max-size 0: want at least 64", []string{"--max-size", "0"}},
		{"no mean size", "--mean-size 0: want at least 64", []string{"--mean-size", "0"}},
		{"smallest size under a header", "--min-size 10: want at least 64", []string{"--min-size", "10"}},
		{"negative size", "--max-size -1: want at least 64", []string{"--max-size", "-1"}},
		{"no files", "--files 0: want at least 1", []string{"-n", "0"}},
		{"no classes", "--classes 0: want at least 1", []string{"--classes", "0"}},
		{"negative subdirectories", "--subdirs -1: want at least 0", []string{"--subdirs", "-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ds")
			args := append([]string{"bench", "gen", "-q", "--to", dir, "-n", "5"}, tc.args...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.wantMsg) {
				t.Fatalf("bench gen %v: %v, want exit 2 saying %q; output:\n%s", tc.args, err, tc.wantMsg, out)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Error("the destination was created for a rejected dataset")
			}
		})
	}
}

// TestCredentialsFile reads a profile from an AWS credentials file.
func TestCredentialsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "credentials")
	os.WriteFile(p, []byte("[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n[profile train]\naws_access_key_id=C\naws_secret_access_key=D\naws_session_token=E\n"), 0o600)
	tests := []struct {
		profile, wantKey, wantSecret, wantErr string
	}{
		{"default", "A", "B", ""},
		{"train", "C", "D", ""},
		{"missing", "", "", "has no aws_access_key_id"},
	}
	for _, tc := range tests {
		c, err := readCredentialsFile(p, tc.profile)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.profile, err, tc.wantErr)
			}
			continue
		}
		if err != nil || c.AccessKey != tc.wantKey || c.SecretKey != tc.wantSecret {
			t.Errorf("%s: %+v %v", tc.profile, c, err)
		}
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHumanBytes(t *testing.T) {
	for _, c := range []struct {
		n          int64
		want, flag string
	}{
		{0, "0B", "off"},
		{1000, "1000B", "1000B"},
		{8 << 10, "8.0KiB", "8.0KiB"},
		{638976, "624.0KiB", "624.0KiB"},
		{3 << 19, "1.5MiB", "1.5MiB"},
		{1 << 30, "1.0GiB", "1.0GiB"},
	} {
		if got := humanBytes(c.n); got != c.want {
			t.Errorf("humanBytes(%d) = %q, want %q", c.n, got, c.want)
		}
		if got := sizeOrOff(c.n); got != c.flag {
			t.Errorf("sizeOrOff(%d) = %q, want %q", c.n, got, c.flag)
		}
	}
}

// TestArgCountIsUsageError: too few or too many arguments exit 2, as a
// wrong flag does (cobra's own checks exited 1, as a failed run).
func TestArgCountIsUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"version", "extra"},
		{"bench", "run"},
		{"bench", "compare-report"},
		{"mount", "s3://bucket"},
		{"cache", "stat", "extra"},
		{"bench", "gen", "s3://bucket/x"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("dataccel %v: %v, want exit 2; output:\n%s", args, err, out)
		}
		if args[1] == "gen" && !strings.Contains(string(out), "--to s3://bucket/x") {
			t.Errorf("dataccel %v: %s; want the hint to give it with --to", args, out)
		}
	}
}

// TestUnknownSubcommand: a mistyped subcommand of a group is a usage error
// (exit 2), not its help with exit 0, which a script would take for done;
// the group alone still shows its help.
func TestUnknownSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		word string
	}{
		{[]string{"cache", "purg", "--cache-dir", t.TempDir()}, "purg"},
		{[]string{"bench", "rn", "/tmp"}, "rn"},
		{[]string{"mont"}, "mont"},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), fmt.Sprintf("unknown command %q", tc.word)) {
			t.Errorf("dataccel %v: %v, want a non-zero exit saying unknown command %q; output:\n%s", tc.args, err, tc.word, out)
		}
	}
	for _, group := range []string{"cache", "bench"} {
		out, err := exec.Command(bin, group).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Available Commands") {
			t.Errorf("dataccel %s: %v, want its help; output:\n%s", group, err, out)
		}
	}
}

// TestScoreUsageErrors: score takes one source of F_io and a job it can
// model, and says so otherwise (exit 2), instead of changing what it got.
func TestScoreUsageErrors(t *testing.T) {
	offers := filepath.Join("..", "..", "bench", "offers.example.yaml")
	for _, tc := range []struct {
		args    []string
		wantMsg string
	}{
		{[]string{"--io-factor", "0.5", "--bench", "r.json"}, "give one of --bench result.json and --io-factor"},
		{[]string{}, "give one of --bench result.json and --io-factor"},
		{[]string{"--io-factor", "-1"}, "--io-factor -1: want a value in (0, 1]"},
		{[]string{"--io-factor", "NaN"}, "--io-factor NaN: want a value in (0, 1]"},
		{[]string{"--io-factor", "0.5", "--epochs", "0"}, "--epochs 0: want at least 1"},
		{[]string{"--io-factor", "0.5", "--epochs", "3", "--cold-epochs", "4"}, "--cold-epochs 4: want 0..--epochs"},
		{[]string{"--io-factor", "0.5", "--cold-epochs", "-1"}, "--cold-epochs -1"},
	} {
		out, err := exec.Command(bin, append([]string{"score", "--offers", offers}, tc.args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.wantMsg) {
			t.Errorf("score %v: %v, want exit 2 saying %q; output:\n%s", tc.args, err, tc.wantMsg, out)
		}
	}
	jf := filepath.Join(t.TempDir(), "score.json")
	out, err := exec.Command(bin, "score", "--offers", offers, "--io-factor", "0.5", "--cold-epochs", "0", "--json", jf).CombinedOutput()
	if err != nil {
		t.Fatalf("score with a cache warmed before the job (--cold-epochs 0): %v\n%s", err, out)
	}
	// --json writes the ranking the table shows.
	js, err := os.ReadFile(jf)
	if err != nil {
		t.Fatal(err)
	}
	var ranking struct {
		Offers []struct {
			Rank int    `json:"rank"`
			Name string `json:"name"`
		} `json:"offers"`
	}
	if err := json.Unmarshal(js, &ranking); err != nil || len(ranking.Offers) != 6 {
		t.Fatalf("score --json: %v, %d offers, want the example's 6:\n%s", err, len(ranking.Offers), js)
	}
	if first := ranking.Offers[0]; first.Rank != 1 || !regexp.MustCompile(`(?m)^\s*1\s+`+regexp.QuoteMeta(first.Name)+`\s`).Match(out) {
		t.Errorf("score --json ranks %q first (rank %d); the table:\n%s", first.Name, first.Rank, out)
	}
}

// TestBenchRunUsageErrors: values bench run would replace with its
// defaults (a zero) or cannot use are usage errors (exit 2), not a run of
// something else than asked.
func TestBenchRunUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args    []string
		wantMsg string
	}{
		{[]string{"--epochs", "0"}, "--epochs 0: want at least 1"},
		{[]string{"--workers", "-2"}, "--workers -2: want at least 1"},
		{[]string{"--batch", "0"}, "--batch 0: want at least 1"},
		{[]string{"--prefetch", "0"}, "--prefetch 0: want at least 1"},
		{[]string{"--max-steps", "-1"}, "--max-steps -1"},
		{[]string{"--compute-per-sample", "-1ms"}, "cannot be negative"},
		{[]string{"--target-au", "0"}, "--target-au 0: want a share in (0, 1]"},
		{[]string{"--target-au", "NaN"}, "--target-au NaN: want a share in (0, 1]"},
		{[]string{"--request-rate", "NaN"}, "--request-rate NaN: want requests per second"},
		{[]string{"--request-rate", "+Inf"}, "--request-rate +Inf: want requests per second"},
	} {
		out, err := exec.Command(bin, append(append([]string{"bench", "run", "-q"}, tc.args...), dir)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.wantMsg) {
			t.Errorf("bench run %v: %v, want exit 2 saying %q; output:\n%s", tc.args, err, tc.wantMsg, out)
		}
	}
	missing := filepath.Join(dir, "train")
	out, err := exec.Command(bin, "bench", "run", "-q", missing).CombinedOutput()
	if want := missing + ": no such directory"; !strings.Contains(string(out), want) {
		t.Errorf("bench run of a missing directory: %v, want %q; output:\n%s", err, want, out)
	}
}

// TestOwnerAndOtherUsers: --uid and --gid set the owner shown for files and
// directories; another user reads the mount only with --allow-other (the
// kernel refuses everyone but the mounting user otherwise), and announces an
// order only with --announce-any-user too.
func TestOwnerAndOtherUsers(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "o/train/a.bin", []byte("alpha"))
	for _, tc := range []struct {
		name          string
		args          []string
		uid, gid      uint32
		otherRead     bool
		otherAnnounce bool
	}{
		{"default", nil, uint32(os.Getuid()), uint32(os.Getgid()), false, false},
		{"owner given", []string{"--uid", "1234", "--gid", "5678"}, 1234, 5678, false, false},
		{"allow other", []string{"--allow-other"}, uint32(os.Getuid()), uint32(os.Getgid()), true, false},
		{"allow other, any announcer", []string{"--allow-other", "--announce-any-user"}, uint32(os.Getuid()), uint32(os.Getgid()), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A mount point another user can reach: t.TempDir's are 0700.
			mnt, err := os.MkdirTemp("/tmp", "dataccel-owner-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(mnt) })
			os.Chmod(mnt, 0o755)
			m := startMount(t, mnt, append([]string{"--endpoint", srv.Endpoint, "s3://" + st.Bucket() + "/o"}, tc.args...)...)
			for _, p := range []string{filepath.Join(m.dir, "train"), filepath.Join(m.dir, "train", "a.bin")} {
				var s syscall.Stat_t
				err := syscall.Stat(p, &s)
				for err == syscall.EINTR { // a signal to this thread interrupted the LOOKUP: os.Stat would retry too
					err = syscall.Stat(p, &s)
				}
				if err != nil || s.Uid != tc.uid || s.Gid != tc.gid {
					t.Fatalf("%s: owner %d:%d, %v; want %d:%d", p, s.Uid, s.Gid, err, tc.uid, tc.gid)
				}
			}
			if os.Getuid() != 0 {
				testenv.Missing(t, "reading as another user needs root")
			}
			cat := exec.Command("cat", filepath.Join(m.dir, "train", "a.bin"))
			cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cat.CombinedOutput()
			if read := err == nil && string(out) == "alpha"; read != tc.otherRead {
				t.Fatalf("another user read %q, %v; want a read: %v", out, err, tc.otherRead)
			}
			announce := exec.Command("sh", "-c", `printf 'train/a.bin\n' > "$1"`, "sh", filepath.Join(m.dir, ".dataccel", "prefetch"))
			announce.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err = announce.CombinedOutput()
			if announced := err == nil; announced != tc.otherAnnounce {
				t.Fatalf("another user's announcement: %q, %v; want it taken: %v", out, err, tc.otherAnnounce)
			}
		})
	}
}

// TestStaleReadyFile: a ready file left by a mount that was killed is
// removed at start, so a mount that then fails (here, an endpoint that
// refuses) never looks ready.
func TestStaleReadyFile(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	mountAt := func(t *testing.T, ready string) ([]byte, error) {
		cmd := exec.Command(bin, "mount", "--endpoint", fmt.Sprintf("http://127.0.0.1:%d", port), "--connect-timeout", "1s",
			"--ready-file", ready, "s3://bucket", t.TempDir())
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s")
		return cmd.CombinedOutput()
	}
	t.Run("left by a mount", func(t *testing.T) {
		ready := filepath.Join(t.TempDir(), "ready")
		if err := os.WriteFile(ready, []byte("/mnt/data\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := mountAt(t, ready); err == nil {
			t.Fatalf("mount against a closed port succeeded:\n%s", out)
		}
		if _, err := os.Stat(ready); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the old ready file is still there: %v", err)
		}
	})
	// Anything else at the path is the user's: refused, and left as it was
	// (root removed /dev/null given as the ready file).
	for _, tc := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"a directory", "is a directory", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"a device", "is a device", func(p string) error { return syscall.Mknod(p, syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) }},
		{"another program's file", "not a ready file a mount left", func(p string) error { return os.WriteFile(p, []byte("keep me\n"), 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready := filepath.Join(t.TempDir(), "ready")
			if err := tc.make(ready); err != nil {
				testenv.Missing(t, "making %s: %v", tc.name, err)
			}
			before, err := os.Lstat(ready)
			if err != nil {
				t.Fatal(err)
			}
			out, err := mountAt(t, ready)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
				t.Fatalf("mount with %s as the ready file: %v, want exit 2 saying %q; output:\n%s", tc.name, err, tc.want, out)
			}
			if after, err := os.Lstat(ready); err != nil || !os.SameFile(before, after) {
				t.Fatalf("%s at the ready file's path was replaced or removed: %v", tc.name, err)
			}
		})
	}
}

// TestMountAsAnotherUser: a user other than root mounts through the setuid
// fusermount3. A mount that user's killed process left stale is detached
// by the next mount, and SIGTERM with the mount busy (a shell's cwd in it)
// detaches it lazily and exits 0, as for root.
func TestMountAsAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.Missing(t, "running as another user needs root")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		testenv.Missing(t, "no fusermount3 (Debian fuse3): %v", err)
	}
	const nobody = 65534
	st := srv.NewBucket(t)
	testenv.Put(t, st, "u/a.bin", []byte("alpha"))
	// The binary and the directories must be reachable by that user:
	// t.TempDir's and TestMain's are 0700.
	home, err := os.MkdirTemp("/tmp", "dataccel-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	userBin := filepath.Join(home, "dataccel")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(userBin, b, 0o755) != nil {
		t.Fatalf("copy the binary: %v", err)
	}
	mnt, cacheDir := filepath.Join(home, "mnt"), filepath.Join(home, "cache")
	for _, d := range []string{home, mnt, cacheDir} {
		os.Mkdir(d, 0o755)
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	as := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(name, args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home,
			"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
		return c
	}
	start := func() (*exec.Cmd, *testenv.SyncBuffer) {
		c := as(userBin, "mount", "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "s3://"+st.Bucket()+"/u", mnt)
		logs := &testenv.SyncBuffer{}
		c.Stdout, c.Stderr = logs, logs
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Process.Kill()
			c.Wait()
			for range 3 { // the stale mount and the live one
				if m, _ := fuse.IsMountpoint(mnt); m {
					syscall.Unmount(mnt, syscall.MNT_DETACH)
				}
			}
		})
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(logs.String(), "msg=mounted"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not mounted within 15 s:\n%s", logs.String())
			}
		}
		if out, err := as("cat", filepath.Join(mnt, "a.bin")).CombinedOutput(); err != nil || string(out) != "alpha" {
			t.Fatalf("read as that user: %q %v\n%s", out, err, logs.String())
		}
		return c, logs
	}
	// fusermount3 opens /dev/fuse as the user: Debian's udev makes it
	// 0666, a bare VM's devtmpfs may leave it 0600.
	if fi, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "no /dev/fuse: %v", err)
	} else if mode := fi.Mode().Perm(); mode&0o006 != 0o006 {
		// First, what a user meets on such a machine: a clear error.
		out, err := as(userBin, "mount", "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "s3://"+st.Bucket()+"/u", mnt).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "needs read and write access to /dev/fuse") {
			t.Fatalf("mount as another user with /dev/fuse %v: %v\n%s", mode, err, out)
		}
		if err := os.Chmod("/dev/fuse", mode|0o666); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod("/dev/fuse", mode) })
	}
	// A mountpoint the user does not own: fusermount3 says why, and the
	// error points there, not at a raw wait status.
	rootOwned := filepath.Join(home, "root-owned")
	os.Mkdir(rootOwned, 0o755)
	out, err := as(userBin, "mount", "--endpoint", srv.Endpoint, "s3://"+st.Bucket()+"/u", rootOwned).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "fusermount3 refused it: without root, the user needs write access") || strings.Contains(string(out), "code 256") {
		t.Fatalf("mount on a directory of root's as another user: %v\n%s", err, out)
	}
	first, _ := start()
	first.Process.Kill() // leaves the mount stale
	first.Wait()
	second, logs := start()
	shell := as("sleep", "60") // its cwd keeps the mount busy
	shell.Dir = mnt
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shell.Process.Kill(); shell.Wait() })
	second.Process.Signal(syscall.SIGTERM)
	if err := waitExit(second, 15*time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, logs.String())
	}
	if m, _ := fuse.IsMountpoint(mnt); m {
		t.Fatalf("still mounted after exit\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "detached") {
		t.Fatalf("no word of the lazy unmount\n%s", logs.String())
	}
}

// TestStopSignals: SIGHUP (the terminal closed) ends a mount as SIGTERM
// does: unmounted, exit 0. A stop signal ignored at start stays ignored.
func TestStopSignals(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "h/a.bin", []byte("alpha"))
	t.Run("ends the mount", func(t *testing.T) {
		mnt := t.TempDir()
		cmd, logs := mountProcess(t, "--endpoint", srv.Endpoint, "s3://"+st.Bucket()+"/h", mnt)
		cmd.Process.Signal(syscall.SIGHUP)
		if err := waitExit(cmd, 15*time.Second); err != nil {
			t.Fatalf("after SIGHUP: %v\n%s", err, logs.String())
		}
		if m, _ := fuse.IsMountpoint(mnt); m {
			t.Fatal("still mounted after exit")
		}
	})
	// A signal ignored when the mount starts stays ignored: nohup's
	// SIGHUP, and the SIGINT a script's background job ignores (so that
	// Ctrl-C meant for the script's foreground leaves the mount be).
	for _, tc := range []struct {
		name    string
		wrapper []string
		sig     syscall.Signal
	}{
		{"SIGHUP under nohup", []string{"nohup"}, syscall.SIGHUP},
		{"SIGINT ignored at start", []string{"sh", "-c", `trap "" INT; exec "$0" "$@"`}, syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.wrapper[0]); err != nil {
				testenv.Missing(t, "no %s: %v", tc.wrapper[0], err)
			}
			mnt := t.TempDir()
			args := append(append([]string(nil), tc.wrapper[1:]...), bin, "mount", "--endpoint", srv.Endpoint, "s3://"+st.Bucket()+"/h", mnt)
			cmd := exec.Command(tc.wrapper[0], args...)
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
			logs := &testenv.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = logs, logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var exitErr error
			exited := make(chan struct{})
			go func() { exitErr = cmd.Wait(); close(exited) }()
			t.Cleanup(func() { cmd.Process.Kill(); <-exited; syscall.Unmount(mnt, syscall.MNT_DETACH) })
			waitFor(t, 15*time.Second, func() bool { return strings.Contains(logs.String(), "msg=mounted") })
			cmd.Process.Signal(tc.sig)
			select {
			case <-exited:
				t.Fatalf("%s ended the mount: %v\n%s", tc.sig, exitErr, logs.String())
			case <-time.After(time.Second):
			}
			if b, err := os.ReadFile(filepath.Join(mnt, "a.bin")); err != nil || string(b) != "alpha" {
				t.Fatalf("read after %s: %q %v", tc.sig, b, err)
			}
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				if exitErr != nil {
					t.Fatalf("after SIGTERM: %v\n%s", exitErr, logs.String())
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("no exit 15 s after SIGTERM\n%s", logs.String())
			}
		})
	}
}

// waitExit waits up to d for cmd to exit, and returns its exit error or
// one that says it did not exit.
func waitExit(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("no exit within %s", d)
	}
}

// TestSignalWhileChecking: a signal while the start waits on a silent
// endpoint says the start was stopped, not that the endpoint is down.
func TestSignalWhileChecking(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // takes connections and never answers
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	cmd := exec.Command(bin, "mount", "--endpoint", "http://"+ln.Addr().String(), "--connect-timeout", "60s", "s3://bucket", t.TempDir())
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s")
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(cmd, 15*time.Second); err == nil || strings.Contains(out.String(), "unreachable") || !strings.Contains(out.String(), "stopped while checking") {
		t.Fatalf("SIGTERM during the check: %v\n%s", err, out.String())
	}
}

// TestCacheStatUnknownFormat: `cache stat` of a cache whose marker names
// a format this version does not read (a newer version's) says so and how
// to recover, where it showed an empty cache as if all were well; after
// `cache purge` it no longer does.
func TestCacheStatUnknownFormat(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, cache.MarkerName), []byte("dataccel block cache, format 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "cache", "stat", "--cache-dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "unknown") || !strings.Contains(string(out), "format 9") || !strings.Contains(string(out), "cache purge") {
		t.Fatalf("cache stat of an unknown format: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "cache", "purge", "--cache-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("cache purge: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "cache", "stat", "--cache-dir", dir).CombinedOutput()
	if err != nil || strings.Contains(string(out), "unknown") {
		t.Fatalf("cache stat after the purge: %v\n%s", err, out)
	}
}

// TestCacheStatStoppedMount: `cache stat` shows a running mount's counters,
// and when that mount's process is stopped it says so and exits instead of
// waiting on the mount for good; a warm of the stopped mount ends at a
// second signal, as the first says; a killed mount is named as one.
func TestCacheStatStoppedMount(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "s/a.bin", []byte("alpha"))
	cacheDir := t.TempDir()
	mnt := t.TempDir()
	cmd, logs := mountProcess(t, "--endpoint", srv.Endpoint, "--cache-dir", cacheDir, "s3://"+st.Bucket()+"/s", mnt)
	stat := func() string { // its error shows in the output
		out, err := exec.Command(bin, "cache", "stat", "--cache-dir", cacheDir).CombinedOutput()
		return fmt.Sprintf("%s(exit: %v)", out, err)
	}
	if out := stat(); !strings.Contains(out, "counters:") || !strings.Contains(out, "exit: <nil>") {
		t.Fatalf("cache stat beside a running mount shows no counters:\n%s\nmount:\n%s", out, logs.String())
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT) })
	done := make(chan string, 1)
	go func() { done <- stat() }()
	select {
	case out := <-done:
		if !strings.Contains(out, "no answer within") || !strings.Contains(out, "exit: <nil>") {
			t.Fatalf("cache stat beside a stopped mount:\n%s", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cache stat still waits on the stopped mount after 20 s")
	}
	// A warm waits on the stopped mount's files: the first signal says a
	// second one ends it, and the second does.
	warm := exec.Command(bin, "warm", "-q", mnt)
	var out testenv.SyncBuffer
	warm.Stdout, warm.Stderr = &out, &out
	if err := warm.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	warm.Process.Signal(syscall.SIGINT)
	waitFor(t, 5*time.Second, func() bool { return strings.Contains(out.String(), "a second signal ends it at once") })
	warm.Process.Signal(syscall.SIGINT)
	if err := waitExit(warm, 10*time.Second); err == nil || strings.Contains(err.Error(), "no exit") {
		t.Fatalf("warm after a second SIGINT: %v\n%s", err, out.String())
	}
	// A mount killed (its record left behind) is named as such, not as a
	// running mount whose counters are unreadable.
	cmd.Process.Kill()
	cmd.Wait()
	if out := stat(); !strings.Contains(out, "is not served: its process ended") || !strings.Contains(out, "exit: <nil>") {
		t.Fatalf("cache stat beside a killed mount:\n%s", out)
	}
}

// immutableDir returns an empty directory no one can create files in, root
// included (chattr +i): a directory root cannot write though it may look
// for files there (a missing one is ENOENT, not a write error).
func immutableDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "immutable")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		testenv.Missing(t, "chattr +i (e2fsprogs): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	return dir
}

// TestMountpointThroughSymlink: a mountpoint named through a symlink (a
// parent that is one, or itself one) mounts on the real path, and the
// checks find what is there: a live mount is refused, a stale one left by
// a killed process is detached.
func TestMountpointThroughSymlink(t *testing.T) {
	st := srv.NewBucket(t)
	testenv.Put(t, st, "l/a.bin", []byte("alpha"))
	setCreds(t, srv.AccessKey, srv.SecretKey)
	base := t.TempDir()
	real := filepath.Join(base, "real", "m")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "parent-link"))
	os.Symlink(real, filepath.Join(base, "link"))
	for name, path := range map[string]string{
		"parent is a symlink": filepath.Join(base, "parent-link", "m"),
		"itself a symlink":    filepath.Join(base, "link"),
	} {
		t.Run(name, func(t *testing.T) {
			args := []string{"--endpoint", srv.Endpoint, "s3://" + st.Bucket() + "/l", path}
			first, _ := mountProcess(t, args...)
			if m, _ := fuse.IsMountpoint(real); !m {
				t.Fatalf("%s is no mount point", real)
			}
			if err := execCmd(t, append([]string{"mount"}, args...)...); err == nil || !strings.Contains(err.Error(), "already a mount point") {
				t.Fatalf("a second mount on it: %v", err)
			}
			first.Process.Kill() // leaves the mount stale
			first.Wait()
			_, logs := mountProcess(t, args...)
			if b, err := os.ReadFile(filepath.Join(path, "a.bin")); err != nil || string(b) != "alpha" {
				t.Fatalf("read after the stale mount was replaced: %q %v\n%s", b, err, logs.String())
			}
		})
	}
}

// TestEndpointID: ways of writing one endpoint name one store, for the
// local copies and the saved listings a mount adopts.
func TestEndpointID(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"http://minio:9000", "http://minio:9000/"},
		{"http://minio:9000", "HTTP://MinIO:9000"},
		{"https://s3.example.com", "https://s3.example.com:443/"},
		{"http://[::1]:9000", "http://[::1]:9000/"},
		{"", ""},
	} {
		if x, y := endpointID(tc.a), endpointID(tc.b); x != y {
			t.Errorf("endpointID(%q) = %q, endpointID(%q) = %q; want one store", tc.a, x, tc.b, y)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"http://minio:9000", "http://minio:9001"},
		{"http://minio:9000", "https://minio:9000"},
		{"http://gw/a", "http://gw/b"},
	} {
		if endpointID(tc.a) == endpointID(tc.b) {
			t.Errorf("endpointID(%q) = endpointID(%q) = %q; want two stores", tc.a, tc.b, endpointID(tc.a))
		}
	}
}
