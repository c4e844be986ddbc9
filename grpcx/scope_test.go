package grpcx_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/memory"
)

// TestScopeTheGuardCannotTake: the scope is the server's choice (the full method name, or
// Options.Scope), yet one the Guard refused — a method name longer than its MaxKeyLen, an empty
// scope — answered every call with a key INVALID_ARGUMENT, blaming the client for a request it
// could not fix, and the method could never be guarded. A long scope is now kept as its hash (as the
// HTTP middleware keeps its scopes), so the method is guarded as any other; an empty one is the
// server's error, INTERNAL, and the handler does not run.
func TestScopeTheGuardCannotTake(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{MaxKeyLen: 100})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	handler := func(context.Context, any) (any, error) {
		runs++
		return structpb.NewStruct(map[string]any{"charged": float64(runs)})
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcx.MetadataKey, "k-1"))
	req := charge(map[string]any{"amount": 1})
	long := "/com.example.payments.settlement.crossborder.v1." + strings.Repeat("Settlement", 6) + "Service/ChargeCustomerAccount"

	in := grpcx.UnaryServerInterceptor(guard, nil)
	var answers []*structpb.Struct
	for range 2 {
		resp, err := in(ctx, req, &grpc.UnaryServerInfo{FullMethod: long}, handler)
		if err != nil {
			t.Fatalf("method of %d bytes (the Guard's MaxKeyLen is 100): %v", len(long), err)
		}
		answers = append(answers, resp.(*structpb.Struct))
	}
	if runs != 1 || answers[1].GetFields()["charged"].GetNumberValue() != 1 {
		t.Fatalf("handler ran %d times, answers %v: want one run, replayed", runs, answers)
	}

	empty := grpcx.UnaryServerInterceptor(guard, &grpcx.Options{Scope: func(string) string { return "" }})
	_, err = empty(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/p.S/M"}, handler)
	if status.Code(err) != codes.Internal || runs != 1 {
		t.Fatalf("empty scope: %v (handler runs %d), want INTERNAL without running", err, runs)
	}
}

// TestGuardMaxKeyLenBelowTheHashedForm: a Guard whose MaxKeyLen is below the length of the hashed form
// the interceptor keeps long scopes, principal keys and FieldKey keys in (71 bytes) was accepted, and
// every call needing one answered INTERNAL, for the life of the server. It is refused when the
// interceptor is built, as the HTTP middleware refuses such a Guard.
func TestGuardMaxKeyLenBelowTheHashedForm(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{MaxKeyLen: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcx.NewUnaryServerInterceptor(guard, nil); err == nil || !strings.Contains(err.Error(), "MaxKeyLen 64") {
		t.Fatalf("NewUnaryServerInterceptor with a Guard's MaxKeyLen of 64: %v, want an error naming it", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("UnaryServerInterceptor with a Guard's MaxKeyLen of 64 did not panic")
			}
		}()
		grpcx.UnaryServerInterceptor(guard, nil)
	}()
	at, err := idemkit.New(memory.NewStore(), &idemkit.Options{MaxKeyLen: len(idemkit.HashedForm(""))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcx.NewUnaryServerInterceptor(at, nil); err != nil {
		t.Fatalf("a Guard's MaxKeyLen equal to the hashed form's length: %v", err)
	}
}
