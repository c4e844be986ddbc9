package grpcx_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
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

// ledgerWriter books one ledger row per run — through the call's transaction in Tx mode — and
// answers the row's number in a header and a trailer as well as in the response, as a service whose
// clients read the created resource's id from its metadata does. amount 0 is refused permanently,
// with the same metadata. When hold is set, each run waits on it after its write.
type ledgerWriter struct {
	db    *gorm.DB
	table string
	runs  atomic.Int64
	hold  func()
	send  bool // send the header at once (grpc.SendHeader) rather than with the answer
}

func (l *ledgerWriter) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	n := l.runs.Add(1)
	entry := strconv.FormatInt(n, 10)
	db := l.db.WithContext(ctx) // Execute mode: the effect is the handler's own
	if tx := grpcx.TxFromContext(ctx); tx != nil {
		db = record.GormTx(tx)
	}
	if err := db.Exec("INSERT INTO "+l.table+" (entry) VALUES (?)", n).Error; err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if l.hold != nil {
		l.hold()
	}
	hdr := metadata.Pairs("x-ledger-entry", entry, "x-entry-bin", string([]byte{0, byte(n), 0xff}))
	if l.send {
		if err := grpc.SendHeader(ctx, hdr); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	} else if err := grpc.SetHeader(ctx, hdr); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-balance", "9"+entry)); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if req.GetFields()["amount"].GetNumberValue() == 0 {
		return nil, status.Error(codes.InvalidArgument, "amount must not be zero")
	}
	return structpb.NewStruct(map[string]any{"entry": entry})
}

// ledgerTable creates a table of ledger rows on db, dropped when t ends.
func ledgerTable(t *testing.T, db *gorm.DB) string {
	t.Helper()
	table := testsvc.Name("grpcx_ledger_")
	testsvc.DropTable(t, db, table)
	if err := db.Exec("CREATE TABLE " + table + " (entry BIGINT NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	return table
}

func (l *ledgerWriter) rows(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := l.db.Raw("SELECT COUNT(*) FROM " + l.table).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// answer is what a client saw of one call.
type answer struct {
	resp    *structpb.Struct
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func (a answer) replayed() bool { return len(a.header.Get(grpcx.ReplayedKey)) > 0 }

// meta is a's header and trailer without gRPC's own fields and the replay marker.
func (a answer) meta() string {
	clean := func(md metadata.MD) map[string][]string { // not metadata.MD, whose String redacts values
		out := map[string][]string{}
		for k, v := range md {
			if k == grpcx.ReplayedKey || k == "content-type" || k[0] == ':' || len(k) > 5 && k[:5] == "grpc-" {
				continue
			}
			out[k] = v
		}
		return out
	}
	return fmt.Sprintf("header %q trailer %q", clean(a.header), clean(a.trailer))
}

func chargeWith(ctx context.Context, cc *grpc.ClientConn, req *structpb.Struct) answer {
	var a answer
	a.resp, a.err = chaosrpc.Charge(ctx, cc, req, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	return a
}

// TestHandlerMetadataIsReplayed: the headers and trailers a handler sets (grpc.SetHeader,
// grpc.SetTrailer) are part of its answer — the created entry's id here — but a duplicate got the
// stored response or status without them: a client retrying a call whose answer it lost read no
// entry id. They are stored with the answer and replayed, in Execute and Tx mode, for a success and
// for a permanent error.
func TestHandlerMetadataIsReplayed(t *testing.T) {
	rdb := testsvc.Redis(t)
	for dbName, open := range databases {
		for _, tx := range []bool{false, true} {
			for _, amount := range []float64{5, 0} {
				t.Run(fmt.Sprintf("%s tx=%v amount=%v", dbName, tx, amount), func(t *testing.T) {
					db := open(t, nil)
					store := recordsIn(t, db, "grpcx_meta_")
					prefix := store.Table() + ":"
					testsvc.CleanRedis(t, rdb, prefix)
					guard, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix})})
					if err != nil {
						t.Fatal(err)
					}
					biz := &ledgerWriter{db: db, table: ledgerTable(t, db)}
					opts := &grpcx.Options{}
					if tx {
						opts.Tx = store
					}
					cc := mustClient(t, serveGuardedWith(t, guard, opts, biz))
					ctx := grpcx.WithKey(context.Background(), "k-meta")
					req := charge(map[string]any{"amount": amount})
					first := chargeWith(ctx, cc, req)
					dup := chargeWith(ctx, cc, req)
					t.Logf("first: %v %v, %s", first.resp, first.err, first.meta())
					t.Logf("duplicate: %v %v, %s (replayed %v)", dup.resp, dup.err, dup.meta(), dup.replayed())
					if n := biz.runs.Load(); n != 1 {
						t.Fatalf("handler ran %d times", n)
					}
					if first.resp.String() != dup.resp.String() || status.Convert(first.err).String() != status.Convert(dup.err).String() {
						t.Fatalf("duplicate answered %v %v, the first call %v %v", dup.resp, dup.err, first.resp, first.err)
					}
					if first.replayed() || !dup.replayed() {
						t.Fatalf("replayed marks: first %v, duplicate %v", first.replayed(), dup.replayed())
					}
					if len(first.header.Get("x-ledger-entry")) == 0 || first.meta() != dup.meta() {
						t.Fatalf("duplicate's metadata %s; the first call's %s", dup.meta(), first.meta())
					}
					if rows, want := biz.rows(t), map[bool]int64{true: 0, false: 1}[tx && amount == 0]; rows != want {
						t.Fatalf("%d ledger rows, want %d (a refusal rolls back in Tx mode)", rows, want)
					}
				})
			}
		}
	}
}

