//go:build unix

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Answer classes of the DTM scenario.
const (
	OrderCreated     = "created"      // 201 with an order
	OrderInFlight    = "in_flight"    // 409 from the middleware or 503 in-flight: retry later
	OrderUnavailable = "unavailable"  // another 503: retry with the same key
	OrderConn        = "conn_error"   // no answer: the service was down or killed mid-request
	OrderServerError = "server_error" // a 5xx other than 503: never expected
	OrderUnexpected  = "unexpected"   // any other answer: never expected
)

// Orders' world: shared SKUs, plentiful or scarce, and one account per key.
var (
	plentySKUs = []string{"plenty-0", "plenty-1", "plenty-2"}
	scarceSKUs = []string{"scarce-0", "scarce-1"}
)

const (
	plentyStock = int64(1_000_000_000)
	scarceStock = int64(15)
)

// orderReq is the body of an order request.
type orderReq struct {
	UserID string `json:"user_id"`
	SKU    string `json:"sku"`
	Qty    int64  `json:"qty"`
	Amount int64  `json:"amount"`
}

// orderKey is one key: its request and its account's opening balance.
type orderKey struct {
	Key     string
	TCC     bool
	Req     orderReq
	Balance int64
	ready   bool // the account exists
}

// orderAnswer is one answer as the client saw it.
type orderAnswer struct {
	Key     string `json:"key"`
	Phase   string `json:"phase"` // storm, settle
	Class   string `json:"class"`
	Status  int    `json:"status,omitempty"`
	OrderID string `json:"order_id,omitempty"`
	State   string `json:"order_status,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// orderLoad is the scenario's clients. It is safe for concurrent use.
type orderLoad struct {
	cfg    DTMConfig
	url    string
	rng    *lockedRand
	client *http.Client
	cut    atomic.Int64 // requests that got no answer (the service was killed or down)

	mu      sync.Mutex
	keys    []*orderKey
	answers []orderAnswer
}

func newOrderLoad(c DTMConfig, url string, rng *lockedRand) *orderLoad {
	return &orderLoad{cfg: c, url: url, rng: rng,
		client: &http.Client{Timeout: c.Wait + 20*time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// newKey makes the next key: saga and TCC alternately, one account per key (every 7th cannot pay),
// a scarce SKU one time in four.
func (l *orderLoad) newKey() *orderKey {
	l.mu.Lock()
	i := len(l.keys)
	k := &orderKey{Key: fmt.Sprintf("k%05d-%d", i, l.cfg.Seed%100000), TCC: i%2 == 1}
	l.keys = append(l.keys, k)
	l.mu.Unlock()
	k.Req = orderReq{UserID: fmt.Sprintf("u%05d", i), Qty: 1 + int64(l.rng.IntN(3)), Amount: 100 + int64(l.rng.IntN(401))}
	if l.rng.IntN(4) == 0 {
		k.Req.SKU = scarceSKUs[l.rng.IntN(len(scarceSKUs))]
	} else {
		k.Req.SKU = plentySKUs[l.rng.IntN(len(plentySKUs))]
	}
	k.Balance = 2 * k.Req.Amount
	if i%7 == 3 {
		k.Balance = k.Req.Amount - 1
	}
	return k
}

// storm runs the clients until ctx ends.
func (l *orderLoad) storm(ctx context.Context) {
	var wg sync.WaitGroup
	for range l.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if l.rng.IntN(4) == 0 && l.keyCount() > 0 {
					l.mu.Lock()
					k := l.keys[l.rng.IntN(len(l.keys))]
					ready := k.ready
					l.mu.Unlock()
					if ready {
						l.send(ctx, k, "storm") // a client re-sending an earlier request
						continue
					}
				}
				k := l.newKey()
				if !l.setup(ctx, k) {
					return
				}
				var burst sync.WaitGroup
				for range l.cfg.Dup {
					burst.Add(1)
					go func() { defer burst.Done(); l.send(ctx, k, "storm") }()
				}
				burst.Wait()
			}
		}()
	}
	wg.Wait()
}

// setup creates k's account, once (a PUT sets the balance: never again after an order was sent),
// retrying while the service is down. It reports false when ctx ended first.
func (l *orderLoad) setup(ctx context.Context, k *orderKey) bool {
	l.mu.Lock()
	ready := k.ready
	l.mu.Unlock()
	if ready {
		return true
	}
	for ctx.Err() == nil {
		if l.put(ctx, "/api/accounts/"+k.Req.UserID, map[string]int64{"balance": k.Balance}) == nil {
			l.mu.Lock()
			k.ready = true
			l.mu.Unlock()
			return true
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return false
}

// setupStock sets every SKU's stock, retrying while the service is down.
func (l *orderLoad) setupStock(ctx context.Context) error {
	for _, sku := range append(append([]string(nil), plentySKUs...), scarceSKUs...) {
		stock := plentyStock
		if sku[0] == 's' {
			stock = scarceStock
		}
		for {
			err := l.put(ctx, "/api/inventory/"+sku, map[string]int64{"stock": stock})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return err
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	return nil
}

func (l *orderLoad) put(ctx context.Context, path string, body any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, l.url+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: %d", path, resp.StatusCode)
	}
	return nil
}

// send posts k's order once and logs the answer.
func (l *orderLoad) send(ctx context.Context, k *orderKey, phase string) orderAnswer {
	a := orderAnswer{Key: k.Key, Phase: phase}
	path := "/api/orders"
	if k.TCC {
		path += "/tcc"
	}
	b, _ := json.Marshal(k.Req)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url+path, bytes.NewReader(b))
	if err != nil {
		a.Class, a.Detail = OrderUnexpected, err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"`+k.Key+`"`)
	resp, err := l.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return a // the phase ended: not an answer
		}
		l.cut.Add(1)
		a.Class, a.Detail = OrderConn, err.Error()
		l.log(a)
		return a
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
	a.Status = resp.StatusCode
	var p struct {
		OrderID string `json:"order_id"`
		Status  string `json:"status"`
		Type    string `json:"type"`
		Detail  string `json:"detail"`
	}
	_ = json.Unmarshal(body, &p)
	switch {
	case resp.StatusCode == http.StatusCreated && p.OrderID != "":
		a.Class, a.OrderID, a.State = OrderCreated, p.OrderID, p.Status
	case resp.StatusCode == http.StatusConflict && bytes.Contains(body, []byte("in-flight")),
		resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte("in-flight")):
		a.Class = OrderInFlight
	case resp.StatusCode == http.StatusServiceUnavailable:
		a.Class, a.Detail = OrderUnavailable, p.Detail
	case resp.StatusCode >= 500:
		a.Class, a.Detail = OrderServerError, string(body)
	default:
		a.Class, a.Detail = OrderUnexpected, string(body)
	}
	l.log(a)
	return a
}

