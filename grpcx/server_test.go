package grpcx_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// env is one test's server: the Payments service guarded in Tx mode on MariaDB with a Redis Locker,
// on a real loopback TCP listener.
type env struct {
	db     *gorm.DB
	tables chaosrpc.Tables
	cc     *grpc.ClientConn
	srv    *chaosrpc.Server

	mu   sync.Mutex
	runs map[string]int
	ran  chan string
	hook func(key string) // called by each business run as it starts, when set (before any call)
}

func setup(t *testing.T, extra ...grpc.ServerOption) *env {
	t.Helper()
	return setupWith(t, true, extra...)
}

// setupWith is setup, with the Redis Locker in front of the record Store or without one.
func setupWith(t *testing.T, locker bool, extra ...grpc.ServerOption) *env {
	t.Helper()
	db := testsvc.MySQL(t, nil)
	var rdb redis.UniversalClient
	if locker {
		rdb = testsvc.Redis(t)
	}
	e := &env{db: db, tables: chaosrpc.NewTables(testsvc.Name("grpcx")), runs: map[string]int{}, ran: make(chan string, 16)}
	ctx := context.Background()
	if err := e.tables.Create(ctx, db, 2, 1000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.tables.Drop(context.Background(), db) })
	prefix := e.tables.Records + ":"
	if rdb != nil {
		testsvc.CleanRedis(t, rdb, prefix)
	}
	srv, err := chaosrpc.NewServer(db, rdb, chaosrpc.ServerConfig{
		LockPrefix: prefix, Tables: e.tables, Lease: 10 * time.Second, LockTTL: 10 * time.Second, Deterministic: true,
	}, func(key string) {
		e.mu.Lock()
		e.runs[key]++
		e.mu.Unlock()
		if e.hook != nil {
			e.hook(key)
		}
		select {
		case e.ran <- key:
		default:
		}
	}, extra...)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.GRPC.Serve(ln) }()
	t.Cleanup(srv.Close)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	e.cc = cc
	return e
}

func (e *env) runsOf(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[key]
}

func charge(fields map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return s
}

// call sends req with key (none when "") and returns the response, its raw bytes, whether it was
// marked replayed, and the error.
func (e *env) call(t *testing.T, key string, req *structpb.Struct) (*structpb.Struct, []byte, bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if key != "" {
		ctx = grpcx.WithKey(ctx, key)
	}
	var hdr metadata.MD
	raw := &rawCodec{}
	resp, err := chaosrpc.Charge(ctx, e.cc, req, grpc.Header(&hdr), grpc.ForceCodecV2(raw))
	return resp, raw.raw, len(hdr.Get(grpcx.ReplayedKey)) > 0, err
}

