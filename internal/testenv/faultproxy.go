package testenv

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store/s3"
)

// Fault is one kind of failure the FaultProxy injects.
type Fault int

const (
	SlowDown       Fault = iota // 503 SlowDown, the S3 throttling answer
	InternalError               // 500 InternalError
	ResetMidBody                // half the body, then the connection is reset
	StallFirstByte              // wait Stall before answering at all
	StallMidBody                // half the body, wait Stall, then the rest
	DripMidBody                 // half the body, then one byte every Stall
	numFaults
)

func (f Fault) String() string {
	return [...]string{"slowdown", "internal-error", "reset-mid-body", "stall-first-byte", "stall-mid-body", "drip-mid-body"}[f]
}

// Rule says which requests get a fault: those whose method matches
// (empty: any) and whose path contains PathContains, every Every-th such
// request (0 or 1: each), at most Count times (0: no limit).
type Rule struct {
	Fault        Fault
	Method       string
	PathContains string
	Every        int
	Count        int
	Stall        time.Duration

	seen, fired int // guarded by FaultProxy.mu
}

// FaultProxy sits between a client and the real S3 server and injects
// faults by rule, or drops the server entirely (SetDown).
type FaultProxy struct {
	Addr     string
	Endpoint string
	target   string
	client   *http.Client

	mu    sync.Mutex
	rules []*Rule // guarded by mu
	down  bool    // guarded by mu

	// NoETags makes the proxy a server that sends no ETag: none in answers'
	// headers, none in listings.
	NoETags atomic.Bool
	// ListPrefix, when set, refuses (403 AccessDenied) every listing of a
	// bucket whose prefix does not start with it, as an IAM policy that
	// grants s3:ListBucket on a dataset's prefix only.
	ListPrefix atomic.Pointer[string]

	injected [numFaults]atomic.Int64
	refused  atomic.Int64
	ln       net.Listener
	srv      *http.Server
	// closed ends every stall at Close: a stalled request whose body was
	// never read (a PUT) does not see its client go, and would outlive the
	// test.
	closed    chan struct{}
	closeOnce sync.Once
}

// StartFaultProxy listens on a free loopback port and forwards to target (host:port).
func StartFaultProxy(target string) (*FaultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{
		Addr:   ln.Addr().String(),
		target: target,
		ln:     ln,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}},
		closed: make(chan struct{}),
	}
	p.Endpoint = "http://" + p.Addr
	p.srv = &http.Server{Handler: p}
	go p.srv.Serve(ln)
	return p, nil
}

// Add installs a rule; rules are tried in order, the first match fires.
func (p *FaultProxy) Add(r Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &r)
}

// Clear removes all rules.
func (p *FaultProxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// SetDown makes the server unreachable (every connection is cut at once)
// or brings it back.
func (p *FaultProxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// Injected returns how many times fault f fired.
func (p *FaultProxy) Injected(f Fault) int64 { return p.injected[f].Load() }

// Refused returns how many requests met a down server.
func (p *FaultProxy) Refused() int64 { return p.refused.Load() }

// Close stops the proxy.
func (p *FaultProxy) Close() error {
	p.closeOnce.Do(func() { close(p.closed) })
	return p.srv.Close()
}

// stall waits d, and says false if the request or the proxy ended first.
func (p *FaultProxy) stall(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-p.closed:
	}
	return false
}

func (p *FaultProxy) pick(r *http.Request) (*Rule, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return nil, true
	}
	for _, rule := range p.rules {
		if (rule.Method != "" && rule.Method != r.Method) || !strings.Contains(r.URL.Path, rule.PathContains) {
			continue
		}
		if rule.Count > 0 && rule.fired >= rule.Count {
			continue
		}
		rule.seen++
		if rule.Every > 1 && rule.seen%rule.Every != 0 {
			continue
		}
		rule.fired++
		p.injected[rule.Fault].Add(1)
		return rule, false
	}
	return nil, false
}

func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if lp := p.ListPrefix.Load(); lp != nil && r.Method == http.MethodGet && !strings.Contains(strings.Trim(r.URL.Path, "/"), "/") &&
		!r.URL.Query().Has("location") && !strings.HasPrefix(r.URL.Query().Get("prefix"), *lp) {
		s3Error(w, http.StatusForbidden, "AccessDenied", "Access Denied")
		return
	}
	rule, down := p.pick(r)
	if down {
		p.refused.Add(1)
		hijackClose(w)
		return
	}
	if rule != nil {
		switch rule.Fault {
		case SlowDown:
			s3Error(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
			return
		case InternalError:
			s3Error(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error.")
			return
		case StallFirstByte:
			if !p.stall(r, rule.Stall) {
				hijackClose(w) // at once: net/http would linger on an unread body
				return
			}
		}
	}
	resp, err := p.forward(r)
	if err != nil {
		s3Error(w, http.StatusBadGateway, "InternalError", err.Error())
		return
	}
	defer resp.Body.Close()
	if p.NoETags.Load() {
		resp.Header.Del("ETag")
		if strings.Contains(resp.Header.Get("Content-Type"), "xml") { // a listing, v1 or v2
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				hijackClose(w)
				return
			}
			b = etagElem.ReplaceAll(b, nil)
			resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
			resp.Body = io.NopCloser(bytes.NewReader(b))
		}
	}
	if rule != nil && (rule.Fault == ResetMidBody || rule.Fault == StallMidBody || rule.Fault == DripMidBody) && resp.ContentLength > 1 {
		p.breakBody(w, r, resp, rule)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

var etagElem = regexp.MustCompile(`<ETag>[^<]*</ETag>`)

// forward sends r to the real server unchanged (the signature covers the
// Host header, which stays the proxy's: the server validates what it got).
func (p *FaultProxy) forward(r *http.Request) (*http.Response, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.target+r.URL.RequestURI(), r.Body)
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host
	out.ContentLength = r.ContentLength
	return p.client.Do(out)
}

// breakBody writes the response by hand on the raw connection: the headers
// promise the full length, half the body follows, then a reset, a stall or
// a drip (a byte at a time, each in less than a stall timeout when Stall is
// shorter than it: the connection never looks dead).
func (p *FaultProxy) breakBody(w http.ResponseWriter, r *http.Request, resp *http.Response, rule *Rule) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	resp.Header.Write(buf)
	fmt.Fprintf(buf, "Content-Length: %d\r\n\r\n", resp.ContentLength)
	half := resp.ContentLength / 2
	io.CopyN(buf, resp.Body, half)
	buf.Flush()
	if rule.Fault == ResetMidBody {
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, not FIN
		}
		return
	}
	if rule.Fault == DripMidBody {
		one := make([]byte, 1)
		for {
			if !p.stall(r, rule.Stall) {
				return
			}
			if _, err := io.ReadFull(resp.Body, one); err != nil {
				return
			}
			if _, err := buf.Write(one); err != nil || buf.Flush() != nil {
				return // the client gave up
			}
		}
	}
	if !p.stall(r, rule.Stall) {
		return
	}
	io.Copy(buf, resp.Body)
	buf.Flush()
}

func hijackClose(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		conn.Close()
	}
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, msg)
}

// BehindFaultProxy starts a FaultProxy in front of s and returns it with a
// store for direct's bucket that goes through it; the proxy closes at
// cleanup.
func (s *Server) BehindFaultProxy(t testing.TB, direct *s3.Store) (*FaultProxy, *s3.Store) {
	t.Helper()
	fp, err := StartFaultProxy(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	cfg := s.Config(direct.Bucket())
	cfg.Endpoint = fp.Endpoint
	st, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fp, st
}
