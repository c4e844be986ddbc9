package dtmserver

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// ProxyAction is what a [Proxy] does with one request. The zero value forwards it and passes DTM's
// answer back.
type ProxyAction struct {
	// Hold, when not nil, delays the request until it is closed (a slow network or gateway), before
	// anything else happens.
	Hold <-chan struct{}
	// HoldAnswer, when not nil, delays the answer to a forwarded request until it is closed (DTM
	// got the request; its answer is slow to come back).
	HoldAnswer <-chan struct{}
	// Drop keeps the request from DTM: it is never forwarded.
	Drop bool
	// Later forwards the request only once Later is closed, after the client got its answer (a gateway
	// that timed out while the request was still on its way). Implies an answer that is not DTM's:
	// Status (default 504) or Reset.
	Later <-chan struct{}
	// Status, when not 0, replaces DTM's answer with this status and a gateway's HTML body (502, 503,
	// 504...), after the request was forwarded (unless Drop or Later).
	Status int
	// Reset closes the client's connection with a TCP reset instead of answering, after the request
	// was forwarded (unless Drop or Later).
	Reset bool
}

// Proxy is an HTTP proxy in front of a DTM server for fault tests: a function decides, per request,
// whether it reaches DTM and what the client gets back. It is safe for concurrent use.
type Proxy struct {
	srv    *httptest.Server
	target string // http://127.0.0.1:port of the server
	decide func(r *http.Request) ProxyAction
	closed chan struct{}  // closed when the test ends: late forwards not yet due are dropped
	wg     sync.WaitGroup // late forwards
}

// NewProxy starts a proxy in front of srv, whose decide function (nil: forward everything) chooses
// each request's fate, and closes it when t ends: requests still held are then let go, late forwards
// not yet due are dropped.
func NewProxy(t testing.TB, srv *Server, decide func(r *http.Request) ProxyAction) *Proxy {
	t.Helper()
	p := &Proxy{target: strings.TrimSuffix(srv.URL(), "/api/dtmsvr"), decide: decide, closed: make(chan struct{})}
	if p.decide == nil {
		p.decide = func(*http.Request) ProxyAction { return ProxyAction{} }
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		close(p.closed)
		p.srv.Close()
		p.wg.Wait()
	})
	return p
}

// URL returns the proxied API base, like [Server.URL].
func (p *Proxy) URL() string { return p.srv.URL + "/api/dtmsvr" }

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	a := p.decide(r)
	if a.Hold != nil {
		select {
		case <-a.Hold:
		case <-p.closed:
		}
	}
	switch {
	case a.Drop:
	case a.Later != nil:
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			select {
			case <-a.Later:
			case <-p.closed:
				return
			}
			if resp, err := p.forward(context.Background(), r, body); err == nil {
				_ = resp.Body.Close()
			}
		}()
		if !a.Reset && a.Status == 0 {
			a.Status = http.StatusGatewayTimeout
		}
	default:
		resp, err := p.forward(r.Context(), r, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if a.HoldAnswer != nil {
			select {
			case <-a.HoldAnswer:
			case <-p.closed:
			}
		}
		if !a.Reset && a.Status == 0 {
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
	}
	if a.Reset {
		reset(w)
		return
	}
	if a.Status == 0 {
		a.Status = http.StatusBadGateway
	}
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(a.Status)
	_, _ = io.WriteString(w, "<html><body><h1>"+http.StatusText(a.Status)+"</h1>proxy</body></html>\n")
}

// forward sends the request to the server.
func (p *Proxy) forward(ctx context.Context, r *http.Request, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	return http.DefaultClient.Do(req)
}

// reset closes the client's connection with a TCP RST and no answer.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("dtmserver: the proxy's ResponseWriter cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
