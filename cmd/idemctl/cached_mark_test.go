package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestNextAttemptOfACachedMark: with Redis, a finished mark is cached as it releases its lock, and
// the Guard's next attempt of the key, answered from that cache, is refused as a duplicate
// (idemkit.ErrDuplicate): a mark keeps no result. inspect --redis said "the cached result is
// replayed" — the answer the record alone no longer gives (TestNextAttemptOfAMark) — whenever the
// cache held the mark.
func TestNextAttemptOfACachedMark(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			f := setup(t, d)
			ctx := context.Background()
			for _, fail := range []error{nil, idemkit.Permanent(errors.New("refused"))} {
				call := idemkit.Call{Scope: "send-mail", Key: "k-" + strings.ReplaceAll(errString(fail), " ", "")}
				if err := f.guard.Mark(ctx, call, func(context.Context) error { return fail }); !errors.Is(err, fail) {
					t.Fatal(err)
				}
				ins := jsonOf[inspectJSON](t, f.want(t, exitOK, nil, []string{"inspect", "--json", call.Scope, call.Key}))
				if ins.Redis == nil || !ins.Redis.Cached {
					t.Fatalf("inspect %s: %+v; want the mark cached in Redis", call.Key, ins)
				}
				ran := false
				err := f.guard.Mark(ctx, call, func(context.Context) error { ran = true; return nil })
				if !errors.Is(err, idemkit.ErrDuplicate) || ran {
					t.Fatalf("the Guard's next attempt of %s: %v (ran %v), want ErrDuplicate", call.Key, err, ran)
				}
				if !strings.Contains(ins.Next, "duplicate") || strings.Contains(ins.Next, "replayed") {
					t.Errorf("inspect %s: next attempt %q, want it to say a duplicate is refused (ErrDuplicate), not that a result is replayed", call.Key, ins.Next)
				}
			}
		})
	}
}
