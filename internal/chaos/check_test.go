//go:build unix

package chaos

import (
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/memory"
)

// world is a consistent outcome of a tiny run, for the checker's unit tests: an Execute-mode key
// answered twice, a Tx-mode key, an HTTP key, a rejected overdraft, a mark (TxMark) key answered
// fresh and then as a duplicate, a mark key refused once for lack of funds that took effect on a
// retry, and three Mark-mode (guard.Mark) keys: one that failed retryably at fence 1 and took effect
// at fence 2 (after a stall whose retry was answered as a duplicate), a rejected overdraft whose
// duplicate got ErrDuplicate, and one whose worker was killed inside the function, marked without
// its transfer.
type world struct {
	in       CheckInput
	recs     []chkRecord
	effects  []chkEffect
	gates    map[string]chkGate
	balances map[int]int64
}

func encodeStoredHTTP(status int, body string) []byte {
	b := []byte{1, 0}
	b = binary.AppendUvarint(b, uint64(status))
	b = binary.AppendUvarint(b, 1)
	for _, s := range []string{"Content-Type", "application/json"} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return append(b, body...)
}

func newWorld() *world {
	v1 := string(bizValue("e-1", 1, 1, 10))
	v2 := string(bizValue("t-1", 2, 1, 5))
	v3 := string(bizValue("h-1", 3, 2, 7))
	v4 := string(bizValue("m-1", 4, 1, 3))
	v6 := string(bizValue("k-1", 6, 2, 6))
	over := Op{Src: 1, Dst: 2, Amount: 1 << 40}
	w := &world{
		in: CheckInput{Accounts: 2, InitialBalance: 1000, Answers: []Answer{
			{Seq: 1, Path: PathExec, Key: "e-1", Op: Op{1, 2, 10}, Class: ClassOK, Value: v1},
			{Seq: 2, Path: PathExec, Key: "e-1", Op: Op{1, 2, 10}, Class: ClassInFlight},
			{Seq: 3, Path: PathExec, Key: "e-1", Op: Op{1, 2, 10}, Class: ClassReplay, Value: v1},
			{Seq: 4, Path: PathTx, Key: "t-1", Op: Op{2, 1, 5}, Class: ClassOK, Value: v2},
			{Seq: 5, Path: PathHTTP, Key: "h-1", Op: Op{1, 2, 7}, Class: ClassUnavailable},
			{Seq: 6, Path: PathHTTP, Key: "h-1", Op: Op{1, 2, 7}, Class: ClassOK, Status: 201, Value: v3},
			{Seq: 7, Path: PathExec, Key: "e-2", Op: over, Class: ClassRejected, Value: "insufficient funds"},
			{Seq: 8, Path: PathExec, Key: "e-2", Op: over, Class: ClassRejected, Value: "insufficient funds", Replayed: true},
			{Seq: 9, Path: PathMark, Key: "m-1", Op: Op{2, 1, 3}, Class: ClassOK, Value: v4},
			{Seq: 10, Path: PathMark, Key: "m-1", Op: Op{2, 1, 3}, Class: ClassDuplicate},
			{Seq: 11, Path: PathMark, Key: "m-2", Op: Op{1, 2, 4}, Class: ClassRejected, Value: "insufficient funds"},
			{Seq: 12, Path: PathMark, Key: "m-2", Op: Op{1, 2, 4}, Class: ClassTransport},
			{Seq: 13, Path: PathMark, Key: "m-2", Op: Op{1, 2, 4}, Class: ClassDuplicate},
			{Seq: 14, Path: PathMarkExec, Key: "k-1", Op: Op{2, 1, 6}, Class: ClassFailed, Fence: 1},
			{Seq: 15, Path: PathMarkExec, Key: "k-1", Op: Op{2, 1, 6}, Class: ClassOK, Value: v6, Fence: 2},
			{Seq: 16, Path: PathMarkExec, Key: "k-1", Op: Op{2, 1, 6}, Class: ClassDuplicate},
			{Seq: 17, Path: PathMarkExec, Key: "k-2", Op: over, Class: ClassRejected, Value: "insufficient funds"},
			{Seq: 18, Path: PathMarkExec, Key: "k-2", Op: over, Class: ClassDuplicate},
			{Seq: 19, Path: PathMarkExec, Key: "k-3", Op: Op{1, 2, 8}, Class: ClassTransport},
			{Seq: 20, Path: PathMarkExec, Key: "k-3", Op: Op{1, 2, 8}, Class: ClassDuplicate},
		}, Events: []Event{
			{Word: "EVENT", Kind: "fenced", Path: PathHTTP, Key: "h-1", Fence: 1},
		}, Faults: []FaultRecord{
			{Kind: FaultWorkerKill, Injected: true, Path: PathMarkExec, Key: "k-3"},
			{Kind: FaultWorkerStall, Injected: true, Path: PathMarkExec, Key: "k-1", StaleFence: 2, TakeoverClass: ClassDuplicate, StaleOutcome: "applied"},
		}},
		recs: []chkRecord{
			{scope: "chaos/exec", key: "e-1", status: "SUCCEEDED", fence: 1, response: []byte(v1)},
			{scope: "chaos/tx", key: "t-1", status: "SUCCEEDED", fence: 1, response: []byte(v2)},
			{scope: "POST /pay", key: "h-1", status: "SUCCEEDED", fence: 2, response: encodeStoredHTTP(201, v3)},
			{scope: "chaos/exec", key: "e-2", status: "REJECTED", fence: 1, errText: "insufficient funds"},
			{scope: "chaos/mark", key: "m-1", status: "SUCCEEDED", fence: 1},
			{scope: "chaos/mark", key: "m-2", status: "SUCCEEDED", fence: 2},
			{scope: "chaos/markexec", key: "k-1", status: "SUCCEEDED", fence: 2},
			{scope: "chaos/markexec", key: "k-2", status: "REJECTED", fence: 1, errText: "insufficient funds"},
			{scope: "chaos/markexec", key: "k-3", status: "SUCCEEDED", fence: 1},
		},
		effects: []chkEffect{
			{id: 1, key: "e-1", path: PathExec, fence: 1, src: 1, dst: 2, amount: 10},
			{id: 2, key: "t-1", path: PathTx, fence: 1, src: 2, dst: 1, amount: 5},
			{id: 3, key: "h-1", path: PathHTTP, fence: 2, src: 1, dst: 2, amount: 7},
			{id: 4, key: "m-1", path: PathMark, fence: 1, src: 2, dst: 1, amount: 3},
			{id: 5, key: "m-2", path: PathMark, fence: 2, src: 1, dst: 2, amount: 4},
			{id: 6, key: "k-1", path: PathMarkExec, fence: 2, src: 2, dst: 1, amount: 6},
		},
		gates:    map[string]chkGate{"e-1": {fence: 1, ledgerID: 1}, "h-1": {fence: 2, ledgerID: 3}, "k-1": {fence: 2, ledgerID: 6}},
		balances: map[int]int64{1: 1000 - 10 + 5 - 7 + 3 - 4 + 6, 2: 1000 + 10 - 5 + 7 - 3 + 4 - 6},
	}
	return w
}

