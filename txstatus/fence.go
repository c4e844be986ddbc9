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
// afterwards ([Info]: the status and DTM's rollback reason). A reconciler calls it before it declares
// failed a transaction the server has never heard of: the initiator may be slow rather than dead, and its
// submit may still be on its way.
//
// When the server has no transaction gid, Fence registers one — an empty TCC (prepare) — and aborts it.
// Once the abort is in, DTM holds gid as failed and refuses any later submit or prepare of it (a saga's
// submit, a TCC's prepare or branch registration). The two calls are not atomic, and between them DTM
// v1.19 accepts what lands on the prepared gid:
//   - a saga's submit: DTM flips the fence's prepared TCC to submitted, runs the branches stored with
//     it — none, the saga's steps are never stored — and reports gid succeed (stored as the fence's
//     "tcc" on a SQL store; as a "saga" with no branch on boltdb and Redis). The abort is then refused
//     and Fence returns that Succeed, although nothing ran: [Info.RanNothingFor] tells such a
//     transaction from the initiator's, and the reconciler and the initiator record it as never
//     started, not as succeeded.
//   - a TCC's prepare: accepted (the gid is prepared); its branches register on the fence's
//     transaction. The abort then cancels whatever was tried (Failed), or, if the TCC submitted first,
//     is refused and the TCC's own branches are confirmed (Succeed, genuinely).
//
// When a transaction with gid got there first, Fence leaves it alone (DTM refuses the prepare) or, if it
// is a TCC still prepared, aborts it, so DTM cancels whatever it tried. Either way the Info returned is
// the server's: Failed with [FenceReason] once the fence is in place (Aborting if DTM has not finished
// the abort within a moment), or what became of the transaction that got there first, which the caller
// must follow like any other (checking [Info.RanNothingFor] before it takes a Succeed for its own).
//
// It returns an error, and the caller should try again later, when the server cannot be reached or its
// answer is unknown (see [ErrNoAnswer]); a fence left half-way (prepared, not aborted) is finished by
// DTM itself, which aborts a TCC left prepared past its timeout — until then a late saga submit can
// land on it as above.
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
