package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

func TestGuardIsPermanentFollowsTheClassifier(t *testing.T) {
	errInvalid := errors.New("invalid")
	def, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	custom, err := idemkit.New(memory.NewStore(), &idemkit.Options{IsPermanent: func(err error) bool { return errors.Is(err, errInvalid) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		g    *idemkit.Guard
		err  error
		want bool
	}{
		{def, nil, false},
		{def, errInvalid, false},
		{def, idemkit.Permanent(errInvalid), true},
		{custom, errInvalid, true},
		{custom, errors.New("other"), false},
		// A marked error is permanent whatever the classifier says: adapters (grpcx's permanent
		// codes) and businesses mark the answers that must be replayed.
		{custom, idemkit.Permanent(errors.New("other")), true},
		{custom, nil, false},
	} {
		if got := tc.g.IsPermanent(tc.err); got != tc.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestRetryableOverridesTheClassifier: an error marked Retryable is retryable under a classifier that
// calls every error permanent, a Permanent mark still wins, and a function that panics under such a
// classifier leaves its key to be run again (it was stored REJECTED, replayed for good).
func TestRetryableOverridesTheClassifier(t *testing.T) {
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{IsPermanent: func(error) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	plain := errors.New("boom")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{plain, true},
		{idemkit.Retryable(plain), false},
		{fmt.Errorf("wrapped: %w", idemkit.Retryable(plain)), false},
		{idemkit.Permanent(idemkit.Retryable(plain)), true},
		{nil, false},
	} {
		if got := g.IsPermanent(tc.err); got != tc.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if idemkit.Retryable(nil) != nil || !idemkit.IsRetryable(idemkit.Retryable(plain)) || idemkit.IsRetryable(plain) {
		t.Error("Retryable(nil) or IsRetryable wrong")
	}

	call := idemkit.Call{Scope: "s", Key: "panics"}
	func() {
		defer func() { _ = recover() }()
		_, _ = g.Do(ctxb, call, func(context.Context) ([]byte, error) { panic("boom") })
	}()
	rec, err := g.Get(ctxb, call.Scope, call.Key)
	if err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record after a panic under a classifier calling everything permanent: %+v, %v; want FAILED", rec, err)
	}
	res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { return []byte("ran"), nil })
	if err != nil || res.Replayed || string(res.Value) != "ran" {
		t.Fatalf("retry after the panic: %+v, %v; want the function to run again", res, err)
	}
}
