package s3

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// wire sends GETs over HTTP/1.1 on connections it pools itself, on the
// caller's goroutine: net/http's Transport runs two goroutines per
// connection and hands every request and response between them, which
// costs a small GET about as much CPU as reading its body. Requests that
// need more than a plain HTTP/1.1 exchange (a proxy) go to fallback.
type wire struct {
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	tls      *tls.Config   // for https; nil: the system's roots
	maxIdle  int           // idle connections kept per host
	maxAge   time.Duration // idle time after which a connection is not used again
	fallback *http.Client

	mu   sync.Mutex
	idle map[string][]*wireConn // guarded by mu: by scheme://host
}

type wireConn struct {
	key       string
	c         net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

func newWire(maxIdle int, fallback *http.Client, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *wire {
	return &wire{
		dial:    dial,
		maxIdle: max(1, maxIdle),
		// Servers close idle connections (S3 after about 20 s); a
		// connection idle longer is likely closed, and using it would
		// cost a failed attempt.
		maxAge:   15 * time.Second,
		fallback: fallback,
		idle:     map[string][]*wireConn{},
	}
}

// Do sends req, a GET without a body, and returns the response. Its body
// must be closed; read to its end, it gives the connection back.
func (w *wire) Do(req *http.Request) (*http.Response, error) {
	if p, err := http.ProxyFromEnvironment(req); err != nil || p != nil || req.Method != http.MethodGet || req.Body != nil {
		return w.fallback.Do(req)
	}
	key := req.URL.Scheme + "://" + req.URL.Host
	for fresh := false; ; fresh = true {
		wc, reused, err := w.conn(req.Context(), req.URL, key, fresh)
		if err != nil {
			return nil, err
		}
		resp, err := w.roundTrip(req, wc)
		if err == nil {
			return resp, nil
		}
		// A pooled connection the server closed while it sat idle fails
		// before any answer: send the GET again on a new one.
		if !reused || req.Context().Err() != nil || !staleConn(err) {
			return nil, err
		}
	}
}

// staleConn says whether err is what a connection closed by the server
// while idle gives to the next request.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (w *wire) roundTrip(req *http.Request, wc *wireConn) (*http.Response, error) {
	// Cancelling the request unblocks its reads and writes (a deadline in
	// the past); the connection is not reused after that. A read of the
	// body that fails then says why (cancelled), not "i/o timeout".
	body := &wireBody{w: w, wc: wc}
	body.stop = context.AfterFunc(req.Context(), func() {
		err := req.Context().Err()
		body.cancelled.Store(&err)
		wc.c.SetDeadline(time.Unix(1, 0))
	})
	fail := func(err error) (*http.Response, error) {
		body.stop()
		wc.c.Close()
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	if err := writeRequest(wc.bw, req); err != nil {
		return fail(err)
	}
	if err := wc.bw.Flush(); err != nil {
		return fail(err)
	}
	resp, err := readResponse(wc.br, req)
	if err != nil {
		return fail(err)
	}
	body.body, body.reuse = resp.Body, !resp.Close
	resp.Body = body
	return resp, nil
}

// conn returns an idle connection to key (unless fresh), or dials one.
func (w *wire) conn(ctx context.Context, u *url.URL, key string, fresh bool) (wc *wireConn, reused bool, err error) {
	for !fresh {
		w.mu.Lock()
		if l := w.idle[key]; len(l) > 0 {
			wc = l[len(l)-1]
			w.idle[key] = l[:len(l)-1]
		}
		w.mu.Unlock()
		if wc == nil {
			break
		}
		if time.Since(wc.idleSince) < w.maxAge {
			return wc, true, nil
		}
		wc.c.Close()
		wc = nil
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	c, err := w.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	if u.Scheme == "https" {
		cfg := &tls.Config{}
		if w.tls != nil {
			cfg = w.tls.Clone()
		}
		cfg.ServerName, cfg.NextProtos = u.Hostname(), []string{"http/1.1"}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, false, err
		}
		c = tc
	}
	return &wireConn{key: key, c: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriterSize(c, 4<<10)}, false, nil
}

// put gives a connection whose exchange ended cleanly back to the pool.
func (w *wire) put(wc *wireConn) {
	wc.idleSince = time.Now()
	w.mu.Lock()
	if l := w.idle[wc.key]; len(l) < w.maxIdle {
		w.idle[wc.key] = append(l, wc)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	wc.c.Close()
}

// wireBody is a response body. Read to its end, it gives its connection
// back to the pool; closed before, it closes the connection.
type wireBody struct {
	w     *wire
	wc    *wireConn
	body  io.ReadCloser
	reuse bool        // the response allows another request on the connection
	stop  func() bool // stops the cancellation watch
	// cancelled holds the request's context error once it is cancelled.
	cancelled atomic.Pointer[error]
	done      bool
}

func (b *wireBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.finish(true)
	} else if c := b.cancelled.Load(); err != nil && c != nil {
		err = fmt.Errorf("read body: %w (%v)", *c, err)
	}
	return n, err
}

func (b *wireBody) Close() error {
	b.finish(false)
	return nil
}

func (b *wireBody) finish(atEOF bool) {
	if b.done {
		return
	}
	b.done = true
	// stop is false once the cancellation has fired: its deadline is set.
	if b.stop() && atEOF && b.reuse && b.wc.br.Buffered() == 0 {
		b.w.put(b.wc)
		return
	}
	b.wc.c.Close()
}
