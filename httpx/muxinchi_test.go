package httpx

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestServeMuxMountedInChi: an http.ServeMux mounted in a chi router, the middleware on its routes
// (inside the mux, which routed the request last). The scope is the mux's pattern, as for a mux on its
// own, not chi's "/api/*" shared by every route of the mux, and URLParam reads the mux's path values
// (found by a defect hunt: with NoFingerprint a key used on /api/orders replayed the order's response
// to /api/refunds, and URLParam found no key).
func TestServeMuxMountedInChi(t *testing.T) {
	bd := setup(t, realBackend, &Options{NoFingerprint: true}, nil)
	byParam := Middleware(bd.guard, &Options{Key: URLParam("id")})
	answer := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			bd.calls.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, name+" "+DefaultScope(r))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /api/orders", bd.mw(answer("order")))
	mux.Handle("POST /api/refunds", bd.mw(answer("refund")))
	mux.Handle("POST /api/orders/{id}/pay", byParam(answer("pay")))
	r := chi.NewRouter()
	r.Mount("/api", mux)
	srv, client := newServer(t, r)

	for _, c := range []struct{ path, key, want string }{
		{"/api/orders", "k1", "order POST /api/orders"},
		{"/api/refunds", "k1", "refund POST /api/refunds"},
		{"/api/orders/7/pay", "", "pay POST /api/orders/{id}/pay"},
	} {
		s, h, b := send(t, client, http.MethodPost, srv.URL+c.path, c.key, "{}")
		if s != http.StatusOK || b != c.want || h.Get(ReplayedHeader) != "" {
			t.Fatalf("%s: %d %q (replayed %q), want 200 %q", c.path, s, b, h.Get(ReplayedHeader), c.want)
		}
	}
	s, h, b := send(t, client, http.MethodPost, srv.URL+"/api/orders/7/pay", "", "{}")
	if s != http.StatusOK || h.Get(ReplayedHeader) != "true" || bd.calls.Load() != 3 {
		t.Fatalf("retry of /api/orders/7/pay: %d %q (replayed %q), %d runs; want the replay", s, b, h.Get(ReplayedHeader), bd.calls.Load())
	}
}

// TestChiInServeMuxKeepsChiScope: a chi router mounted in a ServeMux (mux.Handle("/", r), or
// http.Handle on the default mux) with the middleware in r.Use runs before chi routes, under the
// outer mux's pattern ("/", "/api/"): that pattern names no route below chi's catch-all ("/*"),
// and the scope stays chi's, as before the ServeMux-in-chi change (it became "POST /", a silent
// change of the stored scope).
func TestChiInServeMuxKeepsChiScope(t *testing.T) {
	for _, c := range []struct{ mux, chi, path string }{
		{"/", "/*", "/x/y"},
		{"/api/", "/api/*", "/api/x"},
		{"/api/{rest...}", "/api/*", "/api/x"},
	} {
		var got string
		r := chi.NewRouter()
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = DefaultScope(r)
				next.ServeHTTP(w, r)
			})
		})
		r.Handle(c.chi, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		mux := http.NewServeMux()
		mux.Handle(c.mux, r)
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, c.path, nil))
		if want := "POST " + c.chi; got != want {
			t.Errorf("chi %q mounted at mux %q: scope %q, want %q", c.chi, c.mux, got, want)
		}
	}
}
