package main

import (
	"net/http"
	"sync"
)

// orderGate admits order requests until Close begins, and lets Close wait for those it admitted. An
// order in flight needs the services' listener to finish: DTM calls its branches there, and the TCC
// initiator its tries. So Close drains the orders first, the branches still served, and only then
// stops the HTTP server. It is safe for concurrent use.
type orderGate struct {
	mu       sync.Mutex
	active   int
	draining bool
	idle     chan struct{} // closed once draining and no order is in flight
}

// enter admits an order request, or reports false once the gate drains.
func (g *orderGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.draining {
		return false
	}
	g.active++
	return true
}

// leave ends an admitted order request.
func (g *orderGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active--
	if g.draining && g.active == 0 {
		close(g.idle)
	}
}

// drain refuses new order requests from now on and returns a channel closed once those in flight
// have ended.
func (g *orderGate) drain() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.draining {
		g.draining = true
		g.idle = make(chan struct{})
		if g.active == 0 {
			close(g.idle)
		}
	}
	return g.idle
}

// admit is the order routes' outermost middleware: once the services are closing it answers 503
// (with Retry-After, and the connection closed) before the idempotency middleware claims the key, so
// nothing is stored and the retry — on another instance, or this one restarted — places the order.
func (g *orderGate) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.enter() {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the service is shutting down; retry with the same key")
			return
		}
		defer g.leave()
		next.ServeHTTP(w, r)
	})
}
