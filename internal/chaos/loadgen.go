//go:build unix

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Answer classes: how a client understood the answer to one request.
const (
	ClassOK          = "ok"          // the operation ran now; Value is its result
	ClassReplay      = "replay"      // a duplicate: Value is the stored result
	ClassDuplicate   = "duplicate"   // a duplicate of a marked key (ErrDuplicate): nothing replayed
	ClassRejected    = "rejected"    // permanent business failure, fresh or replayed
	ClassInFlight    = "inflight"    // another attempt holds the key
	ClassFenced      = "fenced"      // the attempt ran but was taken over before it finished
	ClassUnavailable = "unavailable" // store or lock unavailable, or the outcome is unknown
	ClassFailed      = "failed"      // retryable business failure (injected, or refused by the fence)
	ClassTransport   = "transport"   // no answer: connection refused or broken, timeout
	ClassMismatch    = "mismatch"    // payload mismatch: never expected, the payload is fixed per key
	ClassError       = "error"       // anything else: never expected
)

// terminalClass reports whether an answer settles its key.
func terminalClass(c string) bool {
	return c == ClassOK || c == ClassReplay || c == ClassRejected || c == ClassDuplicate
}

// Phases of a run in which a request was sent.
const (
	PhaseLoad     = "load"
	PhaseTakeover = "takeover" // sent by a stall fault to take a frozen worker's key over
	PhaseSettle   = "settle"   // sent after the load: every key once more, until it gets a terminal answer
)

