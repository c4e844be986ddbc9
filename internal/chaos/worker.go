//go:build unix

package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/sweep"
)

// WorkerEnv is the environment variable that puts a process started by [Run] into worker mode; it
// holds the worker's configuration as JSON.
const WorkerEnv = "IDEMCHAOS_WORKER"

// Bounds inside a worker.
const (
	requestTimeout  = 10 * time.Second // one guarded call, claim to finish
	trapHold        = 15 * time.Second // longest a trapped function waits for its kill or release
	bizGateWait     = 20 * time.Second // longest a business transaction waits for a stall to end
	shutdownTimeout = 5 * time.Second
	statsEvery      = 500 * time.Millisecond
)

// workerConfig is what the harness hands a worker process.
type workerConfig struct {
	ID            string        `json:"id"`
	Database      string        `json:"database"` // MariaDB or Postgres
	DSN           string        `json:"dsn"`
	Tables        Tables        `json:"tables"`
	RedisAddr     string        `json:"redis"`
	LockPrefix    string        `json:"lock_prefix"`
	Lease         time.Duration `json:"lease"`
	LockTTL       time.Duration `json:"lock_ttl"`
	SweepInterval time.Duration `json:"sweep_interval"`
	Watchdog      bool          `json:"watchdog"`
	FlakyRate     float64       `json:"flaky_rate"`
	IgnoreFence   bool          `json:"ignore_fence"`
	// MultiStatements opens the worker's pool with multiStatements=true and interpolateParams=true (see
	// record.Store.BeginTx). MariaDB only.
	MultiStatements bool `json:"multi_statements"`
	// StallMaxAmount keeps the stall trap off overdrafts: a stalled attempt must be one whose write
	// would apply, or the fence has nothing to refuse.
	StallMaxAmount int64 `json:"stall_max_amount"`
}

// RunWorkerIfRequested runs a worker and exits the process when the process was started by [Run]
// as a worker (the WorkerEnv variable is set); otherwise it returns at once. Call it first thing in
// main, and in TestMain of test binaries that call Run.
func RunWorkerIfRequested() {
	v, ok := os.LookupEnv(WorkerEnv)
	if !ok {
		return
	}
	os.Exit(workerMain(v))
}

// worker is one worker process: its own Guard, gorm pool, Redis client and sweeper.
type worker struct {
	cfg   workerConfig
	d     *dialect
	db    *gorm.DB
	store *record.Store
	guard *idemkit.Guard
	// dbOnly is guard without the Locker: Tx-mode calls through it meet duplicates in the database
	// only (the read before the function, the primary key).
	dbOnly *idemkit.Guard
	out    *lineWriter
	log    *slog.Logger

	trap atomic.Pointer[trapSpec] // the armed trap, nil when none
	// release is closed by /ctl/release to let a stalled function go on.
	relMu   sync.Mutex
	release chan struct{}
	biz     bizGate
	stats   workerStats
}

func workerMain(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: bad %s: %v\n", WorkerEnv, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w := &worker{cfg: cfg, out: &lineWriter{w: bufio.NewWriter(os.Stdout)}, log: log}
	if err := w.run(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker %s: %v\n", cfg.ID, err)
		return 1
	}
	return 0
}

