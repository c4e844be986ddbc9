package msgx_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/msgx"
)

var errBoom = errors.New("boom")

// execFixture is a msgx.Guard on an in-memory Store and the handler calls it saw.
type execFixture struct {
	guard *idemkit.Guard
	mg    *msgx.Guard
	runs  atomic.Int32
}

func newExec(t *testing.T, gopts *idemkit.Options, opts *msgx.Options) *execFixture {
	t.Helper()
	g, err := idemkit.New(memory.NewStore(), gopts)
	if err != nil {
		t.Fatal(err)
	}
	mg, err := msgx.New(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &execFixture{guard: g, mg: mg}
}

// handle runs one delivery of m through Execute with a handler returning err.
func (f *execFixture) handle(m *msgx.Message, err error) msgx.Decision {
	return f.mg.Execute(func(ctx context.Context, _ *msgx.Message) error {
		f.runs.Add(1)
		if _, ok := idemkit.FenceFromContext(ctx); !ok {
			return errors.New("handler context carries no fence")
		}
		return err
	})(context.Background(), m)
}

func msg(id string) *msgx.Message {
	return &msgx.Message{ID: id, Queue: "orders/worker", Subject: "orders.created", Data: []byte(`{"id":1}`), Attempt: 1}
}

func want(t *testing.T, d msgx.Decision, a msgx.Action, o msgx.Outcome) {
	t.Helper()
	if d.Action != a || d.Outcome != o {
		t.Fatalf("decision %v, want %v (%v)", d, a, o)
	}
}

func TestExecuteAcksOnceAndDuplicatesWithoutRunning(t *testing.T) {
	f := newExec(t, nil, nil)
	want(t, f.handle(msg("m1"), nil), msgx.Ack, msgx.Processed)
	d := f.handle(msg("m1"), nil)
	want(t, d, msgx.Ack, msgx.Duplicate)
	if !d.Replayed {
		t.Error("duplicate not marked Replayed")
	}
	if n := f.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	rec, err := f.guard.Get(context.Background(), "orders/worker", "m1")
	if err != nil || rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %+v, %v; want SUCCEEDED under the queue's scope", rec, err)
	}
}

func TestExecuteRetryableErrorRetriesWithBackoff(t *testing.T) {
	f := newExec(t, nil, &msgx.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second})
	for attempt, delay := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		m := msg("r1")
		m.Attempt = attempt
		d := f.handle(m, errBoom)
		want(t, d, msgx.Retry, msgx.Failed)
		if d.Delay != delay || !errors.Is(d.Err, errBoom) {
			t.Errorf("attempt %d: %v, want a delay of %s and the handler's error", attempt, d, delay)
		}
	}
	rec, err := f.guard.Get(context.Background(), "orders/worker", "r1")
	if err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %+v, %v; want FAILED", rec, err)
	}
	want(t, f.handle(msg("r1"), nil), msgx.Ack, msgx.Processed) // the retry runs again
}

func TestExecuteMaxAttemptsGivesUp(t *testing.T) {
	f := newExec(t, nil, &msgx.Options{MaxAttempts: 3})
	m := msg("g1")
	m.Attempt = 2
	want(t, f.handle(m, errBoom), msgx.Retry, msgx.Failed)
	m.Attempt = 3
	d := f.handle(m, errBoom)
	want(t, d, msgx.DeadLetter, msgx.GaveUp)
	rec, err := f.guard.Get(context.Background(), "orders/worker", "g1")
	if err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %+v, %v; want FAILED (a replay from the dead-letter queue runs again)", rec, err)
	}
}

func TestExecutePermanentErrorIsRejected(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   *msgx.Options
		action msgx.Action
	}{
		{"dead-letter by default", nil, msgx.DeadLetter},
		{"ack when configured", &msgx.Options{OnReject: msgx.AckRejected}, msgx.Ack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newExec(t, nil, tc.opts)
			d := f.handle(msg("p1"), idemkit.Permanent(errBoom))
			want(t, d, tc.action, msgx.Rejected)
			if d.Replayed || !errors.Is(d.Err, errBoom) {
				t.Errorf("first rejection: %v", d)
			}
			d = f.handle(msg("p1"), nil)
			want(t, d, tc.action, msgx.Rejected)
			if !d.Replayed || !errors.Is(d.Err, idemkit.ErrRejected) {
				t.Errorf("redelivery: %v, want the stored rejection replayed", d)
			}
			if n := f.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
		})
	}
}

