// Package testenv starts the real S3-compatible server (versitygw, POSIX
// backend) that tests talk to, on a free loopback port with fresh credentials
// and a temporary directory, and creates buckets and fixtures in it. A server
// dies with the process that started it (on Linux), even when a panic or a
// test timeout skips its Stop. It also settles FUSE polling for tests that
// read mounts their own process serves (SettleFUSEPoll).
//
// It is for tests and the local demo tools (internal/tools). It does not install the server: `make deps`
// (run by `make test`) does; a missing binary is a test failure with a clear
// message, never a silent skip.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dataccel/dataccel/store"
	"github.com/dataccel/dataccel/store/s3"
)

// leakOptions are the goroutines that may outlive the tests: the idle
// keep-alive connections of net/http's transports (blocked in a read, so
// matched anywhere in their stacks).
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
}

// Server is a running versitygw process.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	Addr      string // 127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // backing directory: Dir/BUCKET/KEY

	cmd     *exec.Cmd
	done    chan struct{} // closed by Stop: releases the thread that started cmd
	logf    *os.File
	buckets atomic.Int64
}

// Binary finds the versitygw executable: $VERSITYGW, then PATH, then GOPATH/bin.
func Binary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("versitygw not found (set $VERSITYGW, or run `make deps`)")
}

// Start launches a server in a new temporary directory and waits until it
// answers; extra are more of versitygw's flags.
func Start(extra ...string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dataccel-s3-")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		Addr:      fmt.Sprintf("127.0.0.1:%d", port),
		AccessKey: "test" + randHex(6),
		SecretKey: randHex(20),
		Region:    "us-east-1",
		Dir:       filepath.Join(dir, "root"),
	}
	s.Endpoint = "http://" + s.Addr
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	s.logf, err = os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return nil, err
	}
	args := append([]string{"--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region,
		"--keep-alive", "--quiet", "--port", s.Addr}, extra...)
	s.cmd = exec.Command(bin, append(args, "posix", s.Dir)...)
	s.cmd.Stdout, s.cmd.Stderr = s.logf, s.logf
	s.done = make(chan struct{})
	if err := startOwned(s.cmd, s.done); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			log, _ := os.ReadFile(s.logf.Name())
			return nil, fmt.Errorf("versitygw did not answer on %s: %s", s.Addr, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the server and removes its data.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	if s.done != nil {
		close(s.done)
		s.done = nil
	}
	if s.logf != nil {
		s.logf.Close()
	}
	os.RemoveAll(filepath.Dir(s.Dir))
}

// Run is the body of a TestMain that needs the server: it starts one, runs
// the tests, stops it and returns the exit code. Tests that pass fail the
// run if they leave goroutines behind (a loader, a walker, a watch that
// outlives its owner).
func Run(m *testing.M, srv **Server) int {
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	*srv = s
	code := m.Run()
	s.Stop()
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: goroutines left after the tests:", err)
			return 1
		}
	}
	return code
}

// Config returns the s3.Config to reach bucket on this server.
func (s *Server) Config(bucket string) s3.Config {
	return s3.Config{
		Endpoint:    s.Endpoint,
		Region:      s.Region,
		Bucket:      bucket,
		PathStyle:   true,
		Credentials: s3.Credentials{AccessKey: s.AccessKey, SecretKey: s.SecretKey},
	}
}

// NewBucket creates a bucket with a fresh name and returns a store for it.
func (s *Server) NewBucket(t testing.TB) *s3.Store {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", s.buckets.Add(1), randHex(4))
	st, err := s3.New(s.Config(name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.MakeBucket(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// Put uploads data under key and fails the test on error. A PUT that meets
// a connection the server has just closed (broken pipe, reset) is sent again:
// net/http does not replay a PUT on its own, and tests are not about that.
func Put(t testing.TB, st *s3.Store, key string, data []byte) store.Object {
	t.Helper()
	obj, err := PutBytes(context.Background(), st, key, data)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// PutBytes uploads data under key, sending it again (three times at most)
// when the server closed a kept-alive connection as the request went out
// (EPIPE, ECONNRESET): a race of the test server's idle timeout, which the
// upload's one try does not cover.
func PutBytes(ctx context.Context, st *s3.Store, key string, data []byte) (store.Object, error) {
	for attempt := 1; ; attempt++ {
		obj, err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
		if err == nil || attempt == 3 || !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			return obj, err
		}
	}
}

// FreePort asks the kernel for an unused loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