// Answer is one request and what its client got, as the load generator logs it for the checker.
type Answer struct {
	Seq      int64     `json:"seq"`
	Phase    string    `json:"phase"`
	Path     string    `json:"path"`
	Key      string    `json:"key"`
	Op       Op        `json:"op"`
	Worker   string    `json:"worker"`
	Class    string    `json:"class"`
	Replayed bool      `json:"replayed,omitempty"`
	Status   int       `json:"status,omitempty"` // HTTP path: the response status
	Value    string    `json:"value,omitempty"`  // ok, replay: the result (HTTP: the body); rejected: the message (HTTP: the body)
	Fence    int64     `json:"fence,omitempty"`
	Biz      string    `json:"biz,omitempty"`
	Error    string    `json:"error,omitempty"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
}

// opKey is one operation of the load: a key of one path with a fixed payload.
type opKey struct {
	path, key string
	op        Op
	target    int // requests to send before retiring it
	sent      int
	terminal  atomic.Bool
}

// loadGen hammers the workers with duplicate requests over a small window of active keys.
type loadGen struct {
	cfg    Config
	pool   *workerPool
	rng    *lockedRand
	client *http.Client
	seq    atomic.Int64

	mu     sync.Mutex
	keys   []*opKey
	byKey  map[string]*opKey
	window []*opKey
	nextID map[string]int

	ansMu   sync.Mutex
	answers []Answer
}

// paths are the request paths; new keys and worker kills take them in turn, in this order.
var paths = [...]string{PathExec, PathTx, PathMark, PathMarkExec, PathHTTP}

// keyPrefixes name each path's keys ("e-000001"): the keys of all paths share one namespace in the
// checker, which tells a key's path by its requests.
var keyPrefixes = map[string]string{PathExec: "e", PathTx: "t", PathMark: "m", PathMarkExec: "k", PathHTTP: "h"}

func newLoadGen(cfg Config, pool *workerPool, rng *lockedRand) *loadGen {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	lg := &loadGen{
		cfg: cfg, pool: pool, rng: rng,
		// Longer than a stall: a request to a frozen worker waits for it.
		client: &http.Client{Timeout: 30 * time.Second, Transport: tr},
		byKey:  make(map[string]*opKey), nextID: make(map[string]int),
	}
	lg.window = make([]*opKey, cfg.Clients)
	for i := range lg.window {
		lg.window[i] = lg.newKeyLocked(i)
	}
	return lg
}

// newKeyLocked creates the next key, of the paths in turn.
func (lg *loadGen) newKeyLocked(n int) *opKey {
	path := paths[(len(lg.keys)+n)%len(paths)]
	lg.nextID[path]++
	id := lg.nextID[path]
	k := &opKey{path: path, key: fmt.Sprintf("%s-%06d", keyPrefixes[path], id), target: 2 + lg.rng.IntN(4)}
	src := 1 + lg.rng.IntN(lg.cfg.Accounts)
	dst := 1 + (src+lg.rng.IntN(lg.cfg.Accounts-1))%lg.cfg.Accounts
	k.op = Op{Src: src, Dst: dst, Amount: 1 + int64(lg.rng.IntN(100))}
	if lg.cfg.RejectEvery > 0 && id%lg.cfg.RejectEvery == 0 {
		k.op.Amount = lg.cfg.InitialBalance * int64(lg.cfg.Accounts) * 10 // more than all the money
	}
	lg.keys = append(lg.keys, k)
	lg.byKey[k.key] = k
	return k
}

// pick chooses an active key and counts a request for it; keys retire once they have had their
// requests and a terminal answer (or a few more requests than planned).
func (lg *loadGen) pick() *opKey {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	i := lg.rng.IntN(len(lg.window))
	k := lg.window[i]
	if k.sent >= k.target && (k.terminal.Load() || k.sent >= k.target+6) {
		k = lg.newKeyLocked(0)
		lg.window[i] = k
	}
	k.sent++
	return k
}

// run sends requests from cfg.Clients clients until load ends or MaxRequests were sent; some are sent
// as bursts of two concurrent duplicates to different workers. Requests run on ctx, so those in
// flight when load ends finish normally.
func (lg *loadGen) run(load, ctx context.Context) {
	var wg sync.WaitGroup
	for range lg.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for load.Err() == nil && ctx.Err() == nil && lg.seq.Load() < int64(lg.cfg.MaxRequests) {
				k := lg.pick()
				if lg.rng.Float64() < 0.25 {
					lg.mu.Lock()
					k.sent++
					lg.mu.Unlock()
					s1 := lg.pool.pick(lg.rng, nil)
					s2 := lg.pool.pick(lg.rng, s1)
					var bw sync.WaitGroup
					bw.Add(1)
					go func() { defer bw.Done(); lg.send(ctx, k, s2, PhaseLoad) }()
					lg.send(ctx, k, s1, PhaseLoad)
					bw.Wait()
					continue
				}
				a := lg.send(ctx, k, lg.pool.pick(lg.rng, nil), PhaseLoad)
				if a.Class == ClassInFlight || a.Class == ClassTransport || a.Class == ClassUnavailable {
					// A client told to retry later waits a little, as Retry-After asks.
					sleepCtx(load, time.Duration(5+lg.rng.IntN(30))*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

// settle sends every key requested so far to a random worker until it gets a terminal answer
// (a result or a rejection) in this pass, within limit, and returns how many keys never got one.
// Keys answered during the load simply replay; the others — and keys whose answer went out before
// their outcome was recorded (the HTTP path streams the handler's response before the finish) —
// are taken over and settled, so the checker compares every answer with a final state.
func (lg *loadGen) settle(ctx context.Context, limit time.Duration) (unsettled int) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	lg.mu.Lock()
	var todo []*opKey
	for _, k := range lg.keys {
		if k.sent > 0 {
			todo = append(todo, k)
		}
	}
	lg.mu.Unlock()
	work := make(chan *opKey)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range lg.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				done := false
				for try := 0; try < 50 && ctx.Err() == nil && !done; try++ {
					if try > 0 {
						sleepCtx(ctx, time.Duration(50+lg.rng.IntN(200))*time.Millisecond)
					}
					done = terminalClass(lg.send(ctx, k, lg.pool.pick(lg.rng, nil), PhaseSettle).Class)
				}
				if !done {
					failed.Add(1)
				}
			}
		}()
	}
	sent := 0
	for _, k := range todo {
		select {
		case work <- k:
			sent++
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return int(failed.Load()) + len(todo) - sent
}

// send sends one request for k to the worker in slot s (nil: none alive) and logs the answer.
func (lg *loadGen) send(ctx context.Context, k *opKey, s *workerSlot, phase string) Answer {
	a := Answer{Seq: lg.seq.Add(1), Phase: phase, Path: k.path, Key: k.key, Op: k.op, Start: time.Now()}
	var addr string
	alive := false
	if s != nil {
		a.Worker, addr, _, alive = s.current()
	}
	if !alive {
		a.Class, a.Error = ClassTransport, "no live worker"
		sleepCtx(ctx, 20*time.Millisecond)
	} else if k.path == PathHTTP {
		lg.sendHTTP(ctx, addr, k, &a)
	} else {
		lg.sendOp(ctx, addr, k, &a)
	}
	a.End = time.Now()
	if terminalClass(a.Class) {
		k.terminal.Store(true)
	}
	lg.ansMu.Lock()
	lg.answers = append(lg.answers, a)
	lg.ansMu.Unlock()
	return a
}

func (lg *loadGen) sendOp(ctx context.Context, addr string, k *opKey, a *Answer) {
	body, _ := json.Marshal(opRequest{Path: k.path, Key: k.key, Op: k.op})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/op", bytes.NewReader(body))
	if err != nil {
		a.Class, a.Error = ClassError, err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := lg.client.Do(req)
	if err != nil {
		a.Class, a.Error = ClassTransport, err.Error()
		return
	}
	defer resp.Body.Close()
	a.Status = resp.StatusCode
	var oa opAnswer
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		a.Class, a.Error = ClassError, fmt.Sprintf("%s: %s", resp.Status, b)
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(&oa); err != nil {
		a.Class, a.Error = ClassTransport, "reading answer: "+err.Error()
		return
	}
	a.Class, a.Value, a.Fence, a.Biz, a.Error, a.Replayed = oa.Class, oa.Value, oa.Fence, oa.Biz, oa.Error, oa.Replayed
}

func (lg *loadGen) sendHTTP(ctx context.Context, addr string, k *opKey, a *Answer) {
	body, _ := json.Marshal(k.op)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/pay", bytes.NewReader(body))
	if err != nil {
		a.Class, a.Error = ClassError, err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", k.key)
	resp, err := lg.client.Do(req)
	if err != nil {
		a.Class, a.Error = ClassTransport, err.Error()
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		a.Class, a.Error = ClassTransport, "reading body: "+err.Error()
		return
	}
	a.Status = resp.StatusCode
	a.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	problem := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json")
	switch {
	case resp.StatusCode == http.StatusCreated && !problem:
		a.Class, a.Value = ClassOK, string(b)
		if a.Replayed {
			a.Class = ClassReplay
		}
	case resp.StatusCode == http.StatusUnprocessableEntity && !problem:
		a.Class, a.Value = ClassRejected, string(b)
	case resp.StatusCode == http.StatusUnprocessableEntity:
		a.Class, a.Error = ClassMismatch, string(b)
	case resp.StatusCode == http.StatusConflict && problem && strings.Contains(string(b), "in-flight"):
		a.Class = ClassInFlight
	case resp.StatusCode == http.StatusServiceUnavailable && problem:
		a.Class, a.Error = ClassUnavailable, string(b)
	case resp.StatusCode == http.StatusServiceUnavailable:
		a.Class, a.Error = ClassFailed, string(b) // the handler's retryable failure
	default:
		a.Class, a.Error = ClassError, fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
}

func (lg *loadGen) snapshot() ([]Answer, int) {
	lg.ansMu.Lock()
	answers := append([]Answer(nil), lg.answers...)
	lg.ansMu.Unlock()
	lg.mu.Lock()
	n := 0
	for _, k := range lg.keys {
		if k.sent > 0 {
			n++
		}
	}
	lg.mu.Unlock()
	return answers, n
}

func (lg *loadGen) lookup(key string) *opKey {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	return lg.byKey[key]
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
