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
// and reported as driver.ErrBadConn, which database/sql's DB.BeginTx answers by beginning again on
// another connection. A Guard-owned transaction takes a connection of its own (a *sql.Conn) and begins
// on it, where database/sql retries nothing: the BEGIN on the stale connection failed the call with
// "driver: bad connection" (Store.Tx and Store.SQLTx, OutcomeUnavailable) where it used to succeed.
func TestTxAfterTheServerClosedAnIdleConnection(t *testing.T) {
	db := testsvc.MySQL(t, nil) // one statement per packet: the ownedtx path, not multi.go's
	sqlDB, err := db.DB()
	must(t, err)
	s := newTable(t, db)
	g, err := idemkit.New(s, nil)
	must(t, err)
	other, err := sql.Open("mysql", testsvc.MySQLDSN()+testsvc.Database)
	must(t, err)
	t.Cleanup(func() { _ = other.Close() })

	// killIdle closes the pool's n connections from the server's side while they are idle.
	killIdle := func(t *testing.T, n int) {
		sqlDB.SetMaxIdleConns(0) // fresh connections: none left from before
		sqlDB.SetMaxOpenConns(n)
		sqlDB.SetMaxIdleConns(n)
		var ids []int64
		var conns []*sql.Conn
		for range n {
			c, err := sqlDB.Conn(ctxb)
			must(t, err)
			var id int64
			must(t, c.QueryRowContext(ctxb, "SELECT CONNECTION_ID()").Scan(&id))
			ids, conns = append(ids, id), append(conns, c)
		}
		for _, c := range conns {
			must(t, c.Close())
		}
		for _, id := range ids {
			_, err := other.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
			must(t, err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			var left int
			must(t, other.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN (%s)", joinIDs(ids))).Scan(&left))
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
	for _, n := range []int{1, 4} {
		for _, flavour := range []string{"gorm", "sql"} {
			t.Run(fmt.Sprintf("%s/%d", flavour, n), func(t *testing.T) {
				killIdle(t, n)
				// What the Guard does when nothing is read before the function (a key its cache
				// vouches for), and what msgx, the barrier and dtmmsg do: begin first.
				var b idemkit.TxBeginner = s
				if flavour == "sql" {
					b = sqlBeginner{s}
				}
				tx, err := b.BeginTx(ctxb)
				if err != nil {
					t.Fatalf("the first transaction begun after the server closed the %d idle connections: %v", n, err)
				}
				must(t, tx.Rollback())
				_, err = s.Tx(ctxb, g, idemkit.Call{Scope: "stale", Key: fmt.Sprint(flavour, n)}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) { return []byte("ok"), nil })
				must(t, err)
			})
		}
	}
}

func joinIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return strings.Join(parts, ", ")
}
