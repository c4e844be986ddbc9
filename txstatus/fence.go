package txstatus

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// fenceSettle bounds Fence's wait for the abort it made to finish.
const fenceSettle = 2 * time.Second

// FenceReason is the rollback reason [Client.Fence] gives the transaction it registers and aborts.
const FenceReason = "idemkit: fenced: no initiator started this gid before its claim ran out"

// Fence makes sure the global transaction gid can no longer start on the server, and returns its status
// afterwards ([Info]: the status and DTM's rollback reason). A reconciler calls it before it declares failed a transaction the server has never heard
// of: the initiator may be slow rather than dead, and its submit may still be on its way.
//
// When the server has no transaction gid, Fence registers one — an empty TCC (prepare) — and aborts it:
// DTM then holds gid as failed and refuses any later submit or prepare of it (a saga's submit, a TCC's
// prepare or branch registration). When a transaction with gid got there first, Fence leaves it alone
// (DTM refuses the prepare) or, if it is a TCC still prepared, aborts it, so DTM cancels whatever it
// tried. Either way the Info returned is the server's: Failed with [FenceReason] once the fence is
// in place (Aborting if DTM has not finished the abort within a moment), or what became of the
// transaction that got there first, which the caller must follow like any other.
//
// It returns an error, and the caller should try again later, when the server cannot be reached or its
// answer is unknown (see [ErrNoAnswer]); a fence left half-way (prepared, not aborted) is finished by
// DTM itself, which aborts a TCC left prepared past its timeout.
func (c *Client) Fence(ctx context.Context, gid string) (Info, error) {
	tcc := map[string]any{"gid": gid, "trans_type": "tcc"}
	err := c.Call(ctx, "prepare", gid, tcc)
	switch {
	case errors.Is(err, ErrRefused):
		// DTM holds gid in another state: a transaction got there first. Its status decides.
	case err != nil:
		return Info{}, fmt.Errorf("txstatus: fencing %s: %w", gid, err)
	default:
		abort := map[string]any{"gid": gid, "trans_type": "tcc", "wait_result": true, "rollback_reason": FenceReason}
		if err := c.Call(ctx, "abort", gid, abort); err != nil && !errors.Is(err, ErrRefused) {
			return Info{}, fmt.Errorf("txstatus: fencing %s: %w", gid, err)
		}
	}
	// DTM processes an abort in the background: give it a moment to reach failed.
	wctx, cancel := context.WithTimeout(ctx, fenceSettle)
	_, _ = c.Wait(wctx, gid)
	cancel()
	info, err := c.Query(ctx, gid)
	if err != nil {
		return Info{}, fmt.Errorf("txstatus: fencing %s: %w", gid, err)
	}
	if info.Status == Unknown {
		return Info{}, fmt.Errorf("txstatus: fencing %s: the server still has no record of it after registering it", gid)
	}
	return info, nil
}
