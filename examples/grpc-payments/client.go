package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit/grpcx"
)

// retryPolicy makes gRPC retry UNAVAILABLE answers; every attempt carries the same key.
const retryPolicy = `{"methodConfig":[{"name":[{"service":"` + serviceName + `"}],
	"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.05s","maxBackoff":"0.5s","backoffMultiplier":2,
	"retryableStatusCodes":["UNAVAILABLE"]}}]}`

type client struct{ cc *grpc.ClientConn }

func newClient(addr string) (*client, error) {
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryPolicy),
		grpc.WithChainUnaryInterceptor(grpcx.UnaryClientInterceptor(nil)), // a key per logical call
	)
	if err != nil {
		return nil, err
	}
	return &client{cc: cc}, nil
}

func (c *client) close() { _ = c.cc.Close() }

// call charges amount with key and reports the answer, whether it was replayed, and its encoding.
func (c *client) call(ctx context.Context, key string, amount float64) (*structpb.Struct, bool, []byte, error) {
	req, err := structpb.NewStruct(map[string]any{"account": 1, "amount": amount})
	if err != nil {
		return nil, false, nil, err
	}
	var hdr metadata.MD
	resp, err := charge(grpcx.WithKey(ctx, key), c.cc, req, grpc.Header(&hdr))
	if err != nil {
		return nil, false, nil, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	return resp, len(hdr.Get(grpcx.ReplayedKey)) > 0, b, err
}

// tour walks through the documented answers.
func tour(ctx context.Context, c *client, s *server, out io.Writer) error {
	step := func(n int, what string) { fmt.Fprintf(out, "%d. %s\n", n, what) }
	key := grpcx.NewKey()

	step(1, "charge 30 with a fresh key")
	r1, replayed, b1, err := c.call(ctx, key, 30)
	if err != nil || replayed {
		return fmt.Errorf("first charge: %v (replayed %v)", err, replayed)
	}
	fmt.Fprintf(out, "   OK %v\n", r1.AsMap())

	step(2, "the client retries with the same key (its answer was lost)")
	_, replayed, b2, err := c.call(ctx, key, 30)
	if err != nil || !replayed || !bytes.Equal(b1, b2) || s.runs != 1 {
		return fmt.Errorf("retry: %v (replayed %v, identical %v, runs %d)", err, replayed, bytes.Equal(b1, b2), s.runs)
	}
	fmt.Fprintf(out, "   replayed (idempotent-replayed: true), the same bytes, the account was debited once\n")

	step(3, "the same key with another amount")
	_, _, _, err = c.call(ctx, key, 31)
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !hasDetail[*errdetails.PreconditionFailure](st) {
		return fmt.Errorf("reused key: %v", err)
	}
	fmt.Fprintf(out, "   %s: %s\n", status.Code(err), status.Convert(err).Message())

	step(4, "charge 500 (more than the balance) with a new key, twice")
	k2 := grpcx.NewKey()
	_, _, _, e1 := c.call(ctx, k2, 500)
	_, _, _, e2 := c.call(ctx, k2, 500)
	s1, s2 := status.Convert(e1), status.Convert(e2)
	if s1.Code() != codes.FailedPrecondition || !proto.Equal(s1.Proto(), s2.Proto()) || s.runs != 2 {
		return fmt.Errorf("permanent failure: %v then %v (runs %d)", e1, e2, s.runs)
	}
	fmt.Fprintf(out, "   %s %q, stored and replayed with its ErrorInfo; the business ran once\n", s1.Code(), s1.Message())

	step(5, "a call without a key goes through the client interceptor, which adds one")
	req, _ := structpb.NewStruct(map[string]any{"account": 1, "amount": 5})
	if _, err := charge(ctx, c.cc, req); err != nil {
		return fmt.Errorf("keyless call: %w", err)
	}
	var balance int64
	if err := s.db.Raw("SELECT balance FROM accounts WHERE id = 1").Scan(&balance).Error; err != nil {
		return err
	}
	if balance != 100-30-5 {
		return errors.New("the balance does not add up")
	}
	fmt.Fprintf(out, "   OK; balance %d = 100 - 30 - 5\n\nAll 5 steps behaved as expected.\n", balance)
	return nil
}

func hasDetail[T proto.Message](st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(T); ok {
			return true
		}
	}
	return false
}
