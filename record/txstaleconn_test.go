package record

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestTxAfterTheServerClosedAnIdleConnection: a pooled MySQL connection the server closed while it
// was idle (wait_timeout, a KILL, a node restarted) is found stale by the driver at its first write
// and reported as driver.ErrBadConn, having sent nothing, which database/sql's DB.BeginTx and pool
// statements answer by running again on another connection. A transaction the Store begins on a
// connection of its own (a *sql.Conn) sends its first statement there, where database/sql retries
// nothing: the first guarded transaction after the server closed the idle connections failed with
// "driver: bad connection" — on a plain DSN since those transactions hold a connection of their own
// (BEGIN), and on a multi-statement one always (the first statement that finds out whether the pool
// takes several statements per packet, the probe before the function, the business's first statement
// or the record's INSERT-and-COMMIT, which carry START TRANSACTION). Each of them now runs again on
// another connection, past every idle one if need be.
func TestTxAfterTheServerClosedAnIdleConnection(t *testing.T) {
	t.Run("plain", func(t *testing.T) { staleIdle(t, testsvc.MySQL(t, nil)) })
	t.Run("multi", func(t *testing.T) { staleIdle(t, testsvc.MySQLMulti(t, nil)) })
}

func staleIdle(t *testing.T, db *gorm.DB) {
	sqlDB, err := db.DB()
	must(t, err)
	other, err := sql.Open("mysql", testsvc.MySQLDSN()+testsvc.Database)
	must(t, err)
	t.Cleanup(func() { _ = other.Close() })
	s := newTable(t, db)
	g, err := idemkit.New(s, nil)
	must(t, err)

	// killIdle closes the pool's n connections from the server's side while they are idle.
	killIdle := func(t *testing.T, n int) {
		sqlDB.SetMaxIdleConns(0) // fresh connections: none left from before
		sqlDB.SetMaxOpenConns(n)
		sqlDB.SetMaxIdleConns(n)
		var ids []string
		var conns []*sql.Conn
		for range n {
			c, err := sqlDB.Conn(ctxb)
			must(t, err)
			var id int64
			must(t, c.QueryRowContext(ctxb, "SELECT CONNECTION_ID()").Scan(&id))
			ids, conns = append(ids, fmt.Sprint(id)), append(conns, c)
		}
		for _, c := range conns {
			must(t, c.Close())
		}
		for _, id := range ids {
			_, err := other.Exec("KILL CONNECTION " + id)
			must(t, err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			var left int
			must(t, other.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN ("+strings.Join(ids, ", ")+")").Scan(&left))
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the killed connections are still there")
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the FINs reach the client's sockets
	}
	ok := func(ctx context.Context, tx *gorm.DB) ([]byte, error) { return []byte("ok"), nil }
	i := 0
	for _, n := range []int{1, 4} {
		// The ways a guarded transaction begins. On a multi-statement pool, the first is the
		// Store's first transaction, which finds out whether the pool takes several statements.
		for _, how := range []string{"Guard.Tx", "BeginTx+statement", "BeginTx+InsertCommit", "SQLTx"} {
			t.Run(fmt.Sprintf("%s/%d", how, n), func(t *testing.T) {
				i++
				if i > 1 { // the first finds out whether the pool takes several statements per packet
					_, err := s.Tx(ctxb, g, idemkit.Call{Scope: "stale", Key: fmt.Sprint("warm", i)}, ok)
					must(t, err)
				}
				killIdle(t, n)
				call := idemkit.Call{Scope: "stale", Key: fmt.Sprint(how, i)}
				switch how {
				case "Guard.Tx": // reads first: on a multi-statement pool, the probe
					_, err = s.Tx(ctxb, g, call, ok)
				case "SQLTx":
					_, err = s.SQLTx(ctxb, g, call, func(ctx context.Context, tx *sql.Tx) ([]byte, error) { return []byte("ok"), nil })
				default: // what the Guard does when it reads nothing first, and what msgx does
					tx, berr := s.BeginTx(ctxb)
					if berr != nil {
						t.Fatalf("the first transaction begun after the server closed the %d idle connections: %v", n, berr)
					}
					if how == "BeginTx+statement" {
						err = GormTx(tx).Exec("DO 1").Error
						must(t, tx.Rollback())
						break
					}
					if ic, isIC := tx.(idemkit.InsertCommitter); isIC {
						now := time.Now()
						err = ic.InsertCommit(ctxb, &idemkit.Record{Scope: call.Scope, Key: call.Key, Status: idemkit.StatusSucceeded,
							Fence: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)})
					} else {
						err = tx.Commit()
					}
				}
				if err != nil {
					t.Fatalf("the first guarded transaction after the server closed the %d idle connections: %v", n, err)
				}
			})
		}
	}
}
