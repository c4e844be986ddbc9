package barrier

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/internal/ownedtx"
)

// The barrier row of a msg transaction's local transaction, as dtmcli's Msg.DoAndSubmit writes it:
// branch "00", op "msg", barrier_id "01". QueryPrepared writes the same row with reason "rollback".
const (
	msgBranchID  = "00"
	msgBarrierID = "01"
	msgRollback  = OpRollback
)

// ErrMsgRolledBack: [Gorm.QueryPrepared] found that the local transaction of a msg transaction did
// not commit, and made sure it never will. DTM's back-check answers it with FAILURE.
var ErrMsgRolledBack = errors.New("barrier: msg local transaction rolled back")

// MsgBranch returns the branch under which a msg transaction's local transaction enters the barrier
// (trans_type "msg", branch_id "00", op "msg"): pass it to [Gorm.Enter] or [Gorm.Call] inside the local
// transaction, as dtmcli's Msg.DoAndSubmit does. It returns ErrInvalidBranch for an empty or too long
// gid.
func MsgBranch(gid string) (*Branch, error) {
	return NewBranch(TransMsg, gid, msgBranchID, OpMsg)
}

// QueryPrepared answers DTM's back-check of the msg transaction gid, with dtmcli's
// BranchBarrier.QueryPrepared semantics: it inserts the local transaction's barrier row with reason
// "rollback" unless the row exists, then reads the row's reason. When the local transaction committed
// (its row says "msg") it returns nil and DTM submits the message; otherwise the "rollback" row is now
// in place, so the local transaction can never commit (its own insert finds the row: [ErrDuplicate])
// and it returns ErrMsgRolledBack: DTM fails the message. While the local transaction is still open,
// the insert waits for it on the row's lock (MySQL, PostgreSQL) and the answer is its outcome. An
// insert the database refused on a write conflict is run again, up to 3 times: on a PostgreSQL whose
// transactions run in REPEATABLE READ or SERIALIZABLE, the one that waited for a local transaction
// that then committed fails with a serialization failure (the row is not in its snapshot).
//
// It runs two statements of its own (not in a caller's transaction), on ctx. It returns
// ErrInvalidBranch for a bad gid (also one holding a NUL byte on PostgreSQL, as [Gorm.Enter] does),
// ErrMsgRolledBack, or the database error.
func (g *Gorm) QueryPrepared(ctx context.Context, gid string) error {
	b, err := MsgBranch(gid)
	if err != nil {
		return err
	}
	if err := g.validate(b); err != nil {
		return err
	}
	pool := g.db.Statement.ConnPool
	if err := g.checkEncoding(ctx, g.db.Config, pool); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		_, err := pool.ExecContext(ctx, g.d.insert, b.TransType, gid, msgBranchID, OpMsg, msgBarrierID, msgRollback)
		if err == nil {
			break
		}
		if !ownedtx.RunAgain(ctx, attempt, ownedtx.Conflict(err)) {
			return fmt.Errorf("barrier: back-check of msg %s: %w", gid, err)
		}
	}
	var reason string
	if err := queryOne(ctx, pool, &reason, g.d.reason, gid, msgBranchID, OpMsg, msgBarrierID); err != nil {
		return fmt.Errorf("barrier: back-check of msg %s: reading its row: %w", gid, err)
	}
	if reason == msgRollback {
		return ErrMsgRolledBack
	}
	return nil
}