func (w *world) evaluate() *CheckResult {
	return evaluate(w.in, w.recs, w.effects, w.gates, w.balances)
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(w *world)
		want   []string // violation kinds expected (all of them, in any order, duplicates ignored)
	}{
		{"consistent", func(*world) {}, nil},
		{"duplicate effect", func(w *world) {
			w.effects = append(w.effects, chkEffect{id: 4, key: "t-1", path: PathTx, fence: 1, src: 2, dst: 1, amount: 5})
			w.balances[2] -= 5
			w.balances[1] += 5
		}, []string{ViolationDuplicateEffect, ViolationMissingEffect, ViolationLostWrite, ViolationNotConserved}},
		{"duplicate record", func(w *world) {
			w.recs = append(w.recs, w.recs[1])
		}, []string{ViolationDuplicateRecord}},
		{"success without effect", func(w *world) {
			w.effects = w.effects[1:]
			w.balances[1] += 10
			w.balances[2] -= 10
			delete(w.gates, "e-1")
		}, []string{ViolationMissingEffect, ViolationNotConserved}},
		{"mark committed without its effect", func(w *world) {
			w.effects = append(w.effects[:3], w.effects[5])
			w.balances = map[int]int64{1: 1000 - 10 + 5 - 7 + 6, 2: 1000 + 10 - 5 + 7 - 6}
		}, []string{ViolationLostWrite, ViolationNotConserved}},
		{"mark effect without its mark", func(w *world) {
			w.recs = w.recs[:5]
		}, []string{ViolationLostWrite, ViolationMissingEffect, ViolationNotConserved}},
		{"mark ran twice", func(w *world) {
			w.in.Answers[9].Class, w.in.Answers[9].Value = ClassOK, w.in.Answers[8].Value
		}, []string{ViolationDuplicateEffect}},
		{"mark answered with a replay", func(w *world) {
			w.in.Answers[9].Class, w.in.Answers[9].Value = ClassReplay, w.in.Answers[8].Value
		}, []string{ViolationUnexpectedAnswer}},
		{"mark effect and mark of different attempts", func(w *world) {
			w.recs[5].fence = 3
		}, []string{ViolationLostWrite}},
		{"mark never settled", func(w *world) {
			w.in.Answers = append(w.in.Answers, Answer{Seq: 14, Path: PathMark, Key: "m-3", Op: Op{2, 1, 3}, Class: ClassInFlight})
		}, []string{ViolationUnsettled}},
		{"Mark mode: transfer applied twice", func(w *world) {
			w.effects = append(w.effects, chkEffect{id: 7, key: "k-1", path: PathMarkExec, fence: 1, src: 2, dst: 1, amount: 6})
			w.balances[2] -= 6
			w.balances[1] += 6
		}, []string{ViolationDuplicateEffect, ViolationMissingEffect, ViolationNotConserved}},
		{"Mark mode: a duplicate of a marked key ran", func(w *world) {
			w.in.Answers[15].Class, w.in.Answers[15].Value = ClassOK, w.in.Answers[14].Value
		}, []string{ViolationDuplicateEffect}},
		{"Mark mode: answered with a replay", func(w *world) {
			w.in.Answers[15].Class, w.in.Answers[15].Value = ClassReplay, w.in.Answers[14].Value
		}, []string{ViolationUnexpectedAnswer}},
		{"Mark mode: marked without its transfer, nothing explains it", func(w *world) {
			w.in.Faults = w.in.Faults[1:]
			w.in.Answers[18].Class = ClassInFlight
		}, []string{ViolationMissingEffect}},
		{"Mark mode: success answered for a mark without its transfer", func(w *world) {
			w.in.Answers[18].Class, w.in.Answers[18].Value = ClassOK, string(bizValue("k-3", 7, 1, 8))
		}, []string{ViolationMissingEffect}},
		{"Mark mode: rejection differs from the stored one", func(w *world) {
			w.recs[7].errText = "idemkit: something else"
		}, []string{ViolationInconsistentAnswer}},
		{"Mark mode: rejection answered for a SUCCEEDED mark", func(w *world) {
			w.recs[7].status, w.recs[7].errText = "SUCCEEDED", ""
		}, []string{ViolationInconsistentAnswer, ViolationMissingEffect}},
		{"Mark mode: key left FAILED", func(w *world) {
			w.recs[6].status = "FAILED"
		}, []string{ViolationInconsistentAnswer, ViolationNotConserved}},
		{"Mark mode: transfer under a fence above its mark's", func(w *world) {
			w.effects[5].fence = 3
		}, []string{ViolationLostWrite, ViolationInconsistentAnswer}},
		{"Mark mode: a frozen mark taken over", func(w *world) {
			w.in.Faults[1].TakeoverClass = ClassOK
		}, []string{ViolationInconsistentAnswer}},
		{"lost write: record failed after an effect", func(w *world) {
			w.recs[0].status, w.recs[0].response = "FAILED", nil
		}, []string{ViolationLostWrite, ViolationInconsistentAnswer}},
		{"two different results", func(w *world) {
			w.in.Answers[2].Value = string(bizValue("e-1", 9, 1, 10))
		}, []string{ViolationInconsistentAnswer}},
		{"HTTP answer differs from the stored response", func(w *world) {
			w.recs[2].response = encodeStoredHTTP(200, w.in.Answers[5].Value)
		}, []string{ViolationInconsistentAnswer, ViolationLostWrite}},
		{"rejection inconsistent", func(w *world) {
			w.recs[3].status = "SUCCEEDED"
		}, []string{ViolationInconsistentAnswer}},
		{"money created", func(w *world) {
			w.balances[1]++
		}, []string{ViolationNotConserved}},
		{"stuck and unsettled", func(w *world) {
			w.in.Answers = append(w.in.Answers, Answer{Seq: 9, Path: PathExec, Key: "e-3", Op: Op{2, 1, 3}, Class: ClassUnavailable})
			w.recs = append(w.recs, chkRecord{scope: "chaos/exec", key: "e-3", status: "PROCESSING", fence: 1})
		}, []string{ViolationStuckProcessing, ViolationUnsettled}},
		{"stale write applied", func(w *world) {
			w.in.Events = append(w.in.Events, Event{Word: "EVENT", Kind: "stale", Path: PathExec, Key: "e-1", Fence: 1})
		}, []string{ViolationStaleWrite}},
		{"stall whose frozen attempt wrote", func(w *world) {
			w.in.Faults = append(w.in.Faults, FaultRecord{Kind: FaultWorkerStall, Injected: true, Key: "h-1", StaleFence: 2, TakeoverClass: ClassOK})
		}, []string{ViolationStaleWrite}},
		{"fenced finish left the record behind", func(w *world) {
			w.in.Events[0].Fence = 2
		}, []string{ViolationFenced}},
		{"orphan effect", func(w *world) {
			w.effects = append(w.effects, chkEffect{id: 9, key: "x-1", path: PathExec, fence: 1, src: 1, dst: 2})
		}, []string{ViolationOrphan, ViolationNotConserved}},
		{"unexpected answer", func(w *world) {
			w.in.Answers[1].Class = ClassMismatch
		}, []string{ViolationUnexpectedAnswer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			tc.break_(w)
			res := w.evaluate()
			var got []string
			for _, v := range res.Violations {
				if !slices.Contains(got, v.Kind) {
					got = append(got, v.Kind)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("violation kinds %v, want %v; violations:\n%v", got, want, res.Violations)
			}
		})
	}
}