func TestStatusCodes(t *testing.T) {
	e := setup(t)

	t.Run("missing key is INVALID_ARGUMENT", func(t *testing.T) {
		_, _, _, err := e.call(t, "", charge(map[string]any{"account": 1, "amount": 5}))
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("success is replayed byte for byte", func(t *testing.T) {
		req := charge(map[string]any{"order_id": "k-ok", "account": 1, "amount": 5})
		r1, raw1, rep1, err := e.call(t, "k-ok", req)
		if err != nil || rep1 {
			t.Fatalf("first call: %v (replayed %v)", err, rep1)
		}
		r2, raw2, rep2, err := e.call(t, "k-ok", req)
		if err != nil || !rep2 {
			t.Fatalf("duplicate: %v (replayed %v)", err, rep2)
		}
		if string(raw1) != string(raw2) || !proto.Equal(r1, r2) || len(raw1) == 0 {
			t.Fatalf("replay differs:\n%x\n%x", raw1, raw2)
		}
		if n := e.runsOf("k-ok"); n != 1 {
			t.Fatalf("business ran %d times", n)
		}
	})

	t.Run("key in a request field", func(t *testing.T) {
		req := charge(map[string]any{"order_id": "k-field", "account": 1, "amount": 1})
		if _, _, _, err := e.call(t, "", req); err != nil {
			t.Fatal(err)
		}
		if _, _, rep, err := e.call(t, "", req); err != nil || !rep {
			t.Fatalf("duplicate by field: %v (replayed %v)", err, rep)
		}
	})

	t.Run("another payload is FAILED_PRECONDITION", func(t *testing.T) {
		_, _, _, err := e.call(t, "k-ok", charge(map[string]any{"order_id": "k-ok", "account": 1, "amount": 6}))
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || !has[*errdetails.PreconditionFailure](st) {
			t.Fatalf("got %v %v", err, st.Details())
		}
	})

	t.Run("permanent error is stored and replayed with its details", func(t *testing.T) {
		req := charge(map[string]any{"order_id": "k-bad", "account": 1, "amount": 0})
		_, _, _, err1 := e.call(t, "k-bad", req)
		_, _, rep, err2 := e.call(t, "k-bad", req)
		s1, s2 := status.Convert(err1), status.Convert(err2)
		if s1.Code() != codes.InvalidArgument || !rep || !proto.Equal(s1.Proto(), s2.Proto()) || !has[*errdetails.BadRequest](s2) {
			t.Fatalf("first %v, replay %v (replayed %v)", s1.Proto(), s2.Proto(), rep)
		}
		if n := e.runsOf("k-bad"); n != 1 {
			t.Fatalf("business ran %d times", n)
		}
	})

	t.Run("retryable error is not stored", func(t *testing.T) {
		req := charge(map[string]any{"order_id": "k-retry", "account": 1, "amount": 1, "fail": "unavailable"})
		for i := range 2 {
			if _, _, rep, err := e.call(t, "k-retry", req); status.Code(err) != codes.Unavailable || rep {
				t.Fatalf("call %d: %v (replayed %v)", i, err, rep)
			}
		}
		if n := e.runsOf("k-retry"); n != 2 {
			t.Fatalf("business ran %d times, want 2", n)
		}
	})

	t.Run("in flight is ABORTED with RetryInfo", func(t *testing.T) {
		req := charge(map[string]any{"order_id": "k-slow", "account": 1, "amount": 1, "sleep_ms": 1500})
		done := make(chan error, 1)
		go func() {
			_, _, _, err := e.call(t, "k-slow", req)
			done <- err
		}()
		for k := range e.ran {
			if k == "k-slow" {
				break
			}
		}
		_, _, _, err := e.call(t, "k-slow", req)
		st := status.Convert(err)
		ri, ok := detail[*errdetails.RetryInfo](st)
		if st.Code() != codes.Aborted || !ok || ri.GetRetryDelay().AsDuration() <= 0 {
			t.Fatalf("got %v %v", err, st.Details())
		}
		if err := <-done; err != nil {
			t.Fatalf("first call: %v", err)
		}
	})

	t.Run("store unavailable is UNAVAILABLE", func(t *testing.T) {
		bad := testsvc.MySQL(t, nil)
		sqlDB, _ := bad.DB()
		srv, err := chaosrpc.NewServer(bad, nil, chaosrpc.ServerConfig{Tables: e.tables}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = sqlDB.Close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.GRPC.Serve(ln) }()
		defer srv.Close()
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		_, err = chaosrpc.Charge(grpcx.WithKey(context.Background(), "k-down"), cc, charge(map[string]any{"account": 1, "amount": 1}))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v", err)
		}
	})
}

func detail[T proto.Message](st *status.Status) (T, bool) {
	for _, d := range st.Details() {
		if v, ok := d.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

func has[T proto.Message](st *status.Status) bool {
	_, ok := detail[T](st)
	return ok
}

// TestTxKeyFinishedWhileRunning: without a Locker, two calls with one key both run the handler (each
// read no record first); the one whose record INSERT finds the other's committed record has its
// writes rolled back and answers the stored response, byte for byte, marked replayed — not an error.
func TestTxKeyFinishedWhileRunning(t *testing.T) {
	e := setupWith(t, false)
	const key = "k-race"
	both := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	e.hook = func(k string) {
		if k == key { // hold each run until both have started: both are past their read
			arrived.Done()
			<-both
		}
	}
	go func() {
		arrived.Wait()
		close(both)
	}()
	req := charge(map[string]any{"order_id": key, "account": 1, "amount": 7})
	type reply struct {
		raw      []byte
		replayed bool
		err      error
	}
	replies := make(chan reply, 2)
	for range 2 {
		go func() {
			_, raw, rep, err := e.call(t, key, req)
			replies <- reply{raw, rep, err}
		}()
	}
	a, b := <-replies, <-replies
	if a.err != nil || b.err != nil {
		t.Fatalf("answers: %v and %v; want both OK", a.err, b.err)
	}
	if a.replayed == b.replayed || len(a.raw) == 0 || string(a.raw) != string(b.raw) {
		t.Fatalf("answers replayed %v / %v, bytes equal %v; want one first answer and its byte-identical replay", a.replayed, b.replayed, string(a.raw) == string(b.raw))
	}
	if n := e.runsOf(key); n != 2 {
		t.Fatalf("business ran %d times, want 2 (both calls past their read)", n)
	}
	var rows, balance int64
	if err := e.db.Raw("SELECT COUNT(*) FROM "+e.tables.Ledger+" WHERE op_key = ?", key).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Raw("SELECT balance FROM " + e.tables.Accounts + " WHERE id = 1").Scan(&balance).Error; err != nil {
		t.Fatal(err)
	}
	if rows != 1 || balance != 1000-7 {
		t.Fatalf("%d ledger rows, balance %d; want 1 and %d (one debit)", rows, balance, 1000-7)
	}
}