func (w *worker) run() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The harness holds our stdin: when it closes (clean stop, or the harness died) we exit.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	d, err := dialectOf(w.cfg.Database)
	if err != nil {
		return err
	}
	w.d = d
	dsn := w.cfg.DSN
	if w.cfg.MultiStatements && d.name == MariaDB {
		// interpolateParams too: START TRANSACTION then leaves with the business's first statement,
		// arguments and all (the other workers send their statements prepared, one per packet).
		dsn += "&multiStatements=true&interpolateParams=true"
	}
	db, err := gorm.Open(d.open(dsn), &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true})
	if err != nil {
		return fmt.Errorf("opening %s: %w", d.name, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	sqlDB.SetMaxOpenConns(24)
	sqlDB.SetMaxIdleConns(24)
	sqlDB.SetConnMaxLifetime(time.Minute)
	w.db = db
	if w.store, err = record.New(db, &record.Options{Table: w.cfg.Tables.Records}); err != nil {
		return err
	}

	rdb := redis.NewClient(&redis.Options{
		Addr: w.cfg.RedisAddr, ContextTimeoutEnabled: true, MaxRetries: 1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, PoolTimeout: time.Second,
	})
	defer rdb.Close()
	locker := lock.New(rdb, &lock.Options{Prefix: w.cfg.LockPrefix})

	opts := idemkit.Options{
		Locker:   locker,
		FailOpen: true, // Redis down: carry on with the database alone
		Lease:    w.cfg.Lease, LockTTL: w.cfg.LockTTL, Watchdog: w.cfg.Watchdog,
		FinishTimeout: 3 * time.Second,
		LogKeys:       true,
		Logger:        w.log,
		Observer:      w,
	}
	if w.guard, err = idemkit.New(w.wrap(w.store), &opts); err != nil {
		return err
	}
	opts.Locker = nil
	if w.dbOnly, err = idemkit.New(w.wrap(w.store), &opts); err != nil {
		return err
	}
	sweepLog := slog.New(sweepCounter{next: w.log.Handler(), recovered: &w.stats.recovered})
	sw, err := sweep.New(&sweep.Options{Interval: w.cfg.SweepInterval, Locker: locker, LockKey: "sweep", Logger: sweepLog},
		sweep.RecordTasksWithLocker(w.store, locker)...)
	if err != nil {
		return err
	}
	sw.Start(ctx)
	defer sw.Close()

	pay, err := httpx.New(w.guard, &httpx.Options{Logger: w.log})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /pay", pay(http.HandlerFunc(w.servePay)))
	mux.HandleFunc("POST /op", w.serveOp)
	mux.HandleFunc("POST /ctl/trap", w.serveTrap)
	mux.HandleFunc("POST /ctl/release", w.serveRelease)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	w.out.line("READY", ln.Addr().String())

	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
			_ = srv.Shutdown(sctx)
			scancel()
			w.out.line("STATS", w.stats.json())
			return nil
		case err := <-serveErr:
			return fmt.Errorf("serving: %w", err)
		case <-tick.C:
			w.out.line("STATS", w.stats.json())
		}
	}
}

// wrap applies the sabotage, if any, to a Store.
func (w *worker) wrap(s idemkit.Store) idemkit.Store {
	if w.cfg.IgnoreFence {
		return fenceIgnoringStore{s}
	}
	return s
}

func (w *worker) flaky() bool { return w.cfg.FlakyRate > 0 && rand.Float64() < w.cfg.FlakyRate }

// opRequest is the body of POST /op.
type opRequest struct {
	Path string `json:"path"`
	Key  string `json:"key"`
	Op
}

// opAnswer is a worker's answer to POST /op.
type opAnswer struct {
	Class    string `json:"class"`
	Replayed bool   `json:"replayed,omitempty"`
	Value    string `json:"value,omitempty"` // ok, replay: the result; rejected: the stored message
	Fence    int64  `json:"fence,omitempty"` // the claim's fence when the function ran
	Biz      string `json:"biz,omitempty"`   // what the function did, when it ran
	Error    string `json:"error,omitempty"`
}

