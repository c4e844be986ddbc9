package dtmhttp

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dtm-labs/client/dtmcli/dtmimp"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
)

// DTM's result words (dtmcli.ResultSuccess, ResultFailure, ResultOngoing).
const (
	resultSuccess = "SUCCESS"
	resultFailure = "FAILURE"
	resultOngoing = "ONGOING"
)

// MayFail reports whether DTM acts on a permanent failure of op in a transaction of transType: the
// action of a saga (or workflow or XA) rolls the transaction back, a TCC try makes the initiator abort.
// Every other op — compensate, cancel, confirm, commit, rollback, and the action of a msg transaction —
// is retried by DTM until it succeeds and must never fail permanently.
func MayFail(transType, op string) bool {
	return op == barrier.OpTry || op == barrier.OpAction && transType != barrier.TransMsg
}

// verdict is the answer to one call.
type verdict struct {
	status     int
	result     string // dtm_result, "" for none
	retryAfter time.Duration
	stuck      bool // a permanent failure of an op that must not fail
}

// judge maps a call's error to its answer. dtmcli's own ErrFailure and ErrOngoing (dtmcli.ErrFailure is
// dtmimp.ErrFailure) are classified as dtmcli.Result2HttpJSON does, FAILURE first, so a business written
// for dtmcli keeps its meaning here; an op that must not fail answers 500 instead of 409, as for any
// permanent error.
func (b *Branches) judge(ev *Event, err error) verdict {
	var inflight *idemkit.InFlightError
	failure := func() verdict {
		if MayFail(ev.TransType, ev.Op) {
			return verdict{status: http.StatusConflict, result: resultFailure}
		}
		return verdict{status: http.StatusInternalServerError, stuck: true}
	}
	switch {
	case err == nil:
		return verdict{status: http.StatusOK, result: resultSuccess}
	case errors.As(err, &inflight):
		return verdict{status: http.StatusTooEarly, result: resultOngoing, retryAfter: inflight.RetryAfter}
	case errors.Is(err, idemkit.ErrInFlight):
		return verdict{status: http.StatusTooEarly, result: resultOngoing}
	case errors.Is(err, ErrWrongOp):
		return verdict{status: http.StatusBadRequest}
	case errors.Is(err, barrier.ErrInvalidBranch):
		return invalidBranch(ev)
	case errors.Is(err, dtmimp.ErrFailure):
		return failure()
	case errors.Is(err, dtmimp.ErrOngoing):
		return verdict{status: http.StatusTooEarly, result: resultOngoing}
	case errors.Is(err, ErrMalformedPayload), errors.Is(err, barrier.ErrBusinessFailure):
		// The package's own permanent failures, whatever a custom IsPermanent says of other errors.
		return failure()
	case idemkit.IsPermanent(err), !idemkit.IsRetryable(err) && b.opts.IsPermanent(err):
		return failure()
	default:
		return verdict{status: http.StatusInternalServerError}
	}
}

// invalidBranch is the answer to a branch the barrier cannot store (barrier.ErrInvalidBranch): a gid
// longer than 128 characters, say, which DTM v1.19 takes from an initiator that does not check it (its
// default store, boltdb, has no limit) and sends to every branch. DTM sends a transaction's fields
// unchanged on every call, so every call of the branch is refused alike, and:
//   - an op that may fail (MayFail) answers 409 FAILURE: nothing ran; the saga rolls back, the TCC
//     aborts;
//   - a compensating op (compensate, cancel, rollback) answers 200: the op it undoes was refused too,
//     so it has nothing to undo, as the barrier decides for a compensation whose op left no row in its
//     table. A late action is refused in turn;
//   - any other op DTM sends (a confirm, a commit, the action of a msg transaction) must take effect
//     and cannot, nor fail: 400, retried by DTM until an operator steps in, logged at error level.
//
// A call whose query lacks a field was not sent by DTM as it stands (a proxy dropping the query
// string, a request made by hand): nothing says what it belongs to, and it answers 400.
func invalidBranch(ev *Event) verdict {
	switch {
	case ev.TransType == "" || ev.GID == "" || ev.BranchID == "" || ev.Op == "":
		return verdict{status: http.StatusBadRequest}
	case MayFail(ev.TransType, ev.Op):
		return verdict{status: http.StatusConflict, result: resultFailure}
	case barrier.OriginOp(ev.Op) != "":
		return verdict{status: http.StatusOK, result: resultSuccess}
	case slices.Contains(servedOps, ev.Op):
		return verdict{status: http.StatusBadRequest, stuck: true}
	default:
		return verdict{status: http.StatusBadRequest}
	}
}

