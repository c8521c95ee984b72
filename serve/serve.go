// Package serve owns dataccel's small operational HTTP server: /healthz
// (the process is alive), /readyz (a readiness check supplied by the
// caller) and /metrics (a Prometheus registry supplied by the caller).
//
// It does not own what readiness means, which metrics exist, flags or
// logging setup: the command that starts the server passes those in. It
// serves plain HTTP; put it on a port that is not exposed outside the pod
// or node. It keeps no package-level state.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The endpoint paths, shared with the Kubernetes manifests (their tests
// check the probes against these).
const (
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
)

// ReadyTimeout bounds one call of the readiness function, so a hung check
// answers 503 before the kubelet's probe times out (default 1s).
const ReadyTimeout = 900 * time.Millisecond

// Server serves the three endpoints on one address.
type Server struct {
	addr   string
	logger *slog.Logger
	srv    *http.Server

	mu sync.Mutex
	ln net.Listener
}

// New returns a server for addr (host:port; ":0" picks a free port). reg
// may be nil (an empty registry is served); ready may be nil (always
// ready); logger may be nil (discard).
func New(addr string, reg *prometheus.Registry, ready func(context.Context) error, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{addr: addr, logger: logger}
	s.srv = &http.Server{
		Handler:           Handler(reg, ready, logger),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return s
}

// Handler returns the mux serving the three endpoints; New uses it, and
// tests or other servers may mount it directly.
func Handler(reg *prometheus.Registry, ready func(context.Context) error, logger *slog.Logger) http.Handler {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET "+PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
			defer cancel()
			if err := ready(ctx); err != nil {
				logger.Debug("not ready", "err", err)
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	// No HandlerOpts.Registry: it would add promhttp_* metrics to reg, and
	// every metric dataccel serves is named dataccel_*.
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	return mux
}

// Start listens on the address and serves in the background. A listen
// error (port in use, bad address) is returned here, not later.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return errors.New("serve: already started")
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("serve: listen on %s: %w", s.addr, err)
	}
	s.ln = ln
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("http server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	s.logger.Info("http server listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the address listened on once started (useful with ":0"), else
// the configured one.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.addr
}

// Shutdown stops accepting connections and waits for in-flight requests
// until ctx ends. It is safe to call on a server that never started.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	started := s.ln != nil
	s.mu.Unlock()
	if !started {
		return nil
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	return nil
}
