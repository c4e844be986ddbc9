package barrier

// A differential test of this barrier against dtmcli's (github.com/dtm-labs/client/dtmcli, the
// BranchBarrier that DTM users run): both are driven from the same branch-call query strings on the same
// table, with adversarial field values, in many orders of try/confirm/cancel and with every assignment of
// the two implementations to the deliveries. Mixing them must change nothing: every delivery makes the
// decision the all-dtmcli run makes, and the rows are dtmcli's, column for column.

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// verdict is what one delivery did.
type verdict string

const (
	ran      verdict = "ran"      // the business ran and committed
	skipped  verdict = "skipped"  // the barrier let it through without running the business
	rejected verdict = "rejected" // an error: the query was refused or the database refused the row
)

// impl is a barrier implementation under test.
type impl int

const (
	viaDTMCli impl = iota
	viaIdemkit
)

func (i impl) String() string { return [...]string{"dtmcli", "idemkit"}[i] }

// diffCase is one adversarial value of one branch field.
type diffCase struct {
	name  string
	field string // trans_type, gid, branch_id or op
	value string // for op: inserted in the middle of each op name
	// refused, when set, is the error this barrier answers every delivery with: a value dtmcli stores
	// mangled or cut on MySQL/MariaDB (its INSERT IGNORE turns the errors into warnings) and refuses on
	// PostgreSQL. dtmcli's deliveries then do what dtmcli alone would do, as if this barrier's had not
	// happened.
	refused string
}

// tccSequences are the orders of deliveries tried: every permutation of try, confirm and cancel, and
// repeats.
var tccSequences = [][]string{
	{OpTry, OpConfirm, OpCancel}, {OpTry, OpCancel, OpConfirm}, {OpConfirm, OpTry, OpCancel},
	{OpConfirm, OpCancel, OpTry}, {OpCancel, OpTry, OpConfirm}, {OpCancel, OpConfirm, OpTry},
	{OpTry, OpTry, OpCancel, OpCancel}, {OpCancel, OpCancel, OpTry},
}

func diffCases() []diffCase {
	long := strings.Repeat("g", 127)
	return []diffCase{
		{"plain", "gid", "plain-gid", ""},
		{"semicolon", "gid", "a;b", ""},
		{"crlf", "gid", "a\r\nb", ""},
		{"lf", "gid", "a\nb", ""},
		{"only semicolon", "gid", ";", ""},
		{"only crlf", "gid", "\r\n", ""},
		{"empty", "gid", "", ""},
		{"spaces", "gid", "  a b  ", ""},
		{"one space", "gid", " ", ""},
		{"unicode", "gid", "ünï-日本-😀-\u200b", ""},
		{"quotes", "gid", `it's "q" \ % _ ? $1`, ""},
		{"tab and nul", "gid", "a\tb\x00c", ""},
		{"invalid utf8", "gid", "a\xffb", "gid not valid UTF-8"},
		{"128 chars", "gid", long + "x", ""},
		{"129 chars", "gid", long + "xy", "gid longer than 128 characters"},
		{"128 chars after stripping", "gid", long[:60] + ";\r\n" + long[60:] + "x", ""},
		{"128 CJK chars", "gid", strings.Repeat("日", 128), ""},
		{"129 CJK chars", "gid", strings.Repeat("日", 129), "gid longer than 128 characters"},
		{"branch semicolon", "branch_id", "0;1", ""},
		{"branch crlf", "branch_id", "01\r\n", ""},
		{"branch only semicolon", "branch_id", ";", ""},
		{"branch unicode", "branch_id", "ü1", ""},
		{"branch 129 chars", "branch_id", strings.Repeat("1", 129), "branch_id longer than 128 characters"},
		{"op 46 chars", "op", strings.Repeat("o", 44), "op longer than 45 characters"},
		{"op semicolon", "op", ";", ""},
		{"op crlf", "op", "\r\n", ""},
		{"trans_type semicolon", "trans_type", "tc;c", ""},
	}
}

// diffRun is one sequence of deliveries with one assignment of implementations.
type diffRun struct {
	c        diffCase
	seq      []string
	impls    []impl
	gid, bid string // the branch's gid and branch_id as sent (before any parsing)
}

// query returns the query string DTM sends for op in r.
func (r *diffRun) query(op string) url.Values {
	transType := TransTCC
	if op == OpAction || op == OpCompensate {
		transType = TransSaga
	}
	if r.c.field == "trans_type" {
		transType = r.c.value
	}
	if r.c.field == "op" {
		op = op[:2] + r.c.value + op[2:]
	}
	q := url.Values{"trans_type": {transType}, "gid": {r.gid}, "branch_id": {r.bid}, "op": {op},
		"dtm": {"http://127.0.0.1:1/api/dtmsvr"}}
	// Round-trip through the wire form, as a handler receives it.
	parsed, err := url.ParseQuery(q.Encode())
	if err != nil {
		panic(err)
	}
	return parsed
}

