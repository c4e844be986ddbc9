package bench

import (
	"slices"
	"time"
)

// Summary aggregates the rounds of one variant at one concurrency.
type Summary struct {
	Variant string
	Conc    int
	Rounds  int
	RPS     []float64 // per round
	// Median, Min and Max of RPS.
	Median, Min, Max float64
	P50, P99         time.Duration // over every request of every round
	// Per request, over all rounds.
	RedisCmds, RedisTrips, RedisEvals, RedisScripts float64
	SQLStmts, SQLPrepares, SQLBegins                float64
	Allocs, AllocBytes                              float64
	// CPU microseconds per request of this process, redis-server and mariadbd, and InnoDB fsyncs
	// per request (machine-wide figures, see ServerStats).
	GoCPU, RedisCPU, MariaDBCPU, Fsyncs float64
	Errors                              int64
	FirstError                          string
}

// Summarize groups samples by (concurrency, variant), in the order they first appear.
func Summarize(samples []Sample) []Summary {
	type k struct {
		v string
		c int
	}
	idx := map[k]int{}
	var out []Summary
	hists := map[k]*Hist{}
	totals := map[k]*Sample{}
	for _, s := range samples {
		key := k{s.Variant, s.Conc}
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			out = append(out, Summary{Variant: s.Variant, Conc: s.Conc})
			hists[key] = NewHist()
			totals[key] = &Sample{}
		}
		sm := &out[i]
		sm.Rounds++
		sm.RPS = append(sm.RPS, s.RPS())
		sm.Errors += s.Errors
		if sm.FirstError == "" {
			sm.FirstError = s.FirstError
		}
		hists[key].Merge(HistFromSparse(s.Hist))
		t := totals[key]
		t.Ops += s.Ops
		t.Counts = add(t.Counts, s.Counts)
		t.Allocs += s.Allocs
		t.AllocBytes += s.AllocBytes
		t.Server = addServer(t.Server, s.Server)
	}
	for key, i := range idx {
		sm := &out[i]
		sm.Median, sm.Min, sm.Max = MedianMinMax(sm.RPS)
		h := hists[key]
		sm.P50, sm.P99 = h.Quantile(0.5), h.Quantile(0.99)
		t := totals[key]
		sm.RedisCmds, sm.RedisTrips, sm.RedisEvals = per(t.Counts.Redis.Commands, t.Ops), per(t.Counts.Redis.RoundTrips, t.Ops), per(t.Counts.Redis.Evals, t.Ops)
		sm.RedisScripts = per(t.Counts.Redis.Scripts, t.Ops)
		sm.SQLStmts, sm.SQLPrepares, sm.SQLBegins = per(t.Counts.SQL.Statements, t.Ops), per(t.Counts.SQL.Prepares, t.Ops), per(t.Counts.SQL.Begins, t.Ops)
		sm.Allocs, sm.AllocBytes = per(int64(t.Allocs), t.Ops), per(int64(t.AllocBytes), t.Ops)
		if t.Ops > 0 {
			n := float64(t.Ops)
			sm.GoCPU, sm.RedisCPU, sm.MariaDBCPU = 1e6*t.Server.SelfCPU/n, 1e6*t.Server.RedisCPU/n, 1e6*t.Server.MariaDBCPU/n
			sm.Fsyncs = float64(t.Server.LogFsyncs) / n
		}
	}
	return out
}

func addServer(a, b ServerStats) ServerStats {
	return ServerStats{a.SelfCPU + b.SelfCPU, a.RedisCPU + b.RedisCPU, a.MariaDBCPU + b.MariaDBCPU,
		a.LogFsyncs + b.LogFsyncs, a.RowLockWaits + b.RowLockWaits, a.RowLockTimeMs + b.RowLockTimeMs}
}

func add(a, b Counts) Counts {
	return Counts{
		SQL:  addSQL(a.SQL, b.SQL),
		Gorm: a.Gorm + b.Gorm,
		Redis: RedisCounts{Commands: a.Redis.Commands + b.Redis.Commands, RoundTrips: a.Redis.RoundTrips + b.Redis.RoundTrips,
			Evals: a.Redis.Evals + b.Redis.Evals, Scripts: a.Redis.Scripts + b.Redis.Scripts},
	}
}

