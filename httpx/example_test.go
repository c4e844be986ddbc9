package httpx_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/httpx/redistoken"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
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
	// In production: record.New(db, nil) and lock.New(rdb, nil), as in ExampleMiddleware_production.
	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		panic(err)
	}
	transfers := 0
	createTransfer := func(w http.ResponseWriter, r *http.Request) {
		transfers++
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"transfer":%d,"account":%q,"request":%s}`, transfers, chi.URLParam(r, "id"), body)
	}

	r := chi.NewRouter()
	r.Use(authenticate) // puts the caller in the context: userID(ctx)
	r.Use(httpx.Middleware(guard, &httpx.Options{
		Principal: func(r *http.Request) (string, error) { return userID(r.Context()), nil }, // keys are per user
		Noise:     []string{"sentAt"},                                                        // not part of the fingerprint
	}))
	r.Post("/accounts/{id}/transfers", createTransfer) // scope "POST /accounts/{id}/transfers"

	send(r, "/accounts/7/transfers", "t-1", `{"amount":10,"sentAt":"09:00"}`, "X-User", "alice")
	send(r, "/accounts/7/transfers", "t-1", `{"amount":10.0,"sentAt":"09:01"}`, "X-User", "alice")
	send(r, "/accounts/7/transfers", "t-1", `{"amount":10,"sentAt":"09:02"}`, "X-User", "bob")
	rec, err := guard.Get(context.Background(), "POST /accounts/{id}/transfers", httpx.PrincipalKey("alice", "t-1"))
	if err != nil {
		panic(err)
	}
	fmt.Println("alice's record:", rec.Status)
	// Output:
	// 201 replayed=false {"transfer":1,"account":"7","request":{"amount":10,"sentAt":"09:00"}}
	// 201 replayed=true  {"transfer":1,"account":"7","request":{"amount":10,"sentAt":"09:00"}}
	// 201 replayed=false {"transfer":2,"account":"7","request":{"amount":10,"sentAt":"09:02"}}
	// alice's record: SUCCEEDED
}

// Production wiring on chi: records in MySQL (package record), the lock and result cache in Redis
// (package lock), chi's request IDs in logs and problem bodies.
func ExampleMiddleware_production() {
	var db *gorm.DB       // opened by the application: gorm.Open(mysql.Open(dsn), &gorm.Config{})
	var rdb *redis.Client // opened with ContextTimeoutEnabled: true

	store, err := record.New(db, nil) // table idemkit_records
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, nil)})
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Use(middleware.RequestID, middleware.Recoverer, authenticate)
	r.Use(httpx.Middleware(guard, &httpx.Options{
		Principal: func(r *http.Request) (string, error) { return userID(r.Context()), nil }, // keys are per user
		Noise:     []string{"clientRequestTime", "nonce"},                                    // not part of the fingerprint
		RequestID: func(r *http.Request) string { return middleware.GetReqID(r.Context()) },
	}))
	r.Post("/orders", createOrder)       // scope "POST /orders"
	r.Post("/orders/{id}/pay", payOrder) // scope "POST /orders/{id}/pay"
	log.Fatal(http.ListenAndServe(":8080", r))
}

// On a net/http ServeMux: wrapped around the whole mux, the scope is the method and the path (the
// mux has not matched a pattern yet); wrapped around one route, it is the route's pattern.
func ExampleMiddleware_serveMux() {
	var guard *idemkit.Guard // as in ExampleMiddleware_production

	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", createOrder)
	log.Fatal(http.ListenAndServe(":8080", httpx.Middleware(guard, nil)(mux))) // scope: method + path
	// or per route, scope from the pattern: mux.Handle("POST /orders/{id}/pay", mw(http.HandlerFunc(payOrder)))
}

// One-time tokens on chi, stored in Redis: GET /tokens issues one, POST /orders consumes it.
func ExampleTokens_chi() {
	var rdb *redis.Client    // opened with ContextTimeoutEnabled: true
	var guard *idemkit.Guard // as in ExampleMiddleware_production

	tokens, err := httpx.NewTokens(redistoken.New(rdb, nil), &httpx.TokenOptions{TTL: 30 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Method("GET", "/tokens", tokens.Handler()) // {"token":"itk_…","header":"X-Idempotent-Token","expiresAt":…}
	r.With(httpx.Middleware(guard, &httpx.Options{Key: tokens.Key()})).Post("/orders", createOrder)
	log.Fatal(http.ListenAndServe(":8080", r))
}

// userKey is the context key under which authenticate stores the caller.
type userKey struct{}

// authenticate stands for the application's authentication middleware: it puts the caller's user
// ID in the request context. Here it trusts a header; production code verifies a session or token.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, r.Header.Get("X-User"))))
	})
}

// userID is the caller authenticate found, "" for none.
func userID(ctx context.Context) string {
	id, _ := ctx.Value(userKey{}).(string)
	return id
}

// createOrder and payOrder stand for the application's handlers.
func createOrder(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }
func payOrder(w http.ResponseWriter, r *http.Request)    { w.WriteHeader(http.StatusOK) }

// One-time tokens: the client asks for a token, sends it with the request, and cannot use it twice.
func ExampleTokens() {
	tokens, err := httpx.NewTokens(httpx.NewMemoryTokenStore(nil), nil) // redistoken.New(rdb, nil) in production
	if err != nil {
		panic(err)
	}
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /tokens", tokens.Handler())
	mux.Handle("POST /orders", httpx.Middleware(guard, &httpx.Options{Key: tokens.Key()})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"order":1}`) })))

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/tokens", nil))
	var tok httpx.Token
	if err := json.Unmarshal(w.Body.Bytes(), &tok); err != nil {
		panic(err)
	}
	fmt.Println("token header:", tok.Header)

	send(mux, "/orders", "", `{}`, tok.Header, tok.Token)
	send(mux, "/orders", "", `{}`, tok.Header, tok.Token)
	// Output:
	// token header: X-Idempotent-Token
	// 200 replayed=false {"order":1}
	// 409 replayed=false problem token-invalid
}

func ExampleCanonicalJSON() {
	c, err := httpx.CanonicalJSON([]byte(`{"b": 1.50, "a": [1e2, {"nonce": "x", "y": true}], "sentAt": 1}`), "nonce", "sentAt")
	fmt.Println(string(c), err)
	_, err = httpx.CanonicalJSON([]byte(`{"a": 1, "\u0061": 2}`)) // a repeated member name is refused
	fmt.Println(errors.Is(err, httpx.ErrDuplicateMember))
	// Output:
	// {"a":[100,{"y":true}],"b":1.5} <nil>
	// true
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
