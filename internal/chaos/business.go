//go:build unix

package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// Tables names the tables of a run: the idemkit record table and the business tables. On the
// private server they keep their defaults.
type Tables struct {
	Records  string // idemkit records (record.Store)
	Accounts string // id, balance
	Ledger   string // one row per applied transfer; deliberately not unique per key
	Gate     string // per-key fence register of the fenced paths (Execute mode, HTTP, Mark mode)
}

// DefaultTables returns the table names used on the private server.
func DefaultTables() Tables {
	return Tables{Records: "chaos_records", Accounts: "chaos_accounts", Ledger: "chaos_ledger", Gate: "chaos_gate"}
}

// Paths: how a request reaches idemkit.
const (
	PathExec = "exec" // RPC to a worker, guard.Do (Execute mode)
	PathTx   = "tx"   // RPC to a worker, guard.DoTx in the business transaction (Tx mode)
	PathHTTP = "http" // POST /pay with an Idempotency-Key header, through the httpx middleware
	PathMark = "mark" // RPC to a worker, store.TxMark: the mark and the business in one Guard-owned transaction
	// PathMarkExec: RPC to a worker, guard.Mark (Mark mode): the mark is written before the function,
	// whose fenced transfer commits apart from it.
	PathMarkExec = "markexec"
)

// Scopes of the RPC paths (the HTTP path's scope is httpx's default, "POST /pay").
const (
	scopeExec = "chaos/exec"
	scopeTx   = "chaos/tx"
	scopeHTTP = "POST /pay"
	scopeMark = "chaos/mark"
	// scopeMarkExec is the scope of PathMarkExec.
	scopeMarkExec = "chaos/markexec"
)

// Op is the payload of an operation: move Amount from account Src to account Dst.
type Op struct {
	Src    int   `json:"src"`
	Dst    int   `json:"dst"`
	Amount int64 `json:"amount"`
}

func (op Op) fingerprint() string { return fmt.Sprintf("%d>%d:%d", op.Src, op.Dst, op.Amount) }

// Business errors.
var (
	// errOverdraft is the permanent business failure: stored as REJECTED and replayed.
	errOverdraft = errors.New("insufficient funds")
	// errFlaky is an injected retryable failure before any write.
	errFlaky = errors.New("chaos: transient business failure (injected)")
	// errStale: the fence register holds a newer fence; this attempt was taken over and must not write.
	errStale = errors.New("chaos: business write refused by the fence: a newer attempt holds the key")
	// errBizDB wraps a database error of the business's own statements (the database restarting, a
	// dropped connection): retryable, answered as unavailable.
	errBizDB = errors.New("chaos: the business transaction failed")
)

// bizValue is the result of an applied transfer, built from its ledger row only, so that every
// attempt that reports it (the one that applied it, or a later one that finds it applied) reports
// the same bytes.
func bizValue(key string, ledgerID, fence, amount int64) []byte {
	return fmt.Appendf(nil, `{"op":%q,"ledger":%d,"fence":%d,"amount":%d}`, key, ledgerID, fence, amount)
}

// applyTransfer moves op's amount inside tx and writes the ledger row; it returns the row's id and
// the result value.
// Accounts are locked in id order, so transfers never deadlock on them. An overdraft is a permanent
// failure and writes nothing.
func (t Tables) applyTransfer(d *dialect, tx *gorm.DB, path, key, worker string, op Op, fence int64) (int64, []byte, error) {
	lo, hi := min(op.Src, op.Dst), max(op.Src, op.Dst)
	rows, err := tx.Raw("SELECT id, balance FROM "+t.Accounts+" WHERE id IN (?, ?) ORDER BY id FOR UPDATE", lo, hi).Rows()
	if err != nil {
		return 0, nil, err
	}
	bal := map[int]int64{}
	for rows.Next() {
		var id int
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			rows.Close()
			return 0, nil, err
		}
		bal[id] = b
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if len(bal) != 2 {
		return 0, nil, fmt.Errorf("chaos: accounts %d and %d not found", op.Src, op.Dst)
	}
	if bal[op.Src] < op.Amount {
		return 0, nil, idemkit.Permanent(errOverdraft)
	}
	if err := tx.Exec("UPDATE "+t.Accounts+" SET balance = balance - ? WHERE id = ?", op.Amount, op.Src).Error; err != nil {
		return 0, nil, err
	}
	if err := tx.Exec("UPDATE "+t.Accounts+" SET balance = balance + ? WHERE id = ?", op.Amount, op.Dst).Error; err != nil {
		return 0, nil, err
	}
	var id int64
	ins := "INSERT INTO " + t.Ledger + d.ledgerInsert
	args := []any{key, path, fence, op.Src, op.Dst, op.Amount, worker, time.Now().UnixMilli()}
	if d.lastID == "" {
		if err := tx.Raw(ins, args...).Row().Scan(&id); err != nil {
			return 0, nil, err
		}
	} else {
		if err := tx.Exec(ins, args...).Error; err != nil {
			return 0, nil, err
		}
		if err := tx.Raw(d.lastID).Row().Scan(&id); err != nil {
			return 0, nil, err
		}
	}
	return id, bizValue(key, id, fence, op.Amount), nil
}