// TestEvaluateMarkFigures checks the Mark-mode figures of the consistent world: one key hit by a
// kill, marked without its transfer, and the other two counted as succeeded and rejected.
func TestEvaluateMarkFigures(t *testing.T) {
	res := newWorld().evaluate()
	if res.MarkKilled != 1 || res.MarkLost != 1 || res.SucceededKeys != 6 || res.RejectedKeys != 2 {
		t.Errorf("mark killed %d, lost %d, succeeded %d, rejected %d; want 1, 1, 6, 2", res.MarkKilled, res.MarkLost, res.SucceededKeys, res.RejectedKeys)
	}
}

// TestDecodeStoredHTTPReadsHTTPX checks the checker's own decoder against what the httpx middleware
// really stores, so a change of the stored format cannot make the checker blind.
func TestDecodeStoredHTTPReadsHTTPX(t *testing.T) {
	store := memory.NewStore()
	g, err := idemkit.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /pay", httpx.Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Not-Replayed", "1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"op":"h-1"}`))
	})))
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"src":1}`))
	req.Header.Set("Idempotency-Key", "h-1")
	mux.ServeHTTP(httptest.NewRecorder(), req)
	rec, err := store.Get(context.Background(), checkScopes[PathHTTP], "h-1")
	if err != nil {
		t.Fatalf("no record under the scope the checker expects (%q): %v", checkScopes[PathHTTP], err)
	}
	status, body, err := decodeStoredHTTP(rec.Response)
	if err != nil || status != http.StatusCreated || string(body) != `{"op":"h-1"}` {
		t.Fatalf("decoded %d %q %v, want 201 and the body", status, body, err)
	}
	for _, bad := range [][]byte{nil, {2, 0}, {1, 1, 201, 1}, {1, 0, 201, 1, 0xff}} {
		if _, _, err := decodeStoredHTTP(bad); err == nil {
			t.Errorf("decodeStoredHTTP(%v) accepted a malformed response", bad)
		}
	}
}

func TestParseFaults(t *testing.T) {
	if fs, err := ParseFaults("all"); err != nil || len(fs) != 4 {
		t.Errorf("all: %v %v", fs, err)
	}
	if fs, err := ParseFaults("none"); err != nil || fs == nil || len(fs) != 0 {
		t.Errorf("none: %v %v", fs, err)
	}
	if fs, err := ParseFaults("redis_restart, worker_stall"); err != nil || !slices.Equal(fs, []FaultKind{FaultRedisRestart, FaultWorkerStall}) {
		t.Errorf("list: %v %v", fs, err)
	}
	if _, err := ParseFaults("redis"); err == nil {
		t.Error("an unknown fault was accepted")
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := (*Config)(nil).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Duration != DefaultDuration || c.Workers != DefaultWorkers || len(c.Faults) != 4 || c.Seed == 0 || c.FlakyRate != DefaultFlakyRate {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.Database != MariaDB || !slices.Contains(c.Faults, FaultMariaDBRestart) {
		t.Errorf("default database %q, faults %v; want MariaDB's", c.Database, c.Faults)
	}
	pg, err := (&Config{Database: Postgres}).withDefaults()
	if err != nil || !slices.Equal(pg.Faults, AllFaultsOn(Postgres)) || !slices.Contains(pg.Faults, FaultPostgresRestart) {
		t.Errorf("a run on PostgreSQL gets faults %v (%v); want its own restart", pg.Faults, err)
	}
	if fs, err := ParseFaults("postgres_restart"); err != nil || !slices.Equal(fs, []FaultKind{FaultPostgresRestart}) {
		t.Errorf("postgres_restart: %v %v", fs, err)
	}
	for _, bad := range []Config{{Workers: 1}, {Lease: -1}, {FlakyRate: 1}, {Sabotage: "x"}, {Database: "sqlite"},
		{Faults: []FaultKind{FaultPostgresRestart}}, {Database: Postgres, Faults: []FaultKind{FaultMariaDBRestart}},
		{Database: Postgres, Sabotage: SabotageDropUniqueIndex}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	orig := Config{Duration: 0}
	_, _ = orig.withDefaults()
	if orig.Duration != 0 {
		t.Error("withDefaults changed the caller's struct")
	}
}
