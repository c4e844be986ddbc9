package grpcx_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// commitCutter is a TCP proxy to PostgreSQL that, once armed, passes a client's COMMIT to the server
// and then cuts the connection without relaying the answer: the transaction committed, its client
// never learns it.
type commitCutter struct {
	ln    net.Listener
	armed atomic.Bool
	cut   atomic.Int64
	wg    sync.WaitGroup
}

func newCommitCutter(t *testing.T, target string) *commitCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &commitCutter{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
			p.wg.Go(func() {
				defer s.Close()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						// pgx sends COMMIT as a simple query: 'Q', length, "commit\x00".
						if p.armed.Load() && bytes.Contains(buf[:n], []byte("Q\x00\x00\x00\x0bcommit\x00")) && p.armed.CompareAndSwap(true, false) {
							p.cut.Add(1)
							_ = c.Close() // no answer reaches the client
							_, _ = s.Write(buf[:n])
							time.Sleep(300 * time.Millisecond) // the server commits
							return
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

// ledger is a Payments business in grpcx's Tx mode: one row per run, written in the call's transaction.
type ledger struct {
	table string
	runs  atomic.Int64
}

func (l *ledger) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	n := l.runs.Add(1)
	tx := record.GormTx(grpcx.TxFromContext(ctx))
	if tx == nil {
		return nil, status.Error(codes.Internal, "not in a Tx-mode call")
	}
	if err := tx.Exec("INSERT INTO "+l.table+" (run) VALUES (?)", n).Error; err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return structpb.NewStruct(map[string]any{"run": float64(n)})
}

// TestTxLostCommitReplyIsReplayed: in grpcx's Tx mode the database connection dies after the COMMIT
// reached PostgreSQL and before its answer came back: the call is answered UNAVAILABLE (its outcome
// unknown), and its retry with the same key gets the committed answer, replayed, the business's write
// applied once — with and without a Locker.
func TestTxLostCommitReplyIsReplayed(t *testing.T) {
	for _, locked := range []bool{false, true} {
		name := "no-locker"
		if locked {
			name = "locker"
		}
		t.Run(name, func(t *testing.T) {
			direct := testsvc.Postgres(t, nil) // creates the test database if need be
			cutter := newCommitCutter(t, "127.0.0.1:5432")
			db, err := gorm.Open(postgres.Open("host=127.0.0.1 port="+portOf(cutter.ln)+" user=postgres sslmode=disable dbname="+testsvc.Database), &gorm.Config{})
			if err != nil {
				t.Fatal(err)
			}
			sqlDB, _ := db.DB()
			t.Cleanup(func() { _ = sqlDB.Close() })
			store := recordsIn(t, direct, "grpcx_lostcommit_")
			store, err = record.New(db, &record.Options{Table: store.Table()})
			if err != nil {
				t.Fatal(err)
			}
			biz := &ledger{table: testsvc.Name("t_ledger_")}
			testsvc.DropTable(t, direct, biz.table)
			if err := direct.Exec("CREATE TABLE " + biz.table + " (run BIGINT NOT NULL)").Error; err != nil {
				t.Fatal(err)
			}
			var gopts *idemkit.Options
			if locked {
				rdb := testsvc.Redis(t)
				prefix := testsvc.Name("grpcx_lc:")
				testsvc.CleanRedis(t, rdb, prefix)
				gopts = &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix})}
			}
			guard, err := idemkit.New(store, gopts)
			if err != nil {
				t.Fatal(err)
			}
			cc := mustClient(t, serveGuardedWith(t, guard, &grpcx.Options{Tx: store}, biz))
			ctx := grpcx.WithKey(context.Background(), "k1")
			cutter.armed.Store(true)
			_, err = chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 5}))
			if cutter.cut.Load() != 1 {
				t.Fatalf("the COMMIT was not cut (answer %v)", err)
			}
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("answer to the call whose COMMIT reply was lost: %v, want UNAVAILABLE", err)
			}
			var resp *structpb.Struct
			for try := 0; ; try++ {
				resp, err = chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 5}))
				if status.Code(err) != codes.Unavailable && status.Code(err) != codes.Aborted || try > 50 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			var rows int
			if err := direct.Raw("SELECT count(*) FROM " + biz.table).Row().Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != 1 || resp.GetFields()["run"].GetNumberValue() != 1 {
				t.Fatalf("retry answered %v, %d business rows (runs %d): want the first run's answer and 1 row", resp, rows, biz.runs.Load())
			}
			t.Logf("business runs %d (with a Locker the retry runs it again, its writes rolled back at the record)", biz.runs.Load())
		})
	}
}

func portOf(ln net.Listener) string {
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
