package cluster_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/internal/cluster"
)

// TestFailoverProxy: requests go round robin to the backends; a backend that refuses connections
// or drops one mid-request is skipped and the same request (body included) goes to the next; with
// no backend left the proxy answers 502.
func TestFailoverProxy(t *testing.T) {
	var hits [2]atomic.Int64
	echo := func(i int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Backend", string(rune('0'+i)))
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(r.Method + " " + r.URL.RequestURI() + " " + string(b)))
		})
	}
	a := httptest.NewServer(echo(0))
	defer a.Close()
	b := httptest.NewServer(echo(1))
	defer b.Close()
	p, err := cluster.StartFailoverProxy([]string{a.URL, b.URL})
	must(t, err)
	defer p.Close()
	post := func() (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(p.URL()+"/api/x?gid=g1", "application/json", strings.NewReader(`{"a":1}`))
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	for range 4 {
		resp, body := post()
		if resp.StatusCode != http.StatusCreated || body != `POST /api/x?gid=g1 {"a":1}` {
			t.Fatalf("answer %d %q", resp.StatusCode, body)
		}
	}
	if hits[0].Load() != 2 || hits[1].Load() != 2 {
		t.Fatalf("round robin: %d and %d requests, want 2 and 2", hits[0].Load(), hits[1].Load())
	}

	// Backend 0 drops every connection mid-request, then stops listening: all goes to backend 1.
	a.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	for range 3 {
		if resp, body := post(); resp.Header.Get("X-Backend") != "1" || !strings.HasSuffix(body, `{"a":1}`) {
			t.Fatalf("with backend 0 dropping connections: answer from %q: %q", resp.Header.Get("X-Backend"), body)
		}
	}
	a.Close()
	for range 3 {
		if resp, _ := post(); resp.Header.Get("X-Backend") != "1" {
			t.Fatalf("with backend 0 down: answer from %q", resp.Header.Get("X-Backend"))
		}
	}
	fwd, over, none := p.Stats()
	if fwd != 10 || over == 0 || none != 0 {
		t.Fatalf("stats: %d forwarded, %d failed over, %d unanswered", fwd, over, none)
	}

	b.Close()
	if resp, _ := post(); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("no backend: %d, want 502", resp.StatusCode)
	}
	if _, err := cluster.StartFailoverProxy(nil); err == nil {
		t.Fatal("a proxy without backends started")
	}
	if _, err := cluster.StartFailoverProxy([]string{"127.0.0.1:80"}); err == nil {
		t.Fatal("a proxy with a backend that is not a URL started")
	}
}