func (w *worker) serveOp(rw http.ResponseWriter, r *http.Request) {
	var req opRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	var a opAnswer
	switch req.Path {
	case PathExec:
		a = w.doExec(ctx, req)
	case PathTx:
		a = w.doTx(ctx, req)
	case PathMark:
		a = w.doMark(ctx, req)
	case PathMarkExec:
		a = w.doMarkExec(ctx, req)
	default:
		http.Error(rw, "unknown path", http.StatusBadRequest)
		return
	}
	if a.Class == ClassFenced {
		w.out.line("EVENT", "fenced", req.Path, req.Key, fmt.Sprint(a.Fence), a.Biz)
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(a)
}

func (w *worker) doExec(ctx context.Context, req opRequest) opAnswer {
	var biz bizOutcome
	var fence int64
	call := idemkit.Call{Scope: scopeExec, Key: req.Key, Fingerprint: req.Op.fingerprint()}
	res, err := w.guard.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
		fence, _ = idemkit.FenceFromContext(ctx)
		return w.fencedTransfer(ctx, PathExec, req.Key, req.Op, &biz)
	})
	return answerOf(res, err, fence, biz)
}

// doTx is Tx mode, three ways picked at random per request, all in one database transaction with the
// business writes: the Guard-owned transaction (record.Store.Tx) with the Redis Locker, the same
// without a Locker (duplicates meet in the database only), and the caller's own transaction
// (guard.DoTx in db.Transaction, rolled back whenever DoTx returns an error, as its contract says; a
// permanent refusal is then stored on its own).
// Under the fence-ignoring sabotage, only the caller's transaction, whose Store is the sabotaged one.
func (w *worker) doTx(ctx context.Context, req opRequest) opAnswer {
	var biz bizOutcome
	var fence int64
	call := idemkit.Call{Scope: scopeTx, Key: req.Key, Fingerprint: req.Op.fingerprint()}
	if err := w.biz.enter(ctx); err != nil {
		return opAnswer{Class: ClassUnavailable, Error: err.Error()}
	}
	defer w.biz.exit()
	business := func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
		return w.transferIn(ctx, tx, PathTx, req, &biz, &fence)
	}
	way := rand.IntN(3)
	if w.cfg.IgnoreFence {
		way = 2
	}
	if way < 2 {
		g := w.guard
		if way == 1 {
			g = w.dbOnly
		}
		if w.cfg.MultiStatements {
			w.stats.multiTx.Add(1)
		}
		res, err := w.store.Tx(ctx, g, call, business)
		switch {
		case res.Replayed && biz == bizApplied:
			biz = bizNone // applied, then rolled back by the Guard: the answer is another attempt's
		case errors.Is(err, idemkit.ErrStoreUnavailable) && biz == bizApplied:
			biz = bizError // the commit failed: its outcome is unknown
		}
		return answerOf(res, err, fence, biz)
	}
	var res idemkit.Result
	var derr error
	terr := w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res, derr = w.guard.DoTx(ctx, w.wrap(w.store.WithTx(tx)), call, func(ctx context.Context) ([]byte, error) {
			return business(ctx, tx)
		})
		return derr // DoTx's contract: every error rolls back, the record with the business writes
	})
	if terr != nil && !errors.Is(terr, derr) {
		// BEGIN or COMMIT failed: if the commit was lost on the way, the outcome is unknown.
		if biz == bizApplied {
			biz = bizError
		}
		return opAnswer{Class: ClassUnavailable, Fence: fence, Biz: string(biz), Error: terr.Error()}
	}
	if errors.Is(derr, idemkit.ErrRollbackReplayed) && biz == bizApplied {
		biz = bizNone // applied, then rolled back: the stored answer is another attempt's
	}
	if biz == bizRejected && !res.Replayed && idemkit.IsPermanent(derr) {
		// The business refused the transfer; its transaction, with the REJECTED record DoTx wrote in
		// it, rolled back. Store the rejection on its own, as Guard.Tx does: through the Guard-owned
		// transaction with a function that refuses again without touching the business tables (it
		// replays instead when another attempt finished the key meanwhile).
		refusal := derr
		res, derr = w.store.Tx(ctx, w.guard, call, func(context.Context, *gorm.DB) ([]byte, error) { return nil, refusal })
		if res.Replayed {
			biz = bizNone
		}
	}
	return answerOf(res, derr, fence, biz)
}