func (l *orderLoad) log(a orderAnswer) {
	l.mu.Lock()
	l.answers = append(l.answers, a)
	l.mu.Unlock()
}

// settle retries every key until it is answered with an order (or an answer that will never change),
// at most for d. It returns how many keys were left without an order.
func (l *orderLoad) settle(ctx context.Context, d time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	l.mu.Lock()
	keys := append([]*orderKey(nil), l.keys...)
	l.mu.Unlock()
	work := make(chan *orderKey)
	var unsettled atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				if !l.setup(ctx, k) {
					unsettled.Add(1)
					continue
				}
				for {
					a := l.send(ctx, k, "settle")
					if a.Class == OrderCreated || a.Class == OrderUnexpected {
						break
					}
					if ctx.Err() != nil {
						unsettled.Add(1)
						break
					}
					sleepCtx(ctx, 300*time.Millisecond)
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return int(unsettled.Load())
}

func (l *orderLoad) keyCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

func (l *orderLoad) requestCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.answers)
}

func (l *orderLoad) answerClasses() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]int{}
	for _, a := range l.answers {
		m[a.Class]++
	}
	return m
}

// snapshot returns the keys and answers so far.
func (l *orderLoad) snapshot() ([]*orderKey, []orderAnswer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*orderKey(nil), l.keys...), append([]orderAnswer(nil), l.answers...)
}
