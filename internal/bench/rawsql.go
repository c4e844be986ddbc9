package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The raw-SQL variants send, through database/sql alone, the statements idemkit's Tx mode sends to
// MariaDB for a new key on a multi-statement pool — none of idemkit's Go code, no Redis. Against
// dtm-barrier they measure what those statements cost the database, the bound no Go
// implementation of the same round trips can beat: sql-tx is Tx mode when the Locker's cache vouches
// for the key (tx, less its two Redis commands), sql-tx-probe Tx mode without a Locker, its read
// before the business left alone with START TRANSACTION (tx-nolock sends it so when no other read is
// in flight, and batches the others).

// rawTxOp returns the op of a raw-SQL variant; probe adds the read before the business.
func rawTxOp(e *Env, scope string, probe bool) Op {
	return func(ctx context.Context, w *Worker) error {
		key := w.Key()
		c, err := e.SQL.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		biz := "START TRANSACTION; " + e.InsertBiz
		if probe {
			var one int
			q := fmt.Sprintf("START TRANSACTION; SELECT 1 FROM `%s` WHERE scope = X'%X' AND idem_key = X'%X'", e.RecTable, scope, key)
			if err := c.QueryRowContext(ctx, q).Scan(&one); !errors.Is(err, sql.ErrNoRows) {
				return errors.Join(fmt.Errorf("raw probe: %v", err), rollback(c))
			}
			biz = e.InsertBiz
		}
		if _, err := c.ExecContext(ctx, biz, key, 1); err != nil {
			return errors.Join(err, rollback(c))
		}
		now := time.Now().UnixMilli()
		rec := fmt.Sprintf("INSERT INTO `%s` (scope, idem_key, status, fence, owner, fingerprint, gid, branch_id, response, error, "+
			"lease_until, expires_at, created_at, updated_at) VALUES (X'%X', X'%X', _utf8mb4 X'%X', 1, _utf8mb4 X'%X', '', '', '', X'%X', '', "+
			"%d, %d, %d, %d) ON DUPLICATE KEY UPDATE fence = fence + 1 + 18446744073709551615; COMMIT",
			e.RecTable, scope, key, "SUCCEEDED", rawOwner, result, now, now+int64(newKeyCacheTTL/time.Millisecond), now, now)
		if _, err := c.ExecContext(ctx, rec); err != nil {
			return errors.Join(err, rollback(c))
		}
		return nil
	}
}

// rollback ends the transaction on c after a failed statement.
func rollback(c *sql.Conn) error {
	_, err := c.ExecContext(context.Background(), "ROLLBACK")
	return err
}

func rawSQLVariants(e *Env) []*Variant {
	return []*Variant{
		{Name: VSQLTx, Group: "write", What: "the statements of Tx mode when the cache vouches for the key, through database/sql alone (no idemkit, no Redis): START TRANSACTION with the business INSERT, then the record's INSERT with the COMMIT",
			Op: rawTxOp(e, "bench/sql-tx", false)},
		{Name: VSQLTxProbe, Group: "write", What: "the statements of Tx mode without a Locker, through database/sql alone: START TRANSACTION with the read, the business INSERT, then the record's INSERT with the COMMIT",
			Op: rawTxOp(e, "bench/sql-tx-probe", true)},
	}
}

// rawOwner stands for the owner token of a record (32 hexadecimal digits, as idemkit's).
const rawOwner = "4d4a4d8593b2aa9871399a37e6bac545"