// transferIn is the business of the transactional paths (Tx mode, the mark): the transfer in tx, its
// outcome noted in biz and the claim's fence in fence; a worker armed to be killed dies after the
// writes, before the commit. A failure of the business's own statements is retryable (errBizDB).
func (w *worker) transferIn(ctx context.Context, tx *gorm.DB, path string, req opRequest, biz *bizOutcome, fence *int64) ([]byte, error) {
	*fence, _ = idemkit.FenceFromContext(ctx)
	if w.flaky() {
		*biz = bizFlaky
		return nil, errFlaky
	}
	_, v, err := w.cfg.Tables.applyTransfer(w.d, tx, path, req.Key, w.cfg.ID, req.Op, *fence)
	switch {
	case idemkit.IsPermanent(err):
		*biz = bizRejected
	case err != nil:
		*biz = bizError
		err = fmt.Errorf("%w: %w", errBizDB, err)
	default:
		*biz = bizApplied
		w.trapPoint(trapKill, path, req.Key, *fence) // writes done, commit pending
	}
	return v, err
}

// doMark is TxMark: the mark and the transfer in one transaction the Guard begins and commits, with
// the Redis Locker or without (duplicates meet in the database only), picked at random per request.
// A fresh run answers the transfer's value; a duplicate gets ErrDuplicate and nothing else; an
// overdraft rolls back and is not stored (a mark keeps no answer).
func (w *worker) doMark(ctx context.Context, req opRequest) opAnswer {
	var biz bizOutcome
	var fence int64
	var val []byte
	call := idemkit.Call{Scope: scopeMark, Key: req.Key, Fingerprint: req.Op.fingerprint()}
	if err := w.biz.enter(ctx); err != nil {
		return opAnswer{Class: ClassUnavailable, Error: err.Error()}
	}
	defer w.biz.exit()
	g := w.guard
	if rand.IntN(2) == 1 {
		g = w.dbOnly
	}
	err := w.store.TxMark(ctx, g, call, func(ctx context.Context, tx *gorm.DB) error {
		var err error
		val, err = w.transferIn(ctx, tx, PathMark, req, &biz, &fence)
		return err
	})
	switch {
	case errors.Is(err, idemkit.ErrDuplicate):
		return opAnswer{Class: ClassDuplicate, Biz: string(biz)}
	case errors.Is(err, idemkit.ErrStoreUnavailable) && biz == bizApplied:
		biz = bizError // the commit failed: its outcome is unknown
	}
	return answerOf(idemkit.Result{Value: val}, err, fence, biz)
}

// doMarkExec is Mark mode: guard.Mark writes the mark (SUCCEEDED at once) before the function, and the
// function's fenced transfer commits apart from it — with the Redis Locker or without, picked at random
// per request. A fresh run answers the transfer's value (the function keeps it: a mark stores none);
// a duplicate gets ErrDuplicate (ErrInFlight while the lock holder runs); an overdraft finishes the
// mark REJECTED with its error text, and its duplicates get ErrDuplicate too; a retryable failure
// finishes it FAILED, and the retry takes it over at the next fence — the fence register then
// refuses the failed attempt should it write late, and lets the retry adopt a transfer whose commit
// happened although its reply was lost. A worker killed inside the function leaves the key marked
// without its transfer: Mark is at most once.
func (w *worker) doMarkExec(ctx context.Context, req opRequest) opAnswer {
	var biz bizOutcome
	var fence int64
	var val []byte
	call := idemkit.Call{Scope: scopeMarkExec, Key: req.Key, Fingerprint: req.Op.fingerprint()}
	g := w.guard
	if rand.IntN(2) == 1 {
		g = w.dbOnly
	}
	err := g.Mark(ctx, call, func(ctx context.Context) error {
		fence, _ = idemkit.FenceFromContext(ctx)
		var err error
		val, err = w.fencedTransfer(ctx, PathMarkExec, req.Key, req.Op, &biz)
		return err
	})
	if errors.Is(err, idemkit.ErrDuplicate) {
		return opAnswer{Class: ClassDuplicate, Biz: string(biz)}
	}
	return answerOf(idemkit.Result{Value: val}, err, fence, biz)
}

