package httpx

import (
	"log/slog"
	"net/http"
)

// DTM's names for the ops of its branch calls, as its HTTP calls give them in the op query parameter
// (with trans_type, gid and branch_id). Package dtmhttp (MayFail) and package barrier (OriginOp)
// hold the same rules; httpx does not import them, which would bring in their databases' drivers.
const (
	dtmOpAction     = "action"
	dtmOpCompensate = "compensate"
	dtmOpTry        = "try"
	dtmOpConfirm    = "confirm"
	dtmOpCancel     = "cancel"
	dtmOpCommit     = "commit"
	dtmOpRollback   = "rollback"
	dtmTransMsg     = "msg"
)

// dtmMayFail reports whether DTM acts on a permanent failure of op in a transaction of transType:
// the action of a saga (or workflow or XA) rolls it back, a TCC try makes the initiator abort. Every
// other op is retried by DTM until it succeeds (as dtmhttp.MayFail).
func dtmMayFail(transType, op string) bool {
	return op == dtmOpTry || op == dtmOpAction && transType != dtmTransMsg
}

// dtmUndoes reports whether op undoes another op of its branch (as barrier.OriginOp).
func dtmUndoes(op string) bool {
	return op == dtmOpCompensate || op == dtmOpCancel || op == dtmOpRollback
}

// dtmBodyTooLarge answers, with Options.DTM, a request refused because its body is over
// MaxBodyBytes. DTM sends a branch's payload unchanged on every call of it and reads 413 as "retry":
// the transaction would never finish. The answer depends on the op DTM names in the query, as
// package dtmhttp answers a payload over its MaxBody:
//   - an op that may fail (a saga's action, a TCC's try) answers 409, which DTM reads as FAILURE:
//     nothing ran; the saga rolls back, the TCC aborts;
//   - a compensate, cancel or rollback answers 200 {"dtm_result":"SUCCESS"}: it carries the payload
//     of the op it undoes, which was refused the same way (the routes of a branch's ops having the
//     same MaxBodyBytes), so it has nothing to undo;
//   - a confirm, a commit or the action of a msg transaction must take effect and can neither run
//     nor fail: 413, logged at error level, retried by DTM until an operator steps in.
//
// A request whose query lacks one of trans_type, gid, branch_id and op was not sent by DTM as it
// stands (a proxy dropping the query, a request made by hand): it answers 413 as without DTM.
func (m *middleware) dtmBodyTooLarge(w http.ResponseWriter, r *http.Request, st *reqState, p problem) {
	q := r.URL.Query()
	transType, gid, branchID, op := q.Get("trans_type"), q.Get("gid"), q.Get("branch_id"), q.Get("op")
	if transType == "" || gid == "" || branchID == "" || op == "" {
		m.problem(w, st, p)
		return
	}
	log := func(level slog.Level, msg string) {
		if ctx := r.Context(); m.cfg.Logger.Enabled(ctx, level) {
			m.cfg.Logger.LogAttrs(ctx, level, "httpx: DTM branch payload over MaxBodyBytes: "+msg,
				slog.String("request_id", st.reqID), slog.String("trans_type", transType), slog.String("gid", gid),
				slog.String("branch_id", branchID), slog.String("op", op), slog.Int64("max_body_bytes", m.cfg.MaxBodyBytes))
		}
	}
	switch {
	case dtmMayFail(transType, op):
		log(slog.LevelWarn, "its "+op+" is refused as a permanent failure (409)")
		p.Status = http.StatusConflict
	case dtmUndoes(op):
		log(slog.LevelWarn, "its "+op+" has nothing to undo, answered SUCCESS")
		writeDTMSuccess(w)
		return
	case op == dtmOpConfirm || op == dtmOpCommit || op == dtmOpAction:
		log(slog.LevelError, "a "+op+" can neither run nor fail; DTM retries it until it succeeds")
	}
	m.problem(w, st, p)
}

// writeDTMSuccess answers 200 {"dtm_result":"SUCCESS"}, DTM's success.
func writeDTMSuccess(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
}