// differ runs deliveries of both implementations on one barrier table.
type differ struct {
	t      *testing.T
	db     *gorm.DB
	sqlDB  *sql.DB
	g      *Gorm
	dbType string // dtmcli's DBType; "" runs idemkit only (SQLite, which dtmcli does not support)
	ledger string // the business's table: one row per run of the business
}

func newDiffer(t *testing.T, db *gorm.DB, dbType string) *differ {
	t.Helper()
	d := &differ{t: t, db: db, g: newGormTable(t, db), dbType: dbType, ledger: testsvc.Name("ledger_")}
	var err error
	if d.sqlDB, err = db.DB(); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, d.ledger)
	if err := db.Exec("CREATE TABLE " + d.ledger + " (run varchar(64) NOT NULL, step int NOT NULL, op varchar(45) NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	return d
}

// deliver runs one delivery of op with implementation i and says what it did.
func (d *differ) deliver(run *diffRun, runID string, step int, op string, i impl) (verdict, string) {
	q := run.query(op)
	insert := "INSERT INTO " + d.ledger + " (run, step, op) VALUES (?, ?, ?)"
	didRun := false
	var err error
	switch i {
	case viaDTMCli:
		var bb *dtmcli.BranchBarrier
		if bb, err = dtmcli.BarrierFromQuery(q); err == nil {
			bb.DBType, bb.BarrierTableName = d.dbType, d.g.Table()
			if d.dbType == dtmcli.DBTypePostgres {
				insert = "INSERT INTO " + d.ledger + " (run, step, op) VALUES ($1, $2, $3)"
			}
			err = bb.CallWithDB(d.sqlDB, func(tx *sql.Tx) error {
				didRun = true
				_, err := tx.Exec(insert, runID, step, op)
				return err
			})
		}
	case viaIdemkit:
		var b *Branch
		if b, err = FromQuery(q); err == nil {
			err = d.g.Transaction(context.Background(), b, func(tx *gorm.DB) error {
				didRun = true
				return tx.Exec(insert, runID, step, op).Error
			})
		}
	}
	switch {
	case err != nil:
		return rejected, err.Error()
	case didRun:
		return ran, ""
	}
	return skipped, ""
}

// barrierRow is one row of the barrier table, without its id and times.
type barrierRow struct{ TransType, Gid, BranchID, Op, BarrierID, Reason string }

// rows returns the barrier rows and the ledger of a run, which owns the gid (branch_id, op and
// trans_type cases) or the branch_id (gid cases) it was given.
func (d *differ) rows(run *diffRun, runID string) ([]barrierRow, []string) {
	d.t.Helper()
	col, v := "branch_id", run.bid
	if run.c.field == "branch_id" {
		col, v = "gid", run.gid
	}
	var rows []barrierRow
	if err := d.db.Raw("SELECT trans_type, gid, branch_id, op, barrier_id, reason FROM "+d.g.Table()+
		" WHERE "+col+" = ? ORDER BY id", v).Scan(&rows).Error; err != nil {
		d.t.Fatal(err)
	}
	for i := range rows { // the run's own ids are not part of the comparison
		if run.c.field != "gid" {
			rows[i].Gid = "*"
		}
		if run.c.field != "branch_id" {
			rows[i].BranchID = "*"
		}
	}
	// Nor is the order of the rows a delivery inserted: dtmcli's origin row first, this barrier's on
	// MySQL/MariaDB in the unique key's order (a cancel's row before its try row; see Gorm.Enter).
	slices.SortFunc(rows, func(a, b barrierRow) int {
		return cmp.Or(strings.Compare(a.TransType, b.TransType), strings.Compare(a.Gid, b.Gid),
			strings.Compare(a.BranchID, b.BranchID), strings.Compare(a.Op, b.Op),
			strings.Compare(a.BarrierID, b.BarrierID), strings.Compare(a.Reason, b.Reason))
	})
	var ledger []string
	if err := d.db.Raw("SELECT op FROM "+d.ledger+" WHERE run = ? ORDER BY step", runID).Scan(&ledger).Error; err != nil {
		d.t.Fatal(err)
	}
	return rows, ledger
}

// assignments returns every assignment of the two implementations to n deliveries, all-dtmcli first.
func assignments(n int) [][]impl {
	var out [][]impl
	for mask := range 1 << n {
		a := make([]impl, n)
		for i := range n {
			a[i] = impl(mask >> i & 1)
		}
		out = append(out, a)
	}
	return out
}

// diffResult is what a run did, delivery by delivery, and what it left.
type diffResult struct {
	verdicts []verdict
	rows     []barrierRow
	ledger   []string
}

func (r diffResult) String() string {
	return fmt.Sprintf("verdicts %v, rows %+v, business runs %v", r.verdicts, r.rows, r.ledger)
}

func (r diffResult) equal(o diffResult) bool {
	return slices.Equal(r.verdicts, o.verdicts) && slices.Equal(r.rows, o.rows) && slices.Equal(r.ledger, o.ledger)
}

