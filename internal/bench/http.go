package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx"
)

// Server is the loopback HTTP server of the httpx variants: the same handler (read the JSON body, run
// the business transaction, answer 201 with a small JSON body) bare, behind the middleware, and behind
// the middleware on a Guard whose finished keys stay cached (for replays).
type Server struct {
	URL    string // http://127.0.0.1:port
	Client *http.Client
	srv    *http.Server
	ln     net.Listener
}

const (
	pathBare    = "/bare"
	pathGuarded = "/guarded"
	pathReplay  = "/replay"
	httpBody    = `{"item":"book","qty":1,"address":{"city":"Lyon","zip":"69001"}}`
)

// NewServer starts the server on 127.0.0.1 with guard on /guarded and replay on /replay; biz runs the
// business transaction for a key. Close stops it.
func NewServer(guard, replay *idemkit.Guard, biz func(ctx context.Context, key string) error, conns int) (*Server, error) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := biz(r.Context(), r.Header.Get(httpx.DefaultHeader)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(result)
	})
	mux := http.NewServeMux()
	mux.Handle("POST "+pathBare, handler)
	mux.Handle("POST "+pathGuarded, httpx.Middleware(guard, nil)(handler))
	mux.Handle("POST "+pathReplay, httpx.Middleware(replay, nil)(handler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		URL: "http://" + ln.Addr().String(),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:  ln,
		Client: &http.Client{Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute, DisableCompression: true,
		}, Timeout: 30 * time.Second},
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server and closes the client's idle connections.
func (s *Server) Close() error {
	s.Client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// Post sends the benchmark's request to path with key and checks the answer: 201, and the
// Idempotent-Replayed header when replay is set.
func (s *Server) Post(ctx context.Context, path, key string, replay bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, strings.NewReader(httpBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(httpx.DefaultHeader, key)
	resp, err := s.Client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusCreated:
		return fmt.Errorf("POST %s: status %d", path, resp.StatusCode)
	case replay != (resp.Header.Get("Idempotent-Replayed") == "true"):
		return fmt.Errorf("POST %s: Idempotent-Replayed %q, want replay=%v", path, resp.Header.Get("Idempotent-Replayed"), replay)
	}
	return nil
}

func httpVariants(e *Env, guard, replay *idemkit.Guard, biz func(context.Context, string) error) ([]*Variant, error) {
	var srv *Server
	start := func() error {
		if srv != nil {
			return nil
		}
		s, err := NewServer(guard, replay, biz, e.cfg.MaxConns+64)
		if err != nil {
			return err
		}
		srv = s
		e.server = s
		e.closers = append(e.closers, s.Close)
		return nil
	}
	keys := fixedKeys(e.Run + "-http")
	return []*Variant{
		{Name: VHTTPBare, Group: "http", What: "loopback HTTP POST to the bare handler (business transaction)",
			Setup: func(context.Context) error { return start() },
			Op:    func(ctx context.Context, w *Worker) error { return srv.Post(ctx, pathBare, w.Key(), false) }},
		{Name: VHTTPGuarded, Group: "http", What: "the same handler behind httpx.Middleware (Execute mode), a new key per request",
			Setup: func(context.Context) error { return start() },
			Op:    func(ctx context.Context, w *Worker) error { return srv.Post(ctx, pathGuarded, w.Key(), false) }},
		{Name: VHTTPReplay, Group: "http", What: "httpx.Middleware replaying a finished key from the Redis cache",
			Setup: func(ctx context.Context) error {
				if err := start(); err != nil {
					return err
				}
				return parallel(ctx, 16, len(keys), func(ctx context.Context, i int) error {
					return srv.Post(ctx, pathReplay, keys[i], false)
				})
			},
			Op: func(ctx context.Context, w *Worker) error {
				return srv.Post(ctx, pathReplay, keys[w.pick(len(keys))], true)
			}},
	}, nil
}