// answer writes the answer to a call that ended with err, logs and observes it.
func (b *Branches) answer(w http.ResponseWriter, r *http.Request, ev *Event, start time.Time, err error) {
	v := b.judge(ev, err)
	ev.Status, ev.Err, ev.Duration = v.status, err, time.Since(start)
	if v.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(v.retryAfter.Seconds())), 10))
	}
	msg := ""
	if err != nil {
		msg = err.Error()
		if v.stuck {
			msg = "permanent failure of a " + ev.Op + " branch, which DTM retries until it succeeds: " + msg
		}
	}
	writeAnswer(w, v.status, v.result, msg)

	ctx := r.Context()
	attrs := branchAttrs(ev)
	switch {
	case v.stuck && errors.Is(err, barrier.ErrInvalidBranch):
		b.opts.Logger.ErrorContext(ctx, "dtmhttp: invalid branch: a "+ev.Op+" can neither run nor fail; DTM retries it until it succeeds", attrs...)
	case v.stuck:
		b.opts.Logger.ErrorContext(ctx, "dtmhttp: a "+ev.Op+" must not fail permanently; DTM retries it until it succeeds", attrs...)
	case errors.Is(err, barrier.ErrInvalidBranch) && v.status == http.StatusOK:
		b.opts.Logger.WarnContext(ctx, "dtmhttp: invalid branch: its "+ev.Op+" has nothing to undo, answered as a null compensation", attrs...)
	case errors.Is(err, barrier.ErrInvalidBranch) && v.status == http.StatusConflict:
		b.opts.Logger.WarnContext(ctx, "dtmhttp: invalid branch: its "+ev.Op+" is refused as a permanent failure", attrs...)
	case v.status >= http.StatusInternalServerError || v.status == http.StatusBadRequest:
		b.opts.Logger.WarnContext(ctx, "dtmhttp: branch call failed", attrs...)
	default:
		b.opts.Logger.DebugContext(ctx, "dtmhttp: branch call answered", attrs...)
	}
	if b.opts.Observe != nil {
		b.opts.Observe(ctx, ev)
	}
}

func branchAttrs(ev *Event) []any {
	attrs := []any{
		slog.String("trans_type", ev.TransType), slog.String("gid", ev.GID),
		slog.String("branch_id", ev.BranchID), slog.String("op", ev.Op), slog.Int("status", ev.Status),
	}
	if ev.Outcome != 0 {
		attrs = append(attrs, slog.String("barrier", ev.Outcome.String()))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.Any("error", ev.Err))
	}
	return attrs
}

// answerBody is the JSON body of every answer.
type answerBody struct {
	Result  string `json:"dtm_result,omitempty"`
	Message string `json:"message,omitempty"`
}

// quiet lowers DTM's result words in a message: DTM searches the whole body for them.
var quiet = strings.NewReplacer(resultFailure, "failure", resultOngoing, "ongoing", resultSuccess, "success")

// maxFailureBody bounds a FAILURE answer, in characters. DTM makes the rollback reason of a saga of
// "url:<the step's URL> return failed: <the answer's body> FAILURE", which its SQL stores keep in a
// varchar(1024): a longer one is refused there, and the saga rolls back with the reason "fail message
// lost" (a retry interval later) instead of the step's message. The bound leaves 350 characters for
// the URL.
const maxFailureBody = 1024 - len("url: return failed:  FAILURE") - 350

// writeAnswer writes a complete JSON answer with a Content-Length. The message of a FAILURE answer is
// cut, ending with "…", so the body fits maxFailureBody.
func writeAnswer(w http.ResponseWriter, status int, result, msg string) {
	msg = quiet.Replace(msg)
	body, _ := json.Marshal(answerBody{Result: result, Message: msg})
	if result == resultFailure && utf8.RuneCount(body) > maxFailureBody {
		// The longest head of the message that fits once escaped, followed by an ellipsis.
		runes := []rune(msg)
		cut := func(n int) []byte {
			b, _ := json.Marshal(answerBody{Result: result, Message: string(runes[:n]) + "…"})
			return b
		}
		n := sort.Search(len(runes), func(n int) bool { return utf8.RuneCount(cut(n+1)) > maxFailureBody })
		body = cut(n)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