func TestExecuteUsesTheGuardsClassifier(t *testing.T) {
	errInvalid := errors.New("invalid order")
	f := newExec(t, &idemkit.Options{IsPermanent: func(err error) bool { return errors.Is(err, errInvalid) }}, nil)
	want(t, f.handle(msg("c1"), errInvalid), msgx.DeadLetter, msgx.Rejected)
	want(t, f.handle(msg("c2"), errBoom), msgx.Retry, msgx.Failed)                           // not permanent for this Guard
	want(t, f.handle(msg("c3"), idemkit.Permanent(errBoom)), msgx.DeadLetter, msgx.Rejected) // marked: permanent for every Guard
}

func TestPoisonMessagesAreDeadLetteredWithoutRunning(t *testing.T) {
	f := newExec(t, nil, &msgx.Options{Fingerprint: msgx.DataFingerprint})
	d := f.handle(msg(""), nil)
	want(t, d, msgx.DeadLetter, msgx.Poison)
	if !errors.Is(d.Err, msgx.ErrNoKey) {
		t.Errorf("no id: %v, want ErrNoKey", d)
	}
	d = f.handle(msg(strings.Repeat("k", 300)), nil)
	want(t, d, msgx.DeadLetter, msgx.Poison)
	if !errors.Is(d.Err, idemkit.ErrInvalidKey) {
		t.Errorf("long id: %v, want ErrInvalidKey", d)
	}
	want(t, f.handle(msg("same-id"), nil), msgx.Ack, msgx.Processed)
	other := msg("same-id")
	other.Data = []byte(`{"id":2}`)
	d = f.handle(other, nil)
	want(t, d, msgx.DeadLetter, msgx.Poison)
	if !errors.Is(d.Err, idemkit.ErrPayloadMismatch) {
		t.Errorf("reused id: %v, want ErrPayloadMismatch", d)
	}
	if n := f.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1 (only the first same-id)", n)
	}
}

func TestKeyFunctionAndScope(t *testing.T) {
	f := newExec(t, nil, &msgx.Options{
		Scope: "billing",
		Key: func(m *msgx.Message) (string, error) {
			if k := m.Header.Get("Order-Id"); k != "" {
				return "order-" + k, nil
			}
			return "", errors.New("no Order-Id header")
		},
	})
	a, b := msg("id-a"), msg("id-b") // the same order published twice with different message ids
	a.Header = msgx.Header{"Order-Id": {"42"}}
	b.Header = msgx.Header{"Order-Id": {"42"}}
	want(t, f.handle(a, nil), msgx.Ack, msgx.Processed)
	want(t, f.handle(b, nil), msgx.Ack, msgx.Duplicate)
	if _, err := f.guard.Get(context.Background(), "billing", "order-42"); err != nil {
		t.Fatalf("record under the configured scope and key: %v", err)
	}
	d := f.handle(msg("id-c"), nil)
	want(t, d, msgx.DeadLetter, msgx.Poison)
	if !errors.Is(d.Err, msgx.ErrNoKey) || !strings.Contains(d.Err.Error(), "no Order-Id header") {
		t.Errorf("key function error: %v", d.Err)
	}
}

func TestInFlightRetriesWithinTheHoldersLease(t *testing.T) {
	f := newExec(t, &idemkit.Options{Lease: 5 * time.Second}, &msgx.Options{RetryDelay: time.Second, MaxRetryDelay: time.Minute})
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan msgx.Decision)
	go func() {
		done <- f.mg.Execute(func(context.Context, *msgx.Message) error {
			close(started)
			<-release
			return nil
		})(context.Background(), msg("f1"))
	}()
	<-started
	for attempt, lo := range map[int]time.Duration{1: time.Second, 3: 4 * time.Second} {
		m := msg("f1")
		m.Attempt = attempt
		d := f.handle(m, nil)
		want(t, d, msgx.Retry, msgx.InFlight)
		if d.Delay < lo-time.Second || d.Delay > 5*time.Second {
			t.Errorf("attempt %d: delay %s, want about %s and never past the 5s lease", attempt, d.Delay, lo)
		}
	}
	close(release)
	want(t, <-done, msgx.Ack, msgx.Processed)
	want(t, f.handle(msg("f1"), nil), msgx.Ack, msgx.Duplicate)
}

func TestPanicIsARetryableFailure(t *testing.T) {
	f := newExec(t, nil, &msgx.Options{MaxAttempts: 2})
	h := f.mg.Execute(func(context.Context, *msgx.Message) error { panic("nil map") })
	d := h(context.Background(), msg("x1"))
	want(t, d, msgx.Retry, msgx.Failed)
	var pe *msgx.PanicError
	if !errors.As(d.Err, &pe) || pe.Value != "nil map" || len(pe.Stack) == 0 {
		t.Fatalf("%v, want a *PanicError with the value and a stack", d.Err)
	}
	m := msg("x1")
	m.Attempt = 2
	want(t, h(context.Background(), m), msgx.DeadLetter, msgx.GaveUp)
}

