package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [FailoverProxy].
const (
	// DefaultFailoverCooldown is how long a backend that refused a connection is skipped.
	DefaultFailoverCooldown = time.Second
	// maxProxiedBody bounds a request body the proxy buffers to replay it on another backend.
	maxProxiedBody = 4 << 20
)

// FailoverProxy is a tiny HTTP reverse proxy on a loopback port in front of several equivalent
// backends (DTM servers sharing one store): it sends each request to the next backend in turn
// (round robin) and, when that backend cannot be reached or drops the connection before answering,
// sends the same request to the next one. A backend that refused a connection is skipped for a
// cooldown. Answers, errors included, are passed through unchanged.
//
// Replaying a request whose connection broke mid-way is safe for DTM's API because every call is
// keyed by its gid and DTM treats a repeat as such (prepare and submit of a known gid are accepted, a
// repeated branch registration is refused — which fails that try, and the transaction rolls back). It
// is not a general-purpose proxy for non-idempotent APIs. It is safe for concurrent use.
type FailoverProxy struct {
	backends []*url.URL
	cooldown time.Duration
	srv      *http.Server
	ln       net.Listener
	client   *http.Client

	next      atomic.Uint64
	mu        sync.Mutex
	downUntil []time.Time

	forwarded, failedOver, exhausted atomic.Int64
}

// StartFailoverProxy listens on a free loopback port and proxies to backends (base URLs: scheme and
// host, e.g. "http://127.0.0.1:36789"; a request's path and query are appended). It returns an error
// when there is no backend or one does not parse. Close it when done.
func StartFailoverProxy(backends []string) (*FailoverProxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("cluster: FailoverProxy needs at least one backend")
	}
	p := &FailoverProxy{cooldown: DefaultFailoverCooldown, downUntil: make([]time.Time, len(backends))}
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("cluster: FailoverProxy backend %q is not a base URL", b)
		}
		p.backends = append(p.backends, u)
	}
	p.client = &http.Client{
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	p.ln = ln
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL returns the proxy's base URL, http://127.0.0.1:PORT.
func (p *FailoverProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Stats returns how many requests were answered by a backend, how many of them only after another
// backend failed, and how many found no backend at all (answered 502).
func (p *FailoverProxy) Stats() (forwarded, failedOver, exhausted int64) {
	return p.forwarded.Load(), p.failedOver.Load(), p.exhausted.Load()
}

// Close stops the proxy.
func (p *FailoverProxy) Close() error {
	p.client.CloseIdleConnections()
	return p.srv.Close()
}

// ServeHTTP forwards r as described on [FailoverProxy].
func (p *FailoverProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxProxiedBody+1))
	if err != nil || len(body) > maxProxiedBody {
		http.Error(w, "failover proxy: unreadable or oversized body", http.StatusBadGateway)
		return
	}
	n := len(p.backends)
	first := int(p.next.Add(1) % uint64(n))
	var lastErr error
	tried := 0
	for pass := 0; pass < 2 && tried < n; pass++ {
		for k := range n {
			i := (first + k) % n
			if pass == 0 && p.isDown(i) {
				continue // skipped in the first pass; tried in the second if nothing else answers
			}
			if pass == 1 && !p.isDown(i) {
				continue // already tried in the first pass
			}
			tried++
			resp, err := p.send(r, body, p.backends[i])
			if err != nil {
				lastErr = err
				p.markDown(i, err)
				continue
			}
			p.forwarded.Add(1)
			if tried > 1 {
				p.failedOver.Add(1)
			}
			defer resp.Body.Close()
			for k, vs := range resp.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
	}
	p.exhausted.Add(1)
	http.Error(w, fmt.Sprintf("failover proxy: no backend answered: %v", lastErr), http.StatusBadGateway)
}

func (p *FailoverProxy) send(r *http.Request, body []byte, base *url.URL) (*http.Response, error) {
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + r.URL.Path
	u.RawQuery = r.URL.RawQuery
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		if !hopByHop(k) {
			req.Header[k] = vs
		}
	}
	return p.client.Do(req)
}

func hopByHop(h string) bool {
	switch http.CanonicalHeaderKey(h) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

func (p *FailoverProxy) isDown(i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Before(p.downUntil[i])
}

// markDown skips backend i for the cooldown when it refused the connection (it is not listening);
// other transport errors (a dropped connection) only fail this attempt over.
func (p *FailoverProxy) markDown(i int, err error) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		p.mu.Lock()
		p.downUntil[i] = time.Now().Add(p.cooldown)
		p.mu.Unlock()
	}
}
