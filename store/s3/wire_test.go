package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wireServer is a test server that counts the connections it accepts.
func wireServer(t *testing.T, tlsOn bool, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	if tlsOn {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, &conns
}

func wireGet(t *testing.T, w *wire, ctx context.Context, url string, readAll bool) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if !readAll {
		b := make([]byte, 3)
		n, err := io.ReadFull(resp.Body, b)
		return string(b[:n]), err
	}
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), errors.New(resp.Status)
	}
	return string(b), err
}

// TestWire: GETs on pooled connections, with the exchanges that must not
// leave a connection in the pool (a body closed early, a cancelled
// request) and one that the server closed while idle.
func TestWire(t *testing.T) {
	body := strings.Repeat("0123456789", 10000)
	block := make(chan struct{})
	var blockOnce sync.Once
	t.Cleanup(func() { blockOnce.Do(func() { close(block) }) })
	h := func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked": // no Content-Length: chunked, as error bodies often are
			rw.WriteHeader(http.StatusNotFound)
			io.WriteString(rw, "<Error><Code>NoSuchKey</Code></Error>")
			rw.(http.Flusher).Flush()
			io.WriteString(rw, "<!-- more -->")
		case "/block":
			select {
			case <-block:
			case <-r.Context().Done(): // the client went away
			}
		default:
			io.WriteString(rw, body+r.URL.Path)
		}
	}
	for _, tlsOn := range []bool{false, true} {
		name := map[bool]string{false: "http", true: "https"}[tlsOn]
		t.Run(name, func(t *testing.T) {
			srv, conns := wireServer(t, tlsOn, h)
			w := newWire(8, srv.Client(), (&net.Dialer{}).DialContext)
			if tlsOn {
				roots := x509.NewCertPool()
				roots.AddCert(srv.Certificate())
				w.tls = &tls.Config{RootCAs: roots}
			}
			ctx := context.Background()
			for i, p := range []string{"/a", "/b", "/c"} {
				got, err := wireGet(t, w, ctx, srv.URL+p, true)
				if err != nil || got != body+p {
					t.Fatalf("GET %s: %d bytes, %v", p, len(got), err)
				}
				if n := conns.Load(); n != 1 {
					t.Fatalf("after %d GETs read to the end: %d connections, want 1", i+1, n)
				}
			}
			// A body closed early takes its connection with it.
			if got, err := wireGet(t, w, ctx, srv.URL+"/d", false); err != nil || got != "012" {
				t.Fatalf("partial read: %q, %v", got, err)
			}
			if got, err := wireGet(t, w, ctx, srv.URL+"/e", true); err != nil || got != body+"/e" {
				t.Fatalf("GET after an early close: %d bytes, %v", len(got), err)
			}
			if n := conns.Load(); n != 2 {
				t.Errorf("connections after an early close: %d, want 2", n)
			}
			// A chunked error answer is read whole.
			if got, err := wireGet(t, w, ctx, srv.URL+"/chunked", true); err == nil || got != "<Error><Code>NoSuchKey</Code></Error><!-- more -->" {
				t.Errorf("chunked 404: %q, %v", got, err)
			}
			// The server drops its idle connections: the pooled one fails
			// before any answer, and the GET goes out again on a new one.
			srv.CloseClientConnections()
			if got, err := wireGet(t, w, ctx, srv.URL+"/f", true); err != nil || got != body+"/f" {
				t.Fatalf("GET on a connection the server closed: %d bytes, %v", len(got), err)
			}
			// A cancelled request returns at once with the context's error.
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			if _, err := wireGet(t, w, cctx, srv.URL+"/block", true); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("cancelled GET: %v, want DeadlineExceeded", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("cancelled GET returned after %v", d)
			}
			if got, err := wireGet(t, w, ctx, srv.URL+"/g", true); err != nil || got != body+"/g" {
				t.Fatalf("GET after a cancelled one: %d bytes, %v", len(got), err)
			}
			// A connection idle for longer than maxAge is not used again.
			n := conns.Load()
			w.maxAge = time.Millisecond
			time.Sleep(5 * time.Millisecond)
			if got, err := wireGet(t, w, ctx, srv.URL+"/h", true); err != nil || got != body+"/h" {
				t.Fatalf("GET after an idle spell: %d bytes, %v", len(got), err)
			}
			if m := conns.Load(); m != n+1 {
				t.Errorf("connections after an idle spell: %d, want %d (a new one)", m, n+1)
			}
		})
	}
}