func TestStoreFailureRetriesAndRunsNothing(t *testing.T) {
	f := newExec(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := f.mg.Execute(func(context.Context, *msgx.Message) error {
		f.runs.Add(1)
		return nil
	})(ctx, msg("s1"))
	want(t, d, msgx.Retry, msgx.Failed)
	if f.runs.Load() != 0 {
		t.Fatal("handler ran although the claim failed")
	}
}

// hangingStore is a memory Store whose record updates (the finish after the handler) hang until
// their context ends while hang is set: a database that stopped answering.
type hangingStore struct {
	*memory.Store
	hang atomic.Bool
}

func (s *hangingStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if s.hang.Load() {
		<-ctx.Done()
		return fmt.Errorf("store: updating: %w", ctx.Err()) // what a driver returns: not ErrStoreUnavailable
	}
	return s.Store.Update(ctx, rec, prev)
}

// The handler's error is the delivery's outcome only when it was recorded: a permanent error whose
// finish timed out on a hung database was dead-lettered as Rejected with the record PROCESSING, and a
// retryable one on the last attempt as GaveUp. Both are Failed, retried.
func TestExecuteOutcomeNotRecordedIsRetried(t *testing.T) {
	st := &hangingStore{Store: memory.NewStore()}
	g, err := idemkit.New(st, &idemkit.Options{FinishTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mg, err := msgx.New(g, &msgx.Options{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	for id, herr := range map[string]error{"perm": idemkit.Permanent(errBoom), "last-attempt": errBoom, "ok": nil} {
		m := msg(id)
		m.Attempt = 2
		ctx, cancel := context.WithCancel(context.Background()) // a consumer's: FinishTimeout bounds the finish
		d := mg.Execute(func(context.Context, *msgx.Message) error {
			st.hang.Store(true)
			return herr
		})(ctx, m)
		cancel()
		st.hang.Store(false)
		want(t, d, msgx.Retry, msgx.Failed)
		if d.Delay != 2*time.Second {
			t.Errorf("%s: delay %s, want the backoff of attempt 2", id, d.Delay)
		}
		rec, err := g.Get(context.Background(), "orders/worker", id)
		if err != nil || rec.Status != idemkit.StatusProcessing {
			t.Errorf("%s: record %+v, %v; want it PROCESSING (the finish never landed)", id, rec, err)
		}
	}
}

// A redelivery from a queue that keeps no delivery count (a RabbitMQ classic queue: Attempt stays 2)
// backs off by MaxRetryDelay; MaxAttempts 2 still gives up, a larger one could never be reached and
// is a misconfiguration: the message is not run and not dead-lettered (it looped every 2×RetryDelay).
func TestUncountedAttempts(t *testing.T) {
	uncounted := func(id string) *msgx.Message {
		m := msg(id)
		m.Attempt, m.AttemptsUncounted = 2, true
		return m
	}
	f := newExec(t, nil, &msgx.Options{RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 5 * time.Second})
	d := f.handle(uncounted("u1"), errBoom)
	want(t, d, msgx.Retry, msgx.Failed)
	if d.Delay != 5*time.Second {
		t.Errorf("no limit: delay %s, want MaxRetryDelay", d.Delay)
	}
	f = newExec(t, nil, &msgx.Options{MaxAttempts: 2})
	want(t, f.handle(uncounted("u2"), errBoom), msgx.DeadLetter, msgx.GaveUp)
	f = newExec(t, nil, &msgx.Options{MaxAttempts: 3, MaxRetryDelay: 5 * time.Second})
	m := msg("u3")
	want(t, f.handle(m, errBoom), msgx.Retry, msgx.Failed) // a first delivery tells nothing
	d = f.handle(uncounted("u3"), errBoom)
	want(t, d, msgx.Retry, msgx.Failed)
	if !errors.Is(d.Err, msgx.ErrMisconfigured) || d.Delay != 5*time.Second {
		t.Errorf("MaxAttempts 3: %v, want ErrMisconfigured after MaxRetryDelay", d)
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once (not on the uncounted redelivery)", n)
	}
}

// A queue that cannot be the scope is the consumer's misconfiguration, not the message's: it was
// dead-lettered as Poison, every message alike.
func TestQueueThatCannotBeTheScope(t *testing.T) {
	f := newExec(t, &idemkit.Options{MaxKeyLen: 20}, nil)
	for _, q := range []string{"", strings.Repeat("q", 21), "bad\x00queue"} {
		m := msg("m1")
		m.Queue = q
		d := f.handle(m, nil)
		want(t, d, msgx.Retry, msgx.Failed)
		if !errors.Is(d.Err, msgx.ErrMisconfigured) || !errors.Is(d.Err, idemkit.ErrInvalidKey) {
			t.Errorf("queue %q: %v, want ErrMisconfigured", q, d)
		}
	}
	if n := f.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
	want(t, f.handle(msg("m1"), nil), msgx.Ack, msgx.Processed)
	m := msg("m2")
	m.Queue = "other"
	want(t, f.handle(m, nil), msgx.Ack, msgx.Processed) // the queue's check is cached, not its answer
	want(t, f.handle(msg("m3"), nil), msgx.Ack, msgx.Processed)
}

func TestNewValidates(t *testing.T) {
	g, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := msgx.New(nil, nil); err == nil {
		t.Error("nil guard accepted")
	}
	for _, o := range []msgx.Options{
		{RetryDelay: -time.Second},
		{RetryDelay: time.Minute, MaxRetryDelay: time.Second},
		{MaxAttempts: -1},
		{OnReject: 7},
	} {
		if _, err := msgx.New(g, &o); err == nil || !strings.HasPrefix(err.Error(), "msgx: invalid options") {
			t.Errorf("%+v: %v, want an invalid options error", o, err)
		}
	}
	// The scope as the Guard checks it (its MaxKeyLen, 20 here): every message would be Poison.
	short, err := idemkit.New(memory.NewStore(), &idemkit.Options{MaxKeyLen: 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{strings.Repeat("s", 21), "billing\n"} {
		if _, err := msgx.New(short, &msgx.Options{Scope: scope}); !errors.Is(err, idemkit.ErrInvalidKey) || !strings.HasPrefix(err.Error(), "msgx: invalid options") {
			t.Errorf("Scope %q: %v, want an invalid options error", scope, err)
		}
	}
	if _, err := msgx.New(short, &msgx.Options{Scope: strings.Repeat("s", 20)}); err != nil {
		t.Errorf("a scope of MaxKeyLen bytes: %v", err)
	}
	opts := &msgx.Options{}
	if _, err := msgx.New(g, opts); err != nil || opts.RetryDelay != 0 || opts.Logger != nil {
		t.Errorf("zero options: %v, or the caller's struct was changed: %+v", err, opts)
	}
}

func TestConstructorsPanicOnNil(t *testing.T) {
	f := newExec(t, nil, nil)
	for name, build := range map[string]func(){
		"Execute": func() { f.mg.Execute(nil) },
		"Tx":      func() { f.mg.Tx(nil, nil, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s(nil) did not panic", name)
				}
			}()
			build()
		}()
	}
}

// TestUnstorableFingerprintIsHashed: a Fingerprint function returning what no Store holds (a raw
// binary hash, a long canonical form) used to fail every delivery with ErrUnstorable, retried
// forever without running. It is stored as its hash and still tells payloads apart.
func TestUnstorableFingerprintIsHashed(t *testing.T) {
	for name, fp := range map[string]func(*msgx.Message) string{
		"binary": func(m *msgx.Message) string { s := sha256.Sum256(m.Data); return string(s[:]) },
		"long":   func(m *msgx.Message) string { return strings.Repeat("x", 200) + string(m.Data) },
	} {
		t.Run(name, func(t *testing.T) {
			f := newExec(t, nil, &msgx.Options{Fingerprint: fp})
			want(t, f.handle(msg("f1"), nil), msgx.Ack, msgx.Processed)
			want(t, f.handle(msg("f1"), nil), msgx.Ack, msgx.Duplicate)
			other := msg("f1")
			other.Data = []byte(`{"id":2}`)
			d := f.handle(other, nil)
			want(t, d, msgx.DeadLetter, msgx.Poison)
			if !errors.Is(d.Err, idemkit.ErrPayloadMismatch) {
				t.Fatalf("another payload: %v, want ErrPayloadMismatch", d.Err)
			}
			if n := f.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
			rec, err := f.guard.Get(context.Background(), "orders/worker", "f1")
			if err != nil || rec.Fingerprint != idemkit.StorableText(fp(msg("f1"))) || !strings.HasPrefix(rec.Fingerprint, "sha256:") {
				t.Fatalf("record %+v, %v: want the fingerprint's hash", rec, err)
			}
		})
	}
}
