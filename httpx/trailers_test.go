package httpx

import (
	"io"
	"net/http"
	"testing"
)

// TestTrailersReplayed: trailers the handler sends — declared with the Trailer header and set after
// the body, or set with http.TrailerPrefix — are stored and replayed as trailers when their names
// are in ReplayHeaders, like headers; others are not (found by a defect hunt: every trailer was
// dropped from replays).
func TestTrailersReplayed(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{ReplayHeaders: append(DefaultReplayHeaders(), "X-Checksum", "X-Late")}, nil)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Trailer", "X-Checksum, X-Unlisted")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "payload")
		w.Header().Set("X-Checksum", "abc123")
		w.Header().Set("X-Unlisted", "not kept")
		w.Header().Set(http.TrailerPrefix+"x-late", "late")
	}))
	srv, client := newServer(t, h)
	get := func() (int, http.Header, http.Header, string) {
		r, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", nil)
		r.Header.Set(DefaultHeader, "k1")
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, resp.Trailer, string(b)
	}
	c1, _, t1, b1 := get()
	c2, h2, t2, b2 := get()
	if c1 != http.StatusCreated || c2 != http.StatusCreated || h2.Get(ReplayedHeader) != "true" || b1 != b2 || bd.calls.Load() != 1 {
		t.Fatalf("first %d, replay %d (replayed %q), bodies %q/%q, %d runs", c1, c2, h2.Get(ReplayedHeader), b1, b2, bd.calls.Load())
	}
	if t1.Get("X-Checksum") != "abc123" || t1.Get("X-Late") != "late" {
		t.Fatalf("first response's trailers %v", t1)
	}
	if t2.Get("X-Checksum") != "abc123" || t2.Get("X-Late") != "late" || t2.Get("X-Unlisted") != "" {
		t.Fatalf("replay's trailers %v, want X-Checksum and X-Late (listed) and not X-Unlisted", t2)
	}
}

// TestTrailerFormat: a response with trailers is stored in format 3, which a reader of format 2
// refuses rather than replay it without them; one without keeps format 2.
func TestTrailerFormat(t *testing.T) {
	s := storedResponse{status: 200, header: []headerField{{name: "Etag", value: `"1"`}, {name: "X-Sum", value: "9", trailer: true}}, body: []byte("b")}
	b := s.encode()
	if b[0] != responseFormatV3 {
		t.Fatalf("format %d, want 3", b[0])
	}
	got, err := decodeResponse(b)
	if err != nil || len(got.header) != 2 || !got.header[1].trailer || got.header[0].trailer || got.header[1].value != "9" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	b[0] = responseFormat
	if _, err := decodeResponse(b); err == nil {
		t.Fatal("format 2 with a trailer field decoded")
	}
	s.header = s.header[:1]
	if b := s.encode(); b[0] != responseFormat {
		t.Fatalf("format %d without trailers, want 2", b[0])
	}
}
