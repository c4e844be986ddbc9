package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/httpx"
)

// syncBuffer is a bytes.Buffer safe for concurrent use, for a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRefusedTCCReplayIsNoUnreadableResult: the order handler runs again for a key whose TCC a try
// refused (its first answer lost: a 5xx, a crash, a claim the sweeper recovered), and the initiator
// replays the key's REJECTED record, which stores the refusal, not a result. The order was found by the
// record's gid, as it should, but with a warning that the initiator's result was unreadable — the
// alert of a record an older version settled without its result — on every such run (found by a defect
// hunt).
func TestRefusedTCCReplayIsNoUnreadableResult(t *testing.T) {
	t.Parallel()
	needDTM(t)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	var logs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := Start(ctx, cfg, RunOptions{Logger: logger, BuildProgress: tLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("stopping the services: %v", err)
		}
	})
	c := newClient(svc.URL)
	if err := c.put(ctx, "/api/accounts/rr", map[string]int64{"balance": 100}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/rr", map[string]int64{"stock": 10}); err != nil {
		t.Fatal(err)
	}
	body := orderRequest{UserID: "rr", SKU: "rr", Qty: 1, Amount: 700} // more than the balance
	key := "refused-replay-" + randomHex(4)
	r, err := c.do(ctx, http.MethodPost, orderPath(true), key, body)
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.created()
	if r.Status != http.StatusCreated || err != nil || first.Status != statusFailed {
		t.Fatalf("the refused TCC order: %s; want 201 FAILED", r)
	}

	// The handler runs again for the key, as after a first answer that was not recorded.
	b, _ := json.Marshal(body)
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, orderPath(true), bytes.NewReader(b))
	req.Header.Set(httpx.DefaultHeader, `"`+key+`"`)
	rec := httptest.NewRecorder()
	svc.orders.handleCreate(true).ServeHTTP(rec, req)
	var again created
	if err := json.Unmarshal(rec.Body.Bytes(), &again); rec.Code != http.StatusCreated || err != nil || again != first {
		t.Errorf("the handler run again for the key answered %d %s; want 201 with %+v", rec.Code, rec.Body, first)
	}
	if strings.Contains(logs.String(), "unreadable") {
		t.Errorf("the replay of a refused TCC logged an unreadable result:\n%s", logs.String())
	}
}
