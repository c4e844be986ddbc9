package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestNextAttemptOfAMark: a mark (Mark, MarkTx, TxMark) keeps no answer: the next attempt of its
// key gets idemkit.ErrDuplicate and nothing runs. inspect said "the stored result is replayed",
// which no attempt of a Mark-mode scope ever gets.
func TestNextAttemptOfAMark(t *testing.T) {
	t.Run("done", func(t *testing.T) { testNextAttemptOfAMark(t, nil) })
	// A permanent error keeps the mark, REJECTED: its duplicates get ErrDuplicate too, not the rejection.
	t.Run("rejected", func(t *testing.T) { testNextAttemptOfAMark(t, idemkit.Permanent(errors.New("refused"))) })
}

func testNextAttemptOfAMark(t *testing.T, fail error) {
	ctx := context.Background()
	clock := idemtest.NewClock()
	store := memory.NewStore()
	g, err := idemkit.New(store, &idemkit.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "send-mail", Key: "k"}
	if err := g.Mark(ctx, call, func(context.Context) error { return fail }); !errors.Is(err, fail) {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	rec, err := g.Get(ctx, call.Scope, call.Key)
	if err != nil {
		t.Fatal(err)
	}
	got := nextAttempt(rec, nil, clock.Now())
	ran := false
	err = g.Mark(ctx, call, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, idemkit.ErrDuplicate) || ran {
		t.Fatalf("the Guard's next attempt: %v (ran %v), want ErrDuplicate", err, ran)
	}
	if !strings.Contains(got, "duplicate") || strings.Contains(got, "replayed") {
		t.Errorf("nextAttempt of a mark = %q, want it to say a duplicate is refused (ErrDuplicate), not that a result is replayed", got)
	}
}

// TestNextAttemptWithoutFingerprint: a record stored without a fingerprint binds no payload: the
// Guard replays it to a call with any payload. inspect said "a different payload gets 422" all the same.
func TestNextAttemptWithoutFingerprint(t *testing.T) {
	ctx := context.Background()
	g, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for _, fp := range []string{"", "f1"} {
		call := idemkit.Call{Scope: "s", Key: "k" + fp, Fingerprint: fp}
		if _, err := g.Do(ctx, call, run); err != nil {
			t.Fatal(err)
		}
		rec, err := g.Get(ctx, call.Scope, call.Key)
		if err != nil {
			t.Fatal(err)
		}
		got := nextAttempt(rec, nil, time.Now())
		call.Fingerprint = "other"
		_, err = g.Do(ctx, call, run)
		mismatch := errors.Is(err, idemkit.ErrPayloadMismatch)
		if says := strings.Contains(got, "422"); says != mismatch {
			t.Errorf("fingerprint %q: nextAttempt = %q, but another payload gets %v", fp, got, err)
		}
	}
}

// TestNextAttemptOfATakeoverNamesThePayload: a FAILED record, or a claim whose lease ran out, is taken
// over by the next attempt, but only by one with the payload it was written with (or none): another
// payload gets 422 within the record's lifetime. inspect said "runs again" whatever the payload.
func TestNextAttemptOfATakeoverNamesThePayload(t *testing.T) {
	ctx := context.Background()
	clock := idemtest.NewClock()
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Lease: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	failed := idemkit.Call{Scope: "s", Key: "failed", Fingerprint: "f1"}
	if _, err := g.Do(ctx, failed, func(context.Context) ([]byte, error) { return nil, errors.New("timed out") }); err == nil {
		t.Fatal("want the failure")
	}
	stuck := idemkit.Call{Scope: "s", Key: "stuck", Fingerprint: "f1"}
	if cl, _, err := g.Begin(ctx, stuck); err != nil || cl == nil {
		t.Fatalf("Begin: %v", err)
	}
	clock.Advance(2 * time.Minute)
	for _, call := range []idemkit.Call{failed, stuck} {
		rec, err := g.Get(ctx, call.Scope, call.Key)
		if err != nil {
			t.Fatal(err)
		}
		got := nextAttempt(rec, nil, clock.Now())
		call.Fingerprint = "other"
		_, err = g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("v"), nil })
		if !errors.Is(err, idemkit.ErrPayloadMismatch) {
			t.Fatalf("%s: another payload got %v, want ErrPayloadMismatch", call.Key, err)
		}
		if !strings.Contains(got, "422") {
			t.Errorf("%s: nextAttempt = %q, but another payload gets %v", call.Key, got, err)
		}
	}
}