// answerOf classifies a guarded call's result the way a client would.
func answerOf(res idemkit.Result, err error, fence int64, biz bizOutcome) opAnswer {
	a := opAnswer{Fence: fence, Biz: string(biz), Replayed: res.Replayed}
	if err != nil {
		a.Error = err.Error()
	}
	var rej *idemkit.RejectedError
	var perm *idemkit.PermanentError
	switch {
	case errors.Is(err, idemkit.ErrRollbackReplayed) && errors.As(err, &rej):
		a.Class, a.Value = ClassRejected, rej.Message // a stored rejection, after a rollback
	case errors.Is(err, idemkit.ErrRollbackReplayed) && res.Replayed:
		a.Class, a.Value = ClassReplay, string(res.Value) // the stored result, after a rollback
	case err == nil && res.Replayed:
		a.Class, a.Value = ClassReplay, string(res.Value)
	case err == nil:
		a.Class, a.Value = ClassOK, string(res.Value)
	case errors.Is(err, idemkit.ErrFenced):
		a.Class = ClassFenced
	case errors.Is(err, idemkit.ErrStoreUnavailable), errors.Is(err, idemkit.ErrLockUnavailable),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errBizDB):
		a.Class = ClassUnavailable
	case errors.As(err, &rej):
		a.Class, a.Value = ClassRejected, rej.Message
	case errors.As(err, &perm):
		a.Class, a.Value = ClassRejected, perm.Err.Error()
	case errors.Is(err, idemkit.ErrInFlight):
		a.Class = ClassInFlight
	case errors.Is(err, idemkit.ErrPayloadMismatch):
		a.Class = ClassMismatch
	case errors.Is(err, errFlaky), errors.Is(err, errStale):
		a.Class = ClassFailed
	default:
		a.Class = ClassError
	}
	return a
}

// servePay is the HTTP path's handler, behind the httpx middleware: the same fenced transfer as
// Execute mode, answered 201 with the result, 422 for an overdraft (stored and replayed by httpx),
// 503 for retryable failures (not stored: the next retry runs again).
func (w *worker) servePay(rw http.ResponseWriter, r *http.Request) {
	key, _ := httpx.ParseKey(r.Header.Get(httpx.DefaultHeader))
	var op Op
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&op); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	var biz bizOutcome
	v, err := w.fencedTransfer(r.Context(), PathHTTP, key, op, &biz)
	rw.Header().Set("Content-Type", "application/json")
	switch {
	case err == nil:
		rw.WriteHeader(http.StatusCreated)
		_, _ = rw.Write(v)
	case idemkit.IsPermanent(err):
		rw.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = fmt.Fprintf(rw, `{"error":%q}`, errOverdraft.Error())
	default:
		rw.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(rw, `{"error":%q}`, err.Error())
	}
}

// noteBiz counts a fenced business function's outcome and reports the rare ones (stale, adopted)
// to the harness, and any outcome of a function a trap stopped in.
func (w *worker) noteBiz(path, key string, fence int64, biz bizOutcome, trapped bool) {
	switch biz {
	case bizStale:
		w.stats.stale.Add(1)
	case bizAdopted:
		w.stats.adopted.Add(1)
	case bizApplied:
		w.stats.applied.Add(1)
	}
	if biz == bizStale || biz == bizAdopted || trapped {
		w.out.line("EVENT", string(cmp.Or(biz, "none")), path, key, fmt.Sprint(fence))
	}
}

// Traps: the harness arms one, and the next business function to reach the matching point reports
// "INSIDE" on stdout and waits — to be killed (trapKill, after its writes, before its commit) or
// frozen and released (trapStall, before its business write).
const (
	trapKill  = "kill"
	trapStall = "stall"
)

// trapSpec is an armed trap: its kind, and the paths whose functions it waits for (none: any).
type trapSpec struct {
	kind  string
	paths []string
}

