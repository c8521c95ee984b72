package serve_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dataccel/dataccel/serve"
)

func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "dataccel_test_reads_total", Help: "test counter"})
	reg.MustRegister(c)
	c.Add(3)

	notReady := errors.New("mount not live")
	tests := []struct {
		name       string
		method     string
		path       string
		ready      func(context.Context) error
		wantStatus int
		wantBody   string
	}{
		{"healthz", http.MethodGet, serve.PathHealthz, nil, 200, "ok"},
		{"healthz ignores readiness", http.MethodGet, serve.PathHealthz, func(context.Context) error { return notReady }, 200, "ok"},
		{"readyz nil func", http.MethodGet, serve.PathReadyz, nil, 200, "ok"},
		{"readyz ready", http.MethodGet, serve.PathReadyz, func(context.Context) error { return nil }, 200, "ok"},
		{"readyz not ready", http.MethodGet, serve.PathReadyz, func(context.Context) error { return notReady }, 503, "not ready: mount not live"},
		{"readyz hung check times out", http.MethodGet, serve.PathReadyz, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, 503, "deadline exceeded"},
		{"metrics", http.MethodGet, serve.PathMetrics, nil, 200, "dataccel_test_reads_total 3"},
		{"post refused", http.MethodPost, serve.PathHealthz, nil, 405, ""},
		{"unknown path", http.MethodGet, "/nope", nil, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := serve.Handler(reg, tt.ready, nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %q", rec.Code, tt.wantStatus, rec.Body.String())
			}
			if !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Fatalf("body %q does not contain %q", rec.Body.String(), tt.wantBody)
			}
			if tt.path == serve.PathMetrics {
				// The server adds no metric of its own to the registry.
				for _, line := range strings.Split(rec.Body.String(), "\n") {
					if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "dataccel_") {
						t.Fatalf("metric not named dataccel_*: %s", line)
					}
				}
			}
		})
	}
}

func TestServerStartShutdown(t *testing.T) {
	s := serve.New("127.0.0.1:0", nil, func(context.Context) error { return nil }, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("second Start succeeded")
	}
	for _, p := range []string{serve.PathHealthz, serve.PathReadyz, serve.PathMetrics} {
		resp, err := http.Get("http://" + s.Addr() + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", p, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + s.Addr() + serve.PathHealthz); err == nil {
		t.Fatal("server still answers after Shutdown")
	}
}

func TestStartReportsListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := serve.New(ln.Addr().String(), nil, nil, nil)
	if err := s.Start(); err == nil {
		s.Shutdown(context.Background())
		t.Fatal("Start on a busy port succeeded")
	}
	// Shutdown of a server that never started is a no-op.
	if err := serve.New("127.0.0.1:0", nil, nil, nil).Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
