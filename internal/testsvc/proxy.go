package testsvc

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards loopback TCP connections to a target and can cut them, to play a database, Redis or
// broker that becomes unreachable mid-test without touching the shared server, or stall them, to play
// one that stopped answering.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	down    bool
	stalled bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards to target until t ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Stall makes the proxy a black hole, as a network that drops every packet or a server process that
// was stopped (SIGSTOP): open connections stay open but carry nothing more either way (what arrives is
// discarded), and new ones are accepted and never answered. Nothing is closed, so only the peers'
// own timeouts end their calls. Cut ends it (closing every connection); Restore after Cut forwards
// again.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Restore accepts connections again and ends a Stall (connections cut or stalled stay so: a stream that
// lost bytes cannot be resumed).
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down, p.stalled = false, false
}

func (p *Proxy) isStalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			_ = client.Close()
			continue
		}
		if p.isStalled() { // accepted, never answered
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(io.Discard, client)
				_ = client.Close()
				p.untrack(client)
			}()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(server) {
			_ = client.Close()
			p.untrack(client)
			if server != nil {
				_ = server.Close()
			}
			continue
		}
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			p.forward(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.untrack(dst)
			p.untrack(src)
		}
		go pipe(server, client)
		go pipe(client, server)
	}
}

// forward copies src to dst until either fails, discarding what arrives while the proxy is stalled.
func (p *Proxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isStalled() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