// serveTrap arms a trap: ?kind=kill|stall, optionally &path= one path or a comma-separated list
// (exec, tx, mark, markexec, http); no kind disarms.
func (w *worker) serveTrap(rw http.ResponseWriter, r *http.Request) {
	kind, path := r.URL.Query().Get("kind"), r.URL.Query().Get("path")
	var paths []string
	if path != "" {
		paths = strings.Split(path, ",")
	}
	switch kind {
	case "":
		w.trap.Store(nil)
	case trapKill, trapStall:
		if kind == trapStall {
			w.relMu.Lock()
			w.release = make(chan struct{})
			w.relMu.Unlock()
		}
		w.trap.Store(&trapSpec{kind: kind, paths: paths})
	default:
		http.Error(rw, "unknown trap", http.StatusBadRequest)
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

func (w *worker) serveRelease(rw http.ResponseWriter, _ *http.Request) {
	w.relMu.Lock()
	if w.release != nil {
		close(w.release)
		w.release = nil
	}
	w.relMu.Unlock()
	rw.WriteHeader(http.StatusNoContent)
}

// trapPoint fires the armed trap of kind, once, and reports whether it fired.
func (w *worker) trapPoint(kind, path, key string, fence int64) bool {
	t := w.trap.Load()
	if t == nil || t.kind != kind || len(t.paths) > 0 && !slices.Contains(t.paths, path) || !w.trap.CompareAndSwap(t, nil) {
		return false
	}
	switch kind {
	case trapKill:
		w.out.line("INSIDE", kind, path, key, fmt.Sprint(fence))
		time.Sleep(trapHold) // the harness SIGKILLs us here; if it does not, carry on
	case trapStall:
		w.relMu.Lock()
		rel := w.release
		w.relMu.Unlock()
		// Quiesce: no other business transaction of this process may hold row locks while it is
		// frozen, or the attempt taking the key over could wait on them until the freeze ends.
		w.biz.block()
		defer w.biz.unblock()
		w.biz.waitIdle(trapHold)
		w.out.line("INSIDE", kind, path, key, fmt.Sprint(fence))
		select { // the harness SIGSTOPs us here, SIGCONTs us later, then releases us
		case <-rel:
		case <-time.After(trapHold):
		}
	}
	return true
}

// bizGate lets a stall quiesce the process: while blocked, business transactions wait before they
// begin, and waitIdle waits for the open ones to end.
type bizGate struct {
	blocked atomic.Bool
	open    atomic.Int64
}

func (g *bizGate) enter(ctx context.Context) error {
	deadline := time.Now().Add(bizGateWait)
	for {
		if !g.blocked.Load() {
			g.open.Add(1)
			if !g.blocked.Load() {
				return nil
			}
			g.open.Add(-1)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return errors.New("chaos: business gate blocked too long")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (g *bizGate) exit()    { g.open.Add(-1) }
func (g *bizGate) block()   { g.blocked.Store(true) }
func (g *bizGate) unblock() { g.blocked.Store(false) }

func (g *bizGate) waitIdle(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for g.open.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// Start implements idemkit.Observer: it counts the Guard's calls and reports takeovers and fenced
// finishes to the harness.
func (w *worker) Start(ctx context.Context, mode idemkit.Mode, scope string) (context.Context, func(*idemkit.Event)) {
	return ctx, func(ev *idemkit.Event) {
		s := &w.stats
		s.calls.Add(1)
		switch ev.Outcome {
		case idemkit.OutcomeExecuted:
			s.executed.Add(1)
		case idemkit.OutcomeReplayed:
			s.replayed.Add(1)
			if ev.Cached {
				s.cached.Add(1)
			}
		case idemkit.OutcomeInFlight:
			s.inFlight.Add(1)
		case idemkit.OutcomeUnavailable:
			s.unavailable.Add(1)
		}
		if ev.Takeover {
			s.takeovers.Add(1)
		}
		if ev.Fenced {
			s.fenced.Add(1)
			if scope == scopeHTTP {
				w.out.line("EVENT", "fenced", PathHTTP, ev.Key, fmt.Sprint(ev.Fence), "")
			}
		}
		if ev.FailOpen {
			s.failOpen.Add(1)
		}
	}
}

// workerStats are cumulative counters a worker prints on stdout every statsEvery.
type workerStats struct {
	calls, executed, replayed, cached, inFlight, unavailable atomic.Int64
	takeovers, fenced, failOpen                              atomic.Int64
	applied, adopted, stale, recovered                       atomic.Int64
	multiTx                                                  atomic.Int64
}

// WorkerStats is a snapshot of a worker's counters, summed over a run in [Report].
type WorkerStats struct {
	Calls       int64 `json:"calls"`
	Executed    int64 `json:"executed"`
	Replayed    int64 `json:"replayed"`
	Cached      int64 `json:"cached"`
	InFlight    int64 `json:"in_flight"`
	Unavailable int64 `json:"unavailable"`
	Takeovers   int64 `json:"takeovers"`
	Fenced      int64 `json:"fenced"`
	FailOpen    int64 `json:"fail_open"`
	Applied     int64 `json:"applied"`
	Adopted     int64 `json:"adopted"`
	Stale       int64 `json:"stale"`
	Recovered   int64 `json:"recovered"` // stale claims the sweeper recovered
	// MultiTx counts Guard-owned Tx-mode calls made by workers on multi-statement packets.
	MultiTx int64 `json:"multi_tx"`
}

func (s *workerStats) json() string {
	b, _ := json.Marshal(WorkerStats{
		Calls: s.calls.Load(), Executed: s.executed.Load(), Replayed: s.replayed.Load(), Cached: s.cached.Load(),
		InFlight: s.inFlight.Load(), Unavailable: s.unavailable.Load(), Takeovers: s.takeovers.Load(),
		Fenced: s.fenced.Load(), FailOpen: s.failOpen.Load(), Applied: s.applied.Load(), Adopted: s.adopted.Load(),
		Stale: s.stale.Load(), Recovered: s.recovered.Load(), MultiTx: s.multiTx.Load(),
	})
	return string(b)
}

func (s *WorkerStats) add(o WorkerStats) {
	s.Calls += o.Calls
	s.Executed += o.Executed
	s.Replayed += o.Replayed
	s.Cached += o.Cached
	s.InFlight += o.InFlight
	s.Unavailable += o.Unavailable
	s.Takeovers += o.Takeovers
	s.Fenced += o.Fenced
	s.FailOpen += o.FailOpen
	s.Applied += o.Applied
	s.Adopted += o.Adopted
	s.Stale += o.Stale
	s.Recovered += o.Recovered
	s.MultiTx += o.MultiTx
}

// sweepCounter is the sweeper's log handler: it counts the stale claims each pass recovered (the
// sweeper reports them in its "stats" attribute) and passes warnings on.
type sweepCounter struct {
	next      slog.Handler
	recovered *atomic.Int64
}

func (h sweepCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h sweepCounter) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if st, ok := a.Value.Any().(sweep.Stats); ok && a.Key == "stats" {
			h.recovered.Add(int64(st["recover_stale"]))
		}
		return true
	})
	if r.Level >= slog.LevelWarn && h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h sweepCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return sweepCounter{next: h.next.WithAttrs(as), recovered: h.recovered}
}

func (h sweepCounter) WithGroup(name string) slog.Handler {
	return sweepCounter{next: h.next.WithGroup(name), recovered: h.recovered}
}

// lineWriter writes protocol lines ("WORD field field...") to the harness, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) line(word string, fields ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.WriteString(word)
	for _, f := range fields {
		l.w.WriteByte(' ')
		l.w.WriteString(strings.ReplaceAll(f, " ", "_"))
	}
	l.w.WriteByte('\n')
	_ = l.w.Flush()
}
