package bench

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/record"
)

// Names of the gRPC variants (optional: not in DefaultVariants).
const (
	VGRPCBare      = "grpc-bare"
	VGRPCGuarded   = "grpc-guarded"
	VGRPCGuardedTx = "grpc-guarded-tx"
)

// grpcBench is the loopback gRPC servers of the gRPC variants and one client connection to each.
type grpcBench struct {
	servers []*grpc.Server
	bare    *grpc.ClientConn
	guarded *grpc.ClientConn
	tx      *grpc.ClientConn
}

// grpcPayments runs the business for the request's order_id: through the transaction the Tx-mode
// interceptor put in the context when there is one, else in a transaction of its own (biz).
type grpcPayments struct {
	biz    func(ctx context.Context, key string) error
	insert string
}

var grpcResult, _ = structpb.NewStruct(map[string]any{"order": "created", "amount": 1})

func (p *grpcPayments) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	key := req.GetFields()["order_id"].GetStringValue()
	var err error
	if tx := record.GormTx(grpcx.TxFromContext(ctx)); tx != nil {
		err = tx.Exec(p.insert, key, 1).Error
	} else {
		err = p.biz(ctx, key)
	}
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return grpcResult, nil
}

func (g *grpcBench) close() error {
	for _, cc := range []*grpc.ClientConn{g.bare, g.guarded, g.tx} {
		if cc != nil {
			_ = cc.Close()
		}
	}
	for _, s := range g.servers {
		s.Stop()
	}
	return nil
}

// serve starts a server with opts and returns a client connection to it.
func (g *grpcBench) serve(p *grpcPayments, opts ...grpc.ServerOption) (*grpc.ClientConn, error) {
	s := grpc.NewServer(opts...)
	s.RegisterService(chaosrpc.ServiceDesc(), p)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = s.Serve(ln) }()
	g.servers = append(g.servers, s)
	return grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// grpcRequest is the request of key: the key in a field (the business needs it) and a few more.
func grpcRequest(key string) *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{
		"order_id": key, "item": "book", "qty": 1, "address": map[string]any{"city": "Lyon", "zip": "69001"},
	})
	return s
}

// grpcVariants are the gRPC variants: the same Charge handler over loopback gRPC, bare and behind
// grpcx's interceptor (Execute mode on guard, as http-guarded; and Tx mode on txGuard and store).
func grpcVariants(e *Env, guard, txGuard *idemkit.Guard, store *record.Store, biz func(context.Context, string) error) []*Variant {
	var g *grpcBench
	start := func() error {
		if g != nil {
			return nil
		}
		b := &grpcBench{}
		p := &grpcPayments{biz: biz, insert: e.InsertBiz}
		var err error
		if b.bare, err = b.serve(p); err != nil {
			_ = b.close()
			return err
		}
		if b.guarded, err = b.serve(p, grpc.ChainUnaryInterceptor(grpcx.UnaryServerInterceptor(guard, nil))); err != nil {
			_ = b.close()
			return err
		}
		txIcpt := grpcx.UnaryServerInterceptor(txGuard, &grpcx.Options{Tx: store}) // the guard-owned transaction
		if b.tx, err = b.serve(p, grpc.ChainUnaryInterceptor(txIcpt)); err != nil {
			_ = b.close()
			return err
		}
		g = b
		e.closers = append(e.closers, b.close)
		return nil
	}
	call := func(cc func() *grpc.ClientConn, keyed bool) Op {
		return func(ctx context.Context, w *Worker) error {
			key := w.Key()
			if keyed {
				ctx = grpcx.WithKey(ctx, key)
			}
			resp, err := chaosrpc.Charge(ctx, cc(), grpcRequest(key))
			if err == nil && resp.GetFields()["order"].GetStringValue() != "created" {
				err = errors.New("unexpected response")
			}
			return err
		}
	}
	setup := func(context.Context) error { return start() }
	return []*Variant{
		{Name: VGRPCBare, Group: "grpc", What: "loopback gRPC unary call to the bare handler (business transaction)",
			Setup: setup, Op: call(func() *grpc.ClientConn { return g.bare }, false)},
		{Name: VGRPCGuarded, Group: "grpc", What: "the same handler behind grpcx.UnaryServerInterceptor (Execute mode), a new key per call",
			Setup: setup, Op: call(func() *grpc.ClientConn { return g.guarded }, true)},
		{Name: VGRPCGuardedTx, Group: "grpc", What: "grpcx in Tx mode (Guard.Tx on the record Store): the handler's INSERT and the record's, written once, in one transaction, a new key per call",
			Setup: setup, Op: call(func() *grpc.ClientConn { return g.tx }, true)},
	}
}
