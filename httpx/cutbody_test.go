package httpx

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestBodyCutShortIsNotStored: with NoFingerprint the handler reads the body itself, under the
// claim. A client that goes away mid-body makes that read fail, and the handler's answer to the cut
// body (a 400, which DefaultStorePolicy stores) must not be stored: the client's retry, with the
// whole body, runs (found by a defect hunt: the retry got the stored 400 for ever).
func TestBodyCutShortIsNotStored(t *testing.T) {
	bd := setup(t, realBackend, &Options{NoFingerprint: true}, nil)
	answered := make(chan int, 1)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		var v map[string]any
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
			select {
			case answered <- http.StatusBadRequest:
			default:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	srv, client := newServer(t, h)

	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k-cut\r\n"+
		"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"amount\":")
	_ = c.(*net.TCPConn).CloseWrite() // the client goes away mid-body
	_, _ = io.ReadAll(c)
	_ = c.Close()
	if s := <-answered; s != http.StatusBadRequest {
		t.Fatalf("handler answered %d", s)
	}

	s, hd, b := send(t, client, http.MethodPost, srv.URL+"/orders", "k-cut", `{"amount":1}`)
	if s != http.StatusCreated || hd.Get(ReplayedHeader) != "" {
		t.Fatalf("retry with the whole body: %d %q (replayed %q), want 201 from a new run", s, b, hd.Get(ReplayedHeader))
	}
}
