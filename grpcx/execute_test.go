package grpcx_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// counter is a Payments business with no database: it counts its runs.
type counter struct{ runs atomic.Int64 }

func (c *counter) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	n := c.runs.Add(1)
	time.Sleep(20 * time.Millisecond) // long enough for concurrent duplicates to meet it
	return structpb.NewStruct(map[string]any{"run": float64(n), "echo": req.GetFields()["amount"].GetNumberValue()})
}

// TestExecuteModeConcurrentDuplicates: the default (Execute) mode with the zero Options, several
// clients sending the same key at once over TCP: the handler runs once, every caller gets its answer
// (the original, or the replay once it finished) or ABORTED while it runs, never a second run.
func TestExecuteModeConcurrentDuplicates(t *testing.T) {
	rdb := testsvc.Redis(t)
	store := mysqlRecords(t, "grpcx_exec_")
	prefix := store.Table() + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	guard, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix})})
	if err != nil {
		t.Fatal(err)
	}
	biz := &counter{}
	addr := serveGuarded(t, guard, biz)

	req := charge(map[string]any{"amount": 9})
	var wg sync.WaitGroup
	var ok, aborted atomic.Int64
	var mu sync.Mutex
	var answers []string
	for range 4 { // four clients, each with its own connection
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := grpcx.WithKey(context.Background(), "same-key")
				for {
					resp, err := chaosrpc.Charge(ctx, cc, req)
					switch status.Code(err) {
					case codes.OK:
						ok.Add(1)
						mu.Lock()
						answers = append(answers, resp.String())
						mu.Unlock()
						return
					case codes.Aborted:
						aborted.Add(1)
						time.Sleep(10 * time.Millisecond)
					default:
						t.Errorf("call: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if n := biz.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	for _, a := range answers {
		if a != answers[0] {
			t.Fatalf("answers differ: %q vs %q", a, answers[0])
		}
	}
	t.Logf("%d answers, %d ABORTED while the first ran", ok.Load(), aborted.Load())
	// A call without a key passes through (Required is not set).
	if _, err := chaosrpc.Charge(context.Background(), mustClient(t, addr), req); err != nil {
		t.Fatal(err)
	}
	if n := biz.runs.Load(); n != 2 {
		t.Fatalf("a call without a key should run: runs %d", n)
	}
}

func mustClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// serveGuarded serves biz (a chaosrpc.Payments) on a loopback TCP listener behind the interceptor on
// guard with the zero Options, until the test ends, and returns its address.
func serveGuarded(t *testing.T, guard *idemkit.Guard, biz any) string {
	t.Helper()
	return serveGuardedWith(t, guard, nil, biz)
}

// serveGuardedWith is serveGuarded with the interceptor's Options opts.
func serveGuardedWith(t *testing.T, guard *idemkit.Guard, opts *grpcx.Options, biz any) string {
	t.Helper()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcx.UnaryServerInterceptor(guard, opts)))
	srv.RegisterService(chaosrpc.ServiceDesc(), biz)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// mysqlRecords returns a record Store on a fresh MariaDB table named with prefix, dropped when t ends.
func mysqlRecords(t *testing.T, prefix string) *record.Store {
	t.Helper()
	return recordsIn(t, testsvc.MySQL(t, nil), prefix)
}

// recordsIn returns a record Store on a fresh table of db named with prefix, dropped when t ends.
func recordsIn(t *testing.T, db *gorm.DB, prefix string) *record.Store {
	t.Helper()
	table := testsvc.Name(prefix)
	testsvc.DropTable(t, db, table)
	store, err := record.New(db, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return store
}