// databases are the record stores' databases the tests run on.
var databases = map[string]func(testing.TB, *gorm.Config) *gorm.DB{"mariadb": testsvc.MySQL, "postgres": testsvc.Postgres}

// TestTxReplayAfterRunCarriesNoRolledBackMetadata: in Tx mode without a Locker two calls with one key
// both run the handler; the one whose record finds the other's committed record rolls its writes
// back and answers the stored response — but went out with the headers and trailers its own,
// rolled-back run set (an entry id that does not exist), and, when its handler had sent its header
// already, without the replay marker. It answers the stored metadata, marked replayed.
func TestTxReplayAfterRunCarriesNoRolledBackMetadata(t *testing.T) {
	for dbName, open := range databases {
		for _, send := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s SendHeader=%v", dbName, send), func(t *testing.T) {
				db := open(t, nil)
				store := recordsIn(t, db, "grpcx_metarace_")
				guard, err := idemkit.New(store, nil)
				if err != nil {
					t.Fatal(err)
				}
				var arrived sync.WaitGroup
				arrived.Add(2)
				both := make(chan struct{})
				go func() { arrived.Wait(); close(both) }()
				biz := &ledgerWriter{db: db, table: ledgerTable(t, db), send: send, hold: func() {
					arrived.Done() // hold each run until both have written: both are past their read
					<-both
				}}
				cc := mustClient(t, serveGuardedWith(t, guard, &grpcx.Options{Tx: store}, biz))
				ctx, cancel := context.WithTimeout(grpcx.WithKey(context.Background(), "k-metarace"), 30*time.Second)
				defer cancel()
				answers := make(chan answer, 2)
				for range 2 {
					go func() { answers <- chargeWith(ctx, cc, charge(map[string]any{"amount": 5})) }()
				}
				a, b := <-answers, <-answers
				t.Logf("a: %v %v %s replayed %v", a.resp, a.err, a.meta(), a.replayed())
				t.Logf("b: %v %v %s replayed %v", b.resp, b.err, b.meta(), b.replayed())
				if a.err != nil || b.err != nil {
					t.Fatalf("answers %v and %v; want both OK", a.err, b.err)
				}
				if n := biz.runs.Load(); n != 2 {
					t.Fatalf("handler ran %d times, want 2 (both past their read)", n)
				}
				if rows := biz.rows(t); rows != 1 {
					t.Fatalf("%d ledger rows, want 1", rows)
				}
				if a.replayed() == b.replayed() {
					t.Fatalf("replayed marks %v and %v: want one original and one replay", a.replayed(), b.replayed())
				}
				if a.resp.String() != b.resp.String() || a.meta() != b.meta() {
					t.Fatalf("the replay differs from the committed answer:\n%v %s\n%v %s", a.resp, a.meta(), b.resp, b.meta())
				}
			})
		}
	}
}

// TestEmptyKeyIsInvalid: a call whose idempotency-key metadata is present but empty (an application
// that passed an unset order id to grpcx.WithKey) was taken for a call without a key: it ran
// unguarded, every retry again — and behind UnaryClientInterceptor each attempt of the
// application's retry loop got a fresh key instead. The client sent a key, and a malformed one:
// INVALID_ARGUMENT, and nothing runs, as httpx answers an empty Idempotency-Key 400.
func TestEmptyKeyIsInvalid(t *testing.T) {
	rdb := testsvc.Redis(t)
	store := mysqlRecords(t, "grpcx_emptykey_")
	prefix := store.Table() + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	guard, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix})})
	if err != nil {
		t.Fatal(err)
	}
	biz := &counter{}
	addr := serveGuarded(t, guard, biz)
	plain := mustClient(t, addr)
	withKeys, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpcx.UnaryClientInterceptor(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = withKeys.Close() })
	ctx := grpcx.WithKey(context.Background(), "") // derived once, for the application's retries
	for name, cc := range map[string]*grpc.ClientConn{"plain client": plain, "UnaryClientInterceptor": withKeys} {
		for i := range 2 {
			_, err := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 3}))
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s, attempt %d: %v, want INVALID_ARGUMENT", name, i+1, err)
			}
		}
	}
	if n := biz.runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for calls carrying an empty key", n)
	}
}
