package idemkit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestMarkRetryGetsANewFence: Mark mode's function has effects outside any transaction of the
// record, and a retryable failure may leave some of them written, conditioned on the attempt's fence
// (idemkit.FenceFromContext, "WHERE fence < ?"). The retry must get a greater fence, as a retry in
// Execute mode does, or its own fenced writes are refused by the failed attempt's. Mark deleted its
// mark on a retryable failure, so the retry claimed the key afresh at fence 1 (found by a defect hunt).
func TestMarkRetryGetsANewFence(t *testing.T) {
	ctx := context.Background()
	for _, locker := range []bool{false, true} {
		s := memory.NewStore()
		var opts idemkit.Options
		if locker {
			opts.Locker = memory.NewLocker(nil)
		}
		g, err := idemkit.New(s, &opts)
		if err != nil {
			t.Fatal(err)
		}
		call := idemkit.Call{Scope: "s", Key: "k"}
		var fences []int64
		attempt := func(fail bool) error {
			return g.Mark(ctx, call, func(ctx context.Context) error {
				f, ok := idemkit.FenceFromContext(ctx)
				if !ok {
					t.Fatal("no fence in a Mark function's context")
				}
				fences = append(fences, f)
				if fail {
					return errors.New("the payment service timed out")
				}
				return nil
			})
		}
		if err := attempt(true); err == nil || idemkit.IsPermanent(err) {
			t.Fatalf("locker %v: first attempt: %v, want its retryable error", locker, err)
		}
		rec, err := g.Get(ctx, call.Scope, call.Key)
		if err != nil || rec.Status != idemkit.StatusFailed || rec.Fence != 1 {
			t.Fatalf("locker %v: record after a retryable failure: %+v, %v; want FAILED at fence 1", locker, rec, err)
		}
		if err := attempt(true); err == nil {
			t.Fatalf("locker %v: second attempt succeeded", locker)
		}
		if err := attempt(false); err != nil {
			t.Fatalf("locker %v: third attempt: %v", locker, err)
		}
		if err := attempt(false); !errors.Is(err, idemkit.ErrDuplicate) {
			t.Fatalf("locker %v: attempt after the success: %v, want ErrDuplicate", locker, err)
		}
		if len(fences) != 3 || fences[0] != 1 || fences[1] != 2 || fences[2] != 3 {
			t.Fatalf("locker %v: fences of the attempts %v, want [1 2 3]", locker, fences)
		}
		rec, err = g.Get(ctx, call.Scope, call.Key)
		if err != nil || !rec.IsMark() || rec.Fence != 3 {
			t.Fatalf("locker %v: record after the success: %+v, %v; want the mark at fence 3", locker, rec, err)
		}
	}
}
