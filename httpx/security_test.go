package httpx

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// The tests of docs/SECURITY.md that live in this package.

// TestSecurityReplayNeverLeaksCredentials: a handler's credential and hop-by-hop headers reach the
// first client but are never stored, so no duplicate — possibly sent by someone else who learned the
// key — can receive them; listing them in ReplayHeaders is refused at construction.
func TestSecurityReplayNeverLeaksCredentials(t *testing.T) {
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	secret := []string{"Set-Cookie", "Authorization", "Proxy-Authenticate", "Www-Authenticate", "Proxy-Authorization"}
	h := Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range secret {
			w.Header().Set(name, "secret-"+name)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		req.Header.Set(DefaultHeader, `"k-1"`)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	first, replay := send(), send()
	if first.Header().Get("Set-Cookie") == "" || replay.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("first %v, replay %v", first.Header(), replay.Header())
	}
	for _, name := range secret {
		if v := replay.Header().Get(name); v != "" {
			t.Errorf("replay carries %s: %q", name, v)
		}
	}
	for _, name := range secret {
		if _, err := New(g, &Options{ReplayHeaders: []string{name}}); err == nil {
			t.Errorf("ReplayHeaders with %s accepted", name)
		}
	}
}

// TestSecurityKeysNeverLogged: with every logger at debug level, neither the middleware nor the
// Guard writes the client's key; they log a short hash.
func TestSecurityKeysNeverLogged(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: memory.NewLocker(nil), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	const key = "super-secret-client-key-4711"
	h := Middleware(g, &Options{Logger: logger})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError) // a logged failure path too
	}))
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"a":1}`))
		req.Header.Set(DefaultHeader, key)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if buf.Len() == 0 {
		t.Fatal("nothing was logged; the test proves nothing")
	}
	if strings.Contains(buf.String(), key) {
		t.Fatalf("the log contains the raw key:\n%s", buf.String())
	}
}

// TestSecurityTokensStoredHashed: the token store never sees a token, only its hash, so a leaked
// store (or a timing probe of its lookups) yields nothing usable; a token bound to a principal is
// refused to anyone else.
func TestSecurityTokensStoredHashed(t *testing.T) {
	ctx := context.Background()
	store := NewMemoryTokenStore(nil)
	tokens, err := NewTokens(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokens.Issue(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Take(ctx, tok.Token); err == nil {
		t.Fatal("the raw token is a key of the store")
	}
	if err := tokens.Consume(ctx, tok.Token, "mallory"); err == nil {
		t.Fatal("another principal consumed alice's token")
	}
}
