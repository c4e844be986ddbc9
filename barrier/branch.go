package barrier

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Transaction types as DTM names them (the trans_type query parameter).
const (
	TransSaga     = "saga"
	TransTCC      = "tcc"
	TransXA       = "xa"
	TransMsg      = "msg"
	TransWorkflow = "workflow"
)

// Branch operations as DTM names them (the op query parameter and the barrier table's op column).
const (
	OpTry        = "try"        // TCC
	OpConfirm    = "confirm"    // TCC
	OpCancel     = "cancel"     // TCC, undoes try
	OpAction     = "action"     // saga, msg, XA, workflow
	OpCompensate = "compensate" // saga, undoes action
	OpCommit     = "commit"     // XA, workflow
	OpRollback   = "rollback"   // XA, workflow, undoes action
	OpMsg        = "msg"        // msg DoAndSubmit: a repeat is rejected with ErrDuplicate
)

// Column limits of DTM's barrier table.
const (
	maxTransType = 45
	maxGid       = 128
	maxBranchID  = 128
	maxOp        = 45
)

// Errors returned by the barrier. Compare with errors.Is.
var (
	// ErrInvalidBranch: a branch field is missing, too long or not valid UTF-8.
	ErrInvalidBranch = errors.New("barrier: invalid branch")
	// ErrNoTransaction: Gorm.Call or Gorm.Enter got a handle that is not inside a transaction.
	ErrNoTransaction = errors.New("barrier: not inside a transaction")
	// ErrDuplicate: a msg op (DTM's DoAndSubmit) was already recorded; DTM's dtmcli.ErrDuplicated.
	ErrDuplicate = errors.New("barrier: duplicate msg branch")
	// ErrBusinessFailure: the Redis business script answered with an error reply starting with
	// "FAILURE". It is returned wrapped in idemkit.Permanent, so DTM handlers answer 409.
	ErrBusinessFailure = errors.New("barrier: business failure")
	// ErrCrossSlot: the keys of a Redis call do not share one hash tag.
	ErrCrossSlot = errors.New("barrier: keys in different hash slots")
)

// Outcome says what the barrier decided for one call.
type Outcome int

const (
	// Proceed: first delivery; the business ran (or, from Gorm.Enter, must run) in the transaction.
	Proceed Outcome = iota + 1
	// Duplicate: the op was recorded before; the business did not run.
	Duplicate
	// NullCompensation: a compensating op arrived before (or without) the op it undoes; it was recorded
	// so that op will not run later, and the business did not run.
	NullCompensation
	// Hanging: a try/action arrived after its compensation; the business did not run.
	Hanging
)

func (o Outcome) String() string {
	switch o {
	case Proceed:
		return "proceed"
	case Duplicate:
		return "duplicate"
	case NullCompensation:
		return "null-compensation"
	case Hanging:
		return "hanging"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// OriginOp returns the op that op undoes: try for cancel, action for compensate and rollback, "" for
// every other op.
func OriginOp(op string) string {
	switch op {
	case OpCancel:
		return OpTry
	case OpCompensate, OpRollback:
		return OpAction
	}
	return ""
}

// Branch identifies one delivery of a branch operation. Build one per request with [FromRequest],
// [FromQuery] or [NewBranch]; it counts the barrier calls made with it (barrier_id "01", "02", ...), so it
// is not safe for concurrent use.
type Branch struct {
	TransType string
	Gid       string
	BranchID  string
	Op        string

	calls int // barrier calls made so far
}

// NewBranch returns a validated Branch. It returns an error matching [ErrInvalidBranch] naming each
// field that is empty, longer than DTM's column (trans_type and op 45 bytes, gid and branch_id 128) or
// not valid UTF-8.
func NewBranch(transType, gid, branchID, op string) (*Branch, error) {
	b := &Branch{TransType: transType, Gid: gid, BranchID: branchID, Op: op}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// FromQuery builds a Branch from the query parameters DTM adds to every branch call: trans_type, gid,
// branch_id and op. Errors are as for [NewBranch].
func FromQuery(q url.Values) (*Branch, error) {
	return NewBranch(q.Get("trans_type"), q.Get("gid"), q.Get("branch_id"), q.Get("op"))
}

// FromRequest builds a Branch from r's query string; see [FromQuery].
func FromRequest(r *http.Request) (*Branch, error) {
	if r == nil || r.URL == nil {
		return nil, fmt.Errorf("%w: no request", ErrInvalidBranch)
	}
	return FromQuery(r.URL.Query())
}

// Validate checks the fields as [NewBranch] does.
func (b *Branch) Validate() error {
	if b == nil {
		return fmt.Errorf("%w: nil branch", ErrInvalidBranch)
	}
	var missing, bad []string
	check := func(name, v string, limit int) {
		switch {
		case v == "":
			missing = append(missing, name)
		case len(v) > limit:
			bad = append(bad, fmt.Sprintf("%s longer than %d bytes", name, limit))
		case !utf8.ValidString(v):
			bad = append(bad, name+" not valid UTF-8")
		}
	}
	check("trans_type", b.TransType, maxTransType)
	check("gid", b.Gid, maxGid)
	check("branch_id", b.BranchID, maxBranchID)
	check("op", b.Op, maxOp)
	if len(missing) == 0 && len(bad) == 0 {
		return nil
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "missing "+strings.Join(missing, ", ")+
			" (DTM sends trans_type, gid, branch_id and op in the query string)")
	}
	parts = append(parts, bad...)
	return fmt.Errorf("%w: %s", ErrInvalidBranch, strings.Join(parts, "; "))
}

// String returns the branch for logs: "saga gid 01 action".
func (b *Branch) String() string {
	return b.TransType + " " + b.Gid + " " + b.BranchID + " " + b.Op
}

// nextBarrierID counts a barrier call and formats its number as DTM does ("%02d").
func (b *Branch) nextBarrierID() string {
	b.calls++
	if b.calls < 10 {
		return "0" + strconv.Itoa(b.calls)
	}
	return strconv.Itoa(b.calls)
}
