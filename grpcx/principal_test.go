package grpcx_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// counts answers each call with its run number.
type counts struct{ runs atomic.Int64 }

func (c *counts) Charge(context.Context, *structpb.Struct) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"run": float64(c.runs.Add(1))})
}

// TestPrincipalScopesKeys: with Options.Principal, a key belongs to its caller — another caller
// sending the same key and request runs its own call and is never answered the first one's stored
// response (keys were shared by every caller of a method, as httpx's are without its Principal);
// the same caller's retry is replayed. A Principal error refuses the call, PERMISSION_DENIED unless
// it is a status error, and the handler does not run.
func TestPrincipalScopesKeys(t *testing.T) {
	store := memory.NewStore()
	guard, err := idemkit.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	principal := func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		switch user := strings.Join(md.Get("x-user"), ""); user {
		case "mallory":
			return "", errors.New("unknown user")
		case "locked":
			return "", status.Error(codes.Unauthenticated, "log in again")
		default:
			return user, nil
		}
	}
	biz := &counts{}
	cc := mustClient(t, serveGuardedWith(t, guard, &grpcx.Options{Principal: principal}, biz))
	as := func(user string) context.Context {
		return metadata.AppendToOutgoingContext(grpcx.WithKey(context.Background(), "k-shared"), "x-user", user)
	}
	run := func(user string) (float64, error) {
		resp, err := chaosrpc.Charge(as(user), cc, charge(map[string]any{"amount": 1}))
		if err != nil {
			return 0, err
		}
		return resp.GetFields()["run"].GetNumberValue(), nil
	}
	for _, step := range []struct {
		user string
		want float64
	}{{"alice", 1}, {"bob", 2}, {"alice", 1}, {"bob", 2}, {"", 3}, {"", 3}} {
		if got, err := run(step.user); err != nil || got != step.want {
			t.Fatalf("%q: run %v, %v; want the answer of run %v", step.user, got, err, step.want)
		}
	}
	for user, code := range map[string]codes.Code{"mallory": codes.PermissionDenied, "locked": codes.Unauthenticated} {
		if _, err := run(user); status.Code(err) != code {
			t.Errorf("%s: %v, want %v", user, err, code)
		}
	}
	if n := biz.runs.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 3", n)
	}
	if rec, err := guard.Get(context.Background(), chaosrpc.ChargeMethod, idemkit.PrincipalKey("alice", "k-shared")); err != nil || rec.Status != idemkit.StatusSucceeded {
		t.Errorf("alice's record under idemkit.PrincipalKey: %v, %v", rec, err)
	}
}
