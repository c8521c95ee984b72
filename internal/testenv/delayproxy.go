package testenv

import (
	"io"
	"net"
	"sync"
	"time"
)

// DelayProxy is a TCP delay line in front of a server: every chunk of bytes
// is delivered rtt/2 after it was sent, in each direction, and a new
// connection costs one extra rtt (the handshake of a real network). The
// kernel here has no netem, so this is how tests and benchmarks see a
// remote object store's round trips on loopback. Bandwidth is not limited.
type DelayProxy struct {
	Addr string
	rtt  time.Duration
	ln   net.Listener
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool // guarded by mu
}

// StartDelayProxy listens on a free loopback port and forwards to target.
func StartDelayProxy(target string, rtt time.Duration) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{Addr: ln.Addr().String(), rtt: rtt, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c, target) }()
		}
	}()
	return p, nil
}

func (p *DelayProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *DelayProxy) serve(client net.Conn, target string) {
	defer client.Close()
	p.track(client, true)
	defer p.track(client, false)
	time.Sleep(p.rtt) // TCP handshake
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	p.track(server, true)
	defer p.track(server, false)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done
}

type chunk struct {
	at   time.Time
	data []byte
}

// pipe copies src to dst, delivering each chunk rtt/2 after it was read.
// The queue is bounded: a slow reader applies back-pressure as TCP would.
func (p *DelayProxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{at: time.Now().Add(p.rtt / 2), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	// Unblock the other direction and the reader goroutine.
	dst.Close()
	src.Close()
	for range q {
	}
}

// Close stops the proxy and cuts every connection.
func (p *DelayProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

var _ io.Closer = (*DelayProxy)(nil)