// bizOutcome says what a business function did.
type bizOutcome string

const (
	bizNone     bizOutcome = ""
	bizApplied  bizOutcome = "applied"  // wrote the transfer
	bizAdopted  bizOutcome = "adopted"  // found it applied by an earlier attempt whose finish was lost
	bizStale    bizOutcome = "stale"    // refused by the fence register: a newer attempt holds the key
	bizRejected bizOutcome = "rejected" // overdraft
	bizFlaky    bizOutcome = "flaky"    // injected retryable failure, nothing written
	bizError    bizOutcome = "error"    // database error, rolled back
)

// fencedTransfer is the business write of the fenced paths (Execute mode, HTTP and Mark mode), where
// the business transaction is not the record's: in one transaction on the business database it
//
//  1. raises the key's fence register to this attempt's fence — the fence condition
//     (INSERT ... ON DUPLICATE KEY UPDATE fence = IF(fence < ?, ?, fence), or ON CONFLICT ... GREATEST
//     on PostgreSQL) — and reads it back with a row lock; if it holds a higher fence, a newer
//     attempt took the key over: nothing is written (errStale), so a stale holder can never apply
//     the transfer after its successor;
//  2. if the register already points at a ledger row, an earlier attempt applied the transfer and
//     lost its finish (crash, database restart, lease expiry): the result is read back, not applied
//     again;
//  3. otherwise applies the transfer and points the register at its ledger row.
//
// Step 2 is what Execute mode needs from a business that commits separately from the record: the
// fence tells attempts apart, but only the business can know whether its own commit happened. Mark
// mode needs it too: a retryable failure finishes the mark FAILED and the retry takes it over at the
// next fence, and the failure may be a commit whose reply was lost.
func (w *worker) fencedTransfer(ctx context.Context, path, key string, op Op, out *bizOutcome) ([]byte, error) {
	fence, ok := idemkit.FenceFromContext(ctx)
	if !ok {
		return nil, errors.New("chaos: no fence in the context")
	}
	trapped := false
	defer func() { w.noteBiz(path, key, fence, *out, trapped) }()
	if w.flaky() {
		*out = bizFlaky
		return nil, errFlaky
	}
	if trapped = op.Amount <= w.cfg.StallMaxAmount && w.trapPoint(trapStall, path, key, fence); trapped {
		// A process resumed after a freeze carries on with what it was doing; its request's deadline
		// (or a watchdog's cancellation) must not be what stops the stale write: only the fence.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
		defer cancel()
	}
	if err := w.biz.enter(ctx); err != nil {
		*out = bizError
		return nil, fmt.Errorf("%w: %w", errBizDB, err)
	}
	defer w.biz.exit()
	t := w.cfg.Tables
	var value []byte
	err := w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("INSERT INTO "+t.Gate+w.d.gateRaise, key, fence).Error; err != nil {
			return err
		}
		var gateFence, ledgerID int64
		if err := tx.Raw("SELECT fence, ledger_id FROM "+t.Gate+" WHERE op_key = ? FOR UPDATE", key).Row().Scan(&gateFence, &ledgerID); err != nil {
			return err
		}
		if gateFence != fence {
			*out = bizStale
			return errStale
		}
		if ledgerID != 0 {
			var lf, amount int64
			if err := tx.Raw("SELECT fence, amount FROM "+t.Ledger+" WHERE id = ?"+w.d.shareLock, ledgerID).Row().Scan(&lf, &amount); err != nil {
				return err
			}
			value = bizValue(key, ledgerID, lf, amount)
			*out = bizAdopted
			return nil
		}
		id, v, err := t.applyTransfer(w.d, tx, path, key, w.cfg.ID, op, fence)
		if err != nil {
			if idemkit.IsPermanent(err) {
				*out = bizRejected
			}
			return err
		}
		if err := tx.Exec("UPDATE "+t.Gate+" SET ledger_id = ? WHERE op_key = ?", id, key).Error; err != nil {
			return err
		}
		w.trapPoint(trapKill, path, key, fence) // writes done, commit pending
		value, *out = v, bizApplied
		return nil
	})
	if err != nil {
		if *out == bizNone || *out == bizApplied { // bizApplied: the commit failed after the writes
			*out = bizError
		}
		if *out == bizError {
			// A database error of the business's own transaction (a connection the last MariaDB
			// restart broke, say): retryable, answered as unavailable as in Tx mode. The Guard
			// returns it as it is when it could record the failure, so the answer has no
			// ErrStoreUnavailable to say so.
			err = fmt.Errorf("%w: %w", errBizDB, err)
		}
		return nil, err
	}
	return value, nil
}