// play runs seq with the implementations impls on a fresh branch and returns what it did, with the
// errors met.
func (d *differ) play(c diffCase, seq []string, impls []impl, n *int) (diffResult, []string) {
	*n++
	run := &diffRun{c: c, seq: seq, impls: impls, gid: c.value, bid: fmt.Sprintf("b%d", *n)}
	if c.field != "gid" {
		run.gid = fmt.Sprintf("gid-%d", *n)
	}
	if c.field == "branch_id" {
		run.bid = c.value
	}
	runID := fmt.Sprintf("r%d", *n)
	var got diffResult
	var errs []string
	for step, op := range seq {
		v, msg := d.deliver(run, runID, step, op, impls[step])
		got.verdicts = append(got.verdicts, v)
		errs = append(errs, msg)
	}
	got.rows, got.ledger = d.rows(run, runID)
	return got, errs
}

// TestDifferentialDTMCli drives dtmcli's barrier and this one with the same adversarial queries on the
// same table, in every order of try/confirm/cancel (and saga action/compensate) tried and every
// assignment of the implementations to the deliveries, on MariaDB and PostgreSQL: each run must do what the all-dtmcli run does. Where this
// barrier refuses a value (diffCase.refused), it must refuse it every time and leave dtmcli's deliveries
// to do what they would do alone. On SQLite, which dtmcli does not support, this barrier alone must do
// what dtmcli did on MariaDB.
func TestDifferentialDTMCli(t *testing.T) {
	if testing.Short() {
		t.Skip("the differential test makes thousands of transactions")
	}
	mariadb := map[string]diffResult{} // case/sequence → the all-dtmcli result on MariaDB
	for _, dc := range []struct {
		name, dbType string
		open         func(testing.TB, *gorm.Config) *gorm.DB
	}{{"mysql", dtmcli.DBTypeMysql, testsvc.MySQL}, {"postgres", dtmcli.DBTypePostgres, testsvc.Postgres}, {"sqlite", "", testsvc.SQLite}} {
		t.Run(dc.name, func(t *testing.T) {
			d := newDiffer(t, dc.open(t, nil), dc.dbType)
			n := 0
			for _, c := range diffCases() {
				refs := map[string]diffResult{}
				// reference returns what dtmcli alone does with seq on this database.
				reference := func(seq []string) diffResult {
					key := strings.Join(seq, ",")
					if dc.dbType == "" {
						if c.refused != "" {
							return diffResult{}
						}
						r, ok := mariadb[c.name+"/"+key]
						if !ok {
							t.Fatalf("%s %v: no MariaDB reference", c.name, seq)
						}
						return r
					}
					if r, ok := refs[key]; ok {
						return r
					}
					r, _ := d.play(c, seq, slices.Repeat([]impl{viaDTMCli}, len(seq)), &n)
					refs[key] = r
					if dc.dbType == dtmcli.DBTypeMysql {
						mariadb[c.name+"/"+key] = r
					}
					return r
				}
				for _, seq := range slices.Concat(tccSequences, sagaSequences) {
					reference(seq)
					impls := assignments(len(seq))
					if dc.dbType == "" {
						impls = [][]impl{slices.Repeat([]impl{viaIdemkit}, len(seq))}
					}
					for _, a := range impls {
						want := reference(seq)
						if c.refused != "" {
							// dtmcli's deliveries do what they do alone; ours are all refused.
							var theirs []string
							for i, op := range seq {
								if a[i] == viaDTMCli {
									theirs = append(theirs, op)
								}
							}
							alone := reference(theirs)
							want = diffResult{rows: alone.rows, ledger: alone.ledger}
							for _, i := range a {
								if i == viaIdemkit {
									want.verdicts = append(want.verdicts, rejected)
								} else {
									want.verdicts = append(want.verdicts, alone.verdicts[0])
									alone.verdicts = alone.verdicts[1:]
								}
							}
						}
						got, errs := d.play(c, seq, a, &n)
						desc := fmt.Sprintf("%s %v by %v", c.name, seq, a)
						if !got.equal(want) {
							t.Errorf("%s: %s; want %s (errors: %q)", desc, got, want, errs)
						}
						for i, msg := range errs {
							if a[i] == viaIdemkit && c.refused != "" && !strings.Contains(msg, c.refused) {
								t.Errorf("%s: delivery %d refused with %q, want %q", desc, i, msg, c.refused)
							}
						}
						// The reservation: a cancel after a try that ran must run too.
						if i := slices.Index(seq, OpCancel); seq[0] == OpTry && got.verdicts[0] == ran && got.verdicts[i] == skipped {
							t.Errorf("%s: the try ran and the cancel did not (%v): the reservation leaks (errors: %q)", desc, got.verdicts, errs)
						}
					}
				}
			}
			t.Logf("%d runs", n)
		})
	}
}
