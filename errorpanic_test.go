package idemkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// nilErr is an error type whose Error dereferences its receiver: a nil *nilErr returned as a non-nil
// error panics when described.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// TestErrorWhoseTextPanicsIsTheFunctionsPanic: a function that returned a nil *T as a non-nil error,
// T's Error dereferencing it, made the Guard panic when it recorded the error's text, after the
// function and outside its panic handling: the claim stayed PROCESSING and its lock held until the
// lease ran out (every retry meanwhile in flight), and a Tx-mode transaction stayed open. It is the
// function's panic: the claim is released, the transaction rolled back, and the panic goes on, in
// every mode.
func TestErrorWhoseTextPanicsIsTheFunctionsPanic(t *testing.T) {
	st := memory.NewStore()
	g, err := idemkit.New(st, &idemkit.Options{Locker: memory.NewLocker(nil), Lease: time.Hour, LockTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var typedNil *nilErr
	modes := map[string]func(c idemkit.Call){
		"Do": func(c idemkit.Call) {
			_, _ = g.Do(ctx, c, func(context.Context) ([]byte, error) { return nil, typedNil })
		},
		"Mark": func(c idemkit.Call) { _ = g.Mark(ctx, c, func(context.Context) error { return typedNil }) },
		"Tx": func(c idemkit.Call) {
			_, _ = g.Tx(ctx, st, c, func(context.Context, idemkit.TxStore) ([]byte, error) { return nil, typedNil })
		},
		"TxMark": func(c idemkit.Call) {
			_ = g.TxMark(ctx, st, c, func(context.Context, idemkit.TxStore) error { return typedNil })
		},
	}
	for name, run := range modes {
		t.Run(name, func(t *testing.T) {
			c := idemkit.Call{Scope: "typed-nil", Key: name}
			func() {
				defer func() {
					if recover() == nil {
						t.Error("no panic: want the function's error's panic to go on")
					}
				}()
				run(c)
			}()
			// The key is free again: a retry runs at once.
			ran := false
			_, err := g.Do(ctx, c, func(context.Context) ([]byte, error) { ran = true; return []byte("ok"), nil })
			if err != nil || !ran {
				t.Fatalf("retry after the panic: ran %v, %v; want the key free, run", ran, err)
			}
		})
	}
}
