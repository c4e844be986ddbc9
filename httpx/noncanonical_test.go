package httpx

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"testing"
)

// TestNonCanonicalHeaderKeysReplayed: a handler may set a field by assigning to the header map under
// a spelling that is not canonical (w.Header()["ETag"], as net/http documents for keeping a name's
// case), and net/http sends it all the same. Such an allow-listed field must be stored and replayed
// like one set with Set, and a Content-Encoding set so must keep its encoded body from being replayed
// as plain bytes (found by a defect hunt: the ETag vanished from replays, and a gzip body was replayed
// without its Content-Encoding).
func TestNonCanonicalHeaderKeysReplayed(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, `{"ok":true}`)
	_ = zw.Close()
	bd := setup(t, realBackend, nil, nil)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header()["ETag"] = []string{`"v1"`}
		if r.URL.Path == "/gzip" {
			w.Header()["content-encoding"] = []string{"gzip"}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(gz.Bytes())
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	srv, client := newServer(t, h)
	for i := range 2 {
		s, hd, b := send(t, client, http.MethodPost, srv.URL+"/etag", "k-etag", "{}")
		if s != http.StatusCreated || hd.Get("Etag") != `"v1"` || b != `{"ok":true}` {
			t.Fatalf("response %d: %d, ETag %q, body %q; want 201 with ETag \"v1\"", i+1, s, hd.Get("Etag"), b)
		}
	}
	for i := range 2 {
		s, hd, b := send(t, client, http.MethodPost, srv.URL+"/gzip", "k-gzip", "{}", "Accept-Encoding", "gzip")
		encoded := hd.Get("Content-Encoding") == "gzip" && b == gz.String()
		if !encoded && s != http.StatusConflict {
			t.Fatalf("response %d: %d, Content-Encoding %q, body %q: the gzip body without its encoding", i+1, s, hd.Get("Content-Encoding"), b)
		}
	}
	if n := bd.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}
