package grpcx_test

// grpcx's codes are not DTM's. DTM reads a gRPC branch's answer with dtmgrpc.GrpcError2DtmError:
// ABORTED is FAILURE (the saga rolls back, the TCC aborts), FAILED_PRECONDITION is ONGOING (ask
// again later), any other error is retried. grpcx answers a duplicate in flight ABORTED and a key
// reused with another request FAILED_PRECONDITION, the opposite of what DTM needs, and offers no
// DTM mode: its documentation says so and points DTM gRPC branches to package barrier. This test
// pins the codes and how DTM reads them, so that a change to either is a change to those docs.

import (
	"errors"
	"testing"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/dtm-labs/client/dtmgrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCodesAsDTMReadsThem(t *testing.T) {
	e := setup(t)
	req := charge(map[string]any{"order_id": "k-dtm", "account": 1, "amount": 1, "sleep_ms": 1500})
	done := make(chan error, 1)
	go func() {
		_, _, _, err := e.call(t, "k-dtm", req)
		done <- err
	}()
	for k := range e.ran {
		if k == "k-dtm" {
			break
		}
	}
	_, _, _, inFlight := e.call(t, "k-dtm", req)
	if err := <-done; err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, _, _, reused := e.call(t, "k-dtm", charge(map[string]any{"order_id": "k-dtm", "account": 1, "amount": 2}))
	_, _, _, missing := e.call(t, "", charge(map[string]any{"account": 1, "amount": 1}))

	for _, c := range []struct {
		name string
		err  error
		code codes.Code
		dtm  error // what DTM makes of it; nil: an error it retries
	}{
		{"in flight", inFlight, codes.Aborted, dtmcli.ErrFailure},
		{"key reused with another request", reused, codes.FailedPrecondition, dtmcli.ErrOngoing},
		{"key missing on a Required method", missing, codes.InvalidArgument, nil},
	} {
		if got := status.Code(c.err); got != c.code {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.code)
		}
		got := dtmgrpc.GrpcError2DtmError(c.err)
		failure, ongoing := errors.Is(got, dtmcli.ErrFailure), errors.Is(got, dtmcli.ErrOngoing)
		switch {
		case c.dtm == nil && (failure || ongoing), c.dtm != nil && !errors.Is(got, c.dtm):
			t.Errorf("%s: DTM reads %v as %v, want %v (see the package documentation on DTM)", c.name, c.err, got, c.dtm)
		}
	}
}