func addSQL(a, b SQLCounts) SQLCounts {
	return SQLCounts{Statements: a.Statements + b.Statements, Prepares: a.Prepares + b.Prepares,
		Begins: a.Begins + b.Begins, Commits: a.Commits + b.Commits, Rollbacks: a.Rollbacks + b.Rollbacks, InTx: a.InTx + b.InTx, RoundTrips: a.RoundTrips + b.RoundTrips}
}

// MedianMinMax returns the median, minimum and maximum of xs (0s when empty).
func MedianMinMax(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		med = s[n/2]
	} else {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// Ratios returns num's throughput over den's, round by round, at conc (rounds where both ran).
func Ratios(samples []Sample, num, den string, conc int) []float64 {
	n, d := map[int]float64{}, map[int]float64{}
	var rounds []int
	for _, s := range samples {
		if s.Conc != conc {
			continue
		}
		switch s.Variant {
		case num:
			n[s.Round] = s.RPS()
			rounds = append(rounds, s.Round)
		case den:
			d[s.Round] = s.RPS()
		}
	}
	var out []float64
	for _, r := range rounds {
		if dv, ok := d[r]; ok && dv > 0 {
			out = append(out, n[r]/dv)
		}
	}
	return out
}

// Target is a throughput ratio the issue asks for.
type Target struct {
	Name     string
	Num, Den string
	Min      float64
}

// Targets are the throughput targets of the benchmark issue.
var Targets = []Target{
	{"Tx mode without Locker ≥ 0.9× DTM barrier", VTxNoLock, VDTM, 0.9},
	{"Tx mode ≥ 0.8× DTM barrier", VTx, VDTM, 0.8},
	{"MarkTx (TxMark) without Locker ≥ DTM barrier", VMarkTxNoLock, VDTM, 1.0},
	{"Execute ≥ 1.25× classic flow", VExecute, VClassic, 1.25},
	{"cached replay ≥ classic replay (plain GET)", VReplay, VClassicReplay, 1.0},
	{"cached replay ≥ 10× bare transaction", VReplay, VBare, 10},
	{"HTTP replay ≥ 10× HTTP bare handler (the replay rule on the HTTP rows)", VHTTPReplay, VHTTPBare, 10},
}

// Comparisons are further ratios reported without a target.
var Comparisons = []Target{
	{"Tx mode without Locker / bare", VTxNoLock, VBare, 0},
	{"Tx mode / bare", VTx, VBare, 0},
	{"Tx mode, caller's transaction (DoTx) / DTM barrier", VTxLean, VDTM, 0},
	{"Execute / bare", VExecute, VBare, 0},
	{"Execute on prepared statements / classic", VExecLean, VClassic, 0},
	{"Mark / bare", VMark, VBare, 0},
	{"TxMark / bare", VMarkTx, VBare, 0},
	{"TxMark / DTM barrier", VMarkTx, VDTM, 0},
	{"TxMark without Locker / DTM barrier", VMarkTxNoLock, VDTM, 0},
	{"MarkTx, caller's transaction, without Locker / DTM barrier", VMarkTxCaller, VDTM, 0},
	{"DTM barrier / bare", VDTM, VBare, 0},
	{"DTM barrier / bare-sql", VDTM, VBareSQL, 0},
	{"idemkit barrier / bare", VBarrier, VBare, 0},
	{"idemkit barrier / DTM barrier", VBarrier, VDTM, 0},
	{"classic / bare", VClassic, VBare, 0},
	{"classic replay / bare", VClassicReplay, VBare, 0},
	{"idemkit replay / classic replay", VReplay, VClassicReplay, 0},
	{"HTTP guarded / HTTP bare", VHTTPGuarded, VHTTPBare, 0},
	{"NATS consumer guarded / bare (msg.go)", VNATSGuarded, VNATSBare, 0},
	{"RabbitMQ consumer guarded / bare (msg.go)", VAMQPGuarded, VAMQPBare, 0},
}
