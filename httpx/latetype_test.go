package httpx

import (
	"io"
	"net/http"
	"testing"
)

// TestLateTypeAfterStatusNotSniffedOnReplay: a handler that sends its status, sets Content-Type too
// late (net/http took its copy of the header with the status and ignores it), flushes and writes its
// body sends the body with no type: net/http sniffs none from the empty flush. The middleware looked
// at the live header map at the flush, found the late type there, and stored nothing about the type,
// so the replay — written at once — got the type net/http sniffed from the replayed body (found by a
// defect hunt). Such a response stores its lack of type now, as one flushed untyped before any write.
func TestLateTypeAfterStatusNotSniffedOnReplay(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, nil, nil)
			handler := func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				w.Header().Set("Content-Type", "image/png") // too late: ignored by net/http
				http.NewResponseController(w).Flush()
				_, _ = io.WriteString(w, "<html><body>hi</body></html>")
			}
			srvBare, client := newServer(t, http.HandlerFunc(handler))
			_, want, _ := send(t, client, "POST", srvBare.URL+"/x", "", `{}`)
			srv, client := newServer(t, bd.mw(http.HandlerFunc(handler)))
			_, first, _ := send(t, client, "POST", srv.URL+"/x", "k", `{}`)
			_, replay, body := send(t, client, "POST", srv.URL+"/x", "k", `{}`)
			_, wantTyped := want["Content-Type"]
			_, firstTyped := first["Content-Type"]
			_, replayTyped := replay["Content-Type"]
			if wantTyped || firstTyped || replayTyped || replay.Get(ReplayedHeader) != "true" || body != "<html><body>hi</body></html>" {
				t.Fatalf("Content-Type: net/http alone %q, guarded %q, replay %q (replayed %q, %q); want none",
					want.Get("Content-Type"), first.Get("Content-Type"), replay.Get("Content-Type"), replay.Get(ReplayedHeader), body)
			}
		})
	}
}
