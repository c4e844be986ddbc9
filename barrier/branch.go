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

// Column limits of DTM's barrier table, in characters (varchar lengths count characters on MySQL/MariaDB
// and PostgreSQL).
const (
	maxTransType = 45
	maxGid       = 128
	maxBranchID  = 128
	maxOp        = 45
)

// dtmEscaped are the characters dtmcli removes from the branch fields it reads from a query string
// (dtmimp.Escape, used by BarrierFromQuery), and DTM's HTTP API removes from the gids it is given.
const dtmEscaped = ";\r\n"

// escape removes dtmEscaped from s, as dtmcli's BarrierFromQuery does.
func escape(s string) string {
	if !strings.ContainsAny(s, dtmEscaped) {
		return s
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ { // bytes, not runes: invalid UTF-8 stays as it is
		if c := s[i]; c != ';' && c != '\r' && c != '\n' {
			out = append(out, c)
		}
	}
	return string(out)
}

// Errors returned by the barrier. Compare with errors.Is.
var (
	// ErrInvalidBranch: a branch field is missing, too long, not valid UTF-8, or contains a character
	// that dtmcli would remove from it (';', CR, LF; see [NewBranch]).
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
// field that is
//   - empty;
//   - not valid UTF-8, or longer than DTM's column in characters (trans_type and op 45, gid and
//     branch_id 128): on MySQL/MariaDB dtmcli's INSERT IGNORE would store such a value mangled or cut
//     (two gids sharing their first 128 characters would share rows) and on PostgreSQL it fails;
//   - or contains ';', CR or LF. dtmcli removes them from a branch read from a query string
//     (BarrierFromQuery) but keeps them in one built directly (BarrierFrom, dtmgrpc), and DTM's HTTP API
//     removes them from gids, so such a value has no single row key that every DTM client agrees on.
//     [FromQuery] removes them first, exactly as dtmcli does.
//
// Any other character is stored as given: the database compares the values (on MySQL/MariaDB with
// the table's collation, as it does for dtmcli).
func NewBranch(transType, gid, branchID, op string) (*Branch, error) {
	b := &Branch{TransType: transType, Gid: gid, BranchID: branchID, Op: op}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// FromQuery builds a Branch from the query parameters DTM adds to every branch call: trans_type, gid,
// branch_id and op. Like dtmcli's BarrierFromQuery it removes ';', CR and LF from each of them (so a
// branch call handled here and one handled by dtmcli use the same barrier rows and Redis keys), then
// validates them as [NewBranch] does.
func FromQuery(q url.Values) (*Branch, error) {
	return NewBranch(escape(q.Get("trans_type")), escape(q.Get("gid")), escape(q.Get("branch_id")), escape(q.Get("op")))
}

// FromRequest builds a Branch from r's query string; see [FromQuery].
func FromRequest(r *http.Request) (*Branch, error) {
	if r == nil || r.URL == nil {
		return nil, fmt.Errorf("%w: no request", ErrInvalidBranch)
	}
	return FromQuery(r.URL.Query())
}

// ValidateGid checks a gid as [NewBranch] does: not empty, valid UTF-8, at most 128 characters, without
// ';', CR or LF. Code that chooses gids (an initiator) can call it so that every branch of the
// transaction is accepted. It returns an error matching [ErrInvalidBranch].
func ValidateGid(gid string) error {
	if msg := checkField("gid", gid, maxGid); msg != "" {
		return fmt.Errorf("%w: %s", ErrInvalidBranch, msg)
	}
	return nil
}

// checkField returns what is wrong with a branch field, or "".
func checkField(name, v string, limit int) string {
	switch {
	case v == "":
		return "missing " + name
	case !utf8.ValidString(v):
		return name + " not valid UTF-8"
	case utf8.RuneCountInString(v) > limit:
		return fmt.Sprintf("%s longer than %d characters", name, limit)
	case strings.ContainsAny(v, dtmEscaped):
		return fmt.Sprintf("%s %q contains ';', CR or LF, which dtmcli removes from query strings but not "+
			"elsewhere (and DTM's HTTP API removes from gids): build the branch with FromQuery, or choose "+
			"another value", name, v)
	}
	return ""
}

// Validate checks the fields as [NewBranch] does.
func (b *Branch) Validate() error {
	if b == nil {
		return fmt.Errorf("%w: nil branch", ErrInvalidBranch)
	}
	var missing, bad []string
	for _, f := range []struct {
		name, v string
		limit   int
	}{{"trans_type", b.TransType, maxTransType}, {"gid", b.Gid, maxGid}, {"branch_id", b.BranchID, maxBranchID}, {"op", b.Op, maxOp}} {
		switch msg := checkField(f.name, f.v, f.limit); {
		case msg == "":
		case f.v == "":
			missing = append(missing, f.name)
		default:
			bad = append(bad, msg)
		}
	}
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
