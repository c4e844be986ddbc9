package httpx

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// statusClientClosedRequest is 499, the status nginx logs for a request its client closed and that
// grpc-gateway's runtime answers for a handler returning codes.Canceled.
const statusClientClosedRequest = 499

// TestClientClosedRequestNotStored: a handler whose client went away answers 499 Client Closed
// Request (nginx's status, grpc-gateway's for a cancelled call): the answer no client ever reads, not
// the business's. DefaultStorePolicy stored it, as a 4xx, and the client's retry got 499 replayed
// for as long as the record lived, the operation never done (found by a defect hunt). Real TCP.
func TestClientClosedRequestNotStored(t *testing.T) {
	if DefaultStorePolicy(statusClientClosedRequest) {
		t.Errorf("DefaultStorePolicy(499) = true, want false")
	}
	bd := setup(t, memoryBackend, nil, nil)
	var calls atomic.Int64
	entered := make(chan struct{})
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(entered)
			<-r.Context().Done() // the client gives up
			w.WriteHeader(statusClientClosedRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order":1}`)
	}))
	srv, client := newServer(t, h)

	giveUpOnceEntered(t, client, srv.URL+"/orders", "k-gone", entered)
	var status int
	var hdr http.Header
	var body string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		status, hdr, body = send(t, client, http.MethodPost, srv.URL+"/orders", "k-gone", `{}`)
		if status != http.StatusConflict || time.Now().After(deadline) { // 409 while the first still runs
			break
		}
	}
	if status != http.StatusCreated || hdr.Get(ReplayedHeader) != "" || calls.Load() != 2 {
		t.Fatalf("retry: %d %q (replayed %q, handler ran %d times), want 201 from a second run",
			status, body, hdr.Get(ReplayedHeader), calls.Load())
	}
}

// giveUpOnceEntered sends a keyed POST to url and gives up once its handler runs (entered closed),
// failing t unless the request then ends with an error. A deadline of its own could end the request
// before it got there (a loaded machine, a slow claim), and the retry would then be the handler's
// first call, waiting for a client that does not give up.
func giveUpOnceEntered(t *testing.T, client *http.Client, url, key string, entered <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{}`))
	r.Header.Set(DefaultHeader, key)
	type answer struct {
		status int
		err    error
	}
	first := make(chan answer, 1)
	go func() {
		resp, err := client.Do(r)
		if err != nil {
			first <- answer{err: err}
			return
		}
		resp.Body.Close()
		first <- answer{status: resp.StatusCode}
	}()
	select {
	case <-entered:
	case a := <-first:
		t.Fatalf("first request ended (%d, %v) before its handler ran", a.status, a.err)
	}
	cancel()
	if a := <-first; a.err == nil {
		t.Fatalf("first request answered %d; want the client to give up", a.status)
	}
}
