package httpx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/memory"
)

// send posts body with an Idempotency-Key (none when key is "") and prints the status, whether
// the response was replayed, and the body (the problem type for errors).
func send(h http.Handler, path, key, body string, hdr ...string) {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	out := strings.TrimSpace(w.Body.String())
	if w.Header().Get("Content-Type") == "application/problem+json" {
		var p struct{ Type string }
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		out = "problem " + strings.TrimPrefix(p.Type, httpx.DefaultProblemBase)
	}
	fmt.Printf("%d replayed=%-5v %s\n", w.Code, w.Header().Get(httpx.ReplayedHeader) == "true", out)
}

// The middleware on a net/http ServeMux: a retry with the same key gets the stored response, a
// request without a key is refused.
func ExampleMiddleware() {
	// In production: record.New(db, nil) and lock.New(redisClient, nil).
	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		panic(err)
	}
	orders := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", orders))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	})
	h := httpx.Middleware(guard, nil)(mux)

	send(h, "/orders", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"item":"book"}`)
	send(h, "/orders", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{ "item": "book" }`) // the retry
	send(h, "/orders", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"item":"pen"}`)     // key reused
	send(h, "/orders", "", `{"item":"book"}`)
	fmt.Println("orders created:", orders)
	// Output:
	// 201 replayed=false {"order":1}
	// 201 replayed=true  {"order":1}
	// 422 replayed=false problem payload-mismatch
	// 400 replayed=false problem missing-key
	// orders created: 1
}

// The middleware on a chi router, with keys scoped to the calling user and a noise field left
// out of the payload check. The scope is the route pattern "POST /accounts/{id}/transfers"
// although the middleware runs before chi routes the request.
func ExampleMiddleware_chi() {
	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		panic(err)
	}
	transfers := 0
	r := chi.NewRouter()
	r.Use(httpx.Middleware(guard, &httpx.Options{
		Principal: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		Noise:     []string{"sentAt"},
	}))
	r.Post("/accounts/{id}/transfers", func(w http.ResponseWriter, r *http.Request) {
		transfers++
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"transfer":%d,"account":%q,"request":%s}`, transfers, chi.URLParam(r, "id"), body)
	})

	send(r, "/accounts/7/transfers", "t-1", `{"amount":10,"sentAt":"09:00"}`, "X-User", "alice")
	send(r, "/accounts/7/transfers", "t-1", `{"amount":10.0,"sentAt":"09:01"}`, "X-User", "alice")
	send(r, "/accounts/7/transfers", "t-1", `{"amount":10,"sentAt":"09:02"}`, "X-User", "bob")
	rec, _ := guard.Get(context.Background(), "POST /accounts/{id}/transfers", httpx.PrincipalKey("alice", "t-1"))
	fmt.Println("alice's record:", rec.Status)
	// Output:
	// 201 replayed=false {"transfer":1,"account":"7","request":{"amount":10,"sentAt":"09:00"}}
	// 201 replayed=true  {"transfer":1,"account":"7","request":{"amount":10,"sentAt":"09:00"}}
	// 201 replayed=false {"transfer":2,"account":"7","request":{"amount":10,"sentAt":"09:02"}}
	// alice's record: SUCCEEDED
}

// One-time tokens: the client asks for a token, sends it with the request, and cannot use it twice.
func ExampleTokens() {
	tokens, err := httpx.NewTokens(httpx.NewMemoryTokenStore(nil), nil) // redistoken.New(rdb, nil) in production
	if err != nil {
		panic(err)
	}
	guard, _ := idemkit.New(memory.NewStore(), nil)
	mux := http.NewServeMux()
	mux.Handle("POST /tokens", tokens.Handler())
	mux.Handle("POST /orders", httpx.Middleware(guard, &httpx.Options{Key: tokens.Key()})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"order":1}`) })))

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/tokens", nil))
	var tok httpx.Token
	_ = json.Unmarshal(w.Body.Bytes(), &tok)
	fmt.Println("token header:", tok.Header)

	send(mux, "/orders", "", `{}`, tok.Header, tok.Token)
	send(mux, "/orders", "", `{}`, tok.Header, tok.Token)
	// Output:
	// token header: X-Idempotent-Token
	// 200 replayed=false {"order":1}
	// 409 replayed=false problem token-invalid
}

func ExampleCanonicalJSON() {
	c, _ := httpx.CanonicalJSON([]byte(`{"b": 1.50, "a": [1e2, {"nonce": "x", "y": true}], "sentAt": 1}`), "nonce", "sentAt")
	fmt.Println(string(c))
	// Output: {"a":[100,{"y":true}],"b":1.5}
}

func ExampleParseKey() {
	for _, v := range []string{`"8e03978e-40d5"`, `8e03978e-40d5`, `"a", "b"`} {
		k, err := httpx.ParseKey(v)
		fmt.Printf("%q %v\n", k, err != nil)
	}
	// Output:
	// "8e03978e-40d5" false
	// "8e03978e-40d5" false
	// "" true
}
