package dtmhttp

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dtm-labs/client/dtmcli/dtmimp"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/internal/background"
)

// Defaults of [Options].
const (
	// DefaultLockTTL is how long a delivery holds its branch lock. DTM cancels a branch call after its
	// request timeout (3 s by default), so a live holder rarely needs more; a crashed one blocks
	// redeliveries of its op for at most this long.
	DefaultLockTTL = 10 * time.Second
	// DefaultLockPrefix starts every branch lock key.
	DefaultLockPrefix = "dtm-branch"
	// DefaultMaxBody is the largest payload read, in bytes.
	DefaultMaxBody = 1 << 20
	// DefaultReleaseTimeout bounds the lock release, which runs on a context that survives the
	// request's cancellation.
	DefaultReleaseTimeout = 5 * time.Second
)

// Options configure [Branches]. The zero value works: no lock, 1 MiB payloads, nothing logged.
type Options struct {
	// Locker is the short lock in front of the barrier (lock.New for Redis, memory.NewLocker
	// in-process), keyed by gid, branch_id and op, with a fresh token per delivery. Defaults to none:
	// concurrent deliveries of one op queue on the barrier row instead of being answered 425.
	Locker idemkit.Locker
	// LockTTL is the lock's time to live. Defaults to DefaultLockTTL (10s). Keep it above the
	// business's longest run; a shorter one is not wrong, only less effective. It also bounds the
	// business of an op that must not fail (a compensate, confirm or cancel) whose call DTM gave up on
	// (its request timeout): such a business is not cancelled with the request, but goes on until
	// LockTTL after the call arrived, so that one slower than DTM's timeout commits and DTM's next
	// delivery finds it done (see the package documentation).
	LockTTL time.Duration
	// LockPrefix starts every lock key (see [Branches.LockKey]), so several services can share a
	// Locker. Defaults to DefaultLockPrefix.
	LockPrefix string
	// FailOpen makes Locker errors non-fatal: the business runs without the lock, still behind the
	// barrier (which alone keeps it correct). Defaults to false: a Locker error answers 500 and DTM
	// retries later.
	FailOpen bool
	// MaxBody is the largest payload accepted, in bytes; a larger one is malformed (see the package
	// documentation), and is refused only once the barrier lets a [Gorm] or [Redis] op that must not
	// fail through. Defaults to DefaultMaxBody (1 MiB).
	MaxBody int64
	// IsPermanent classifies the business's errors: true means a permanent business failure (409 for
	// an op that may fail), false an infrastructure error (500). An error marked with idemkit.Permanent
	// is permanent whatever it says, one marked with idemkit.Retryable (and not Permanent) retryable.
	// Defaults to idemkit.IsPermanent.
	// Errors wrapping dtmcli.ErrFailure, dtmcli.ErrOngoing, ErrMalformedPayload or
	// barrier.ErrBusinessFailure are classified before it is asked (a custom one need not know them),
	// and it is not asked about the Locker's errors, nor about those of [Gorm]'s transaction and
	// barrier (begin, insert, commit), or of a Redis that did not reply to [Redis] or answered that it
	// cannot serve now (LOADING, READONLY, OOM...: see barrier.Redis.Call): outages, retried.
	IsPermanent func(error) bool
	// Logger receives a debug line per answer, a warning per 500 and an error for a permanent failure
	// of an op that must not fail. Defaults to discarding.
	Logger *slog.Logger
	// Observe, when set, is called once per request after the answer is written (also when the
	// business panicked, before the panic goes on), for metrics and tests. It must be safe for
	// concurrent use. Defaults to none.
	Observe func(ctx context.Context, e *Event)
}

// Event describes one answered branch call, for [Options.Observe].
type Event struct {
	// TransType, GID, BranchID and Op identify the call, as its query string gave them (also when
	// they were refused: barrier.ErrInvalidBranch); empty when it lacked them.
	TransType, GID, BranchID, Op string
	// Outcome is the barrier's decision, or 0 when the business did not reach the barrier (in flight,
	// malformed request, panic) or reported none.
	Outcome barrier.Outcome
	// Status is the HTTP status answered.
	Status int
	// Err is why the call did not succeed: nil for 200, except for the 200 of a compensating op of a
	// branch the barrier cannot store, which carries why it was refused (see the package
	// documentation).
	Err error
	// Duration is the time from the start of the request's handling to the answer.
	Duration time.Duration
}

// Branches builds handlers for DTM branch calls. Create it with [New]; it is safe for concurrent use.
type Branches struct {
	opts Options
	// forgets run the background releases of locks whose Acquire failed (see Branches.releaseLater).
	forgets background.Limit
	// retries run the background retries of releases that failed: apart from forgets, which a Redis
	// outage fills (every delivery's Acquire fails), so that the lock of a branch that ran still gets
	// its retry.
	retries background.Limit
}

// New returns Branches configured by opts (nil for defaults). It copies opts and returns an error
// when a duration or size is negative, or LockPrefix contains '{' or '}'.
func New(opts *Options) (*Branches, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.LockTTL = cmp.Or(o.LockTTL, DefaultLockTTL)
	o.LockPrefix = cmp.Or(o.LockPrefix, DefaultLockPrefix)
	o.MaxBody = cmp.Or(o.MaxBody, DefaultMaxBody)
	if o.IsPermanent == nil {
		o.IsPermanent = idemkit.IsPermanent
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if o.LockTTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("LockTTL must be at least 1ms, got %s", o.LockTTL))
	}
	if o.MaxBody < 0 {
		errs = append(errs, fmt.Errorf("MaxBody must not be negative, got %d", o.MaxBody))
	}
	if strings.ContainsAny(o.LockPrefix, "{}") {
		errs = append(errs, fmt.Errorf("LockPrefix %q must not contain '{' or '}'", o.LockPrefix))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("dtmhttp: invalid options: %w", err)
	}
	return &Branches{opts: o, forgets: background.Limit{Max: maxForgets}, retries: background.Limit{Max: maxForgets}}, nil
}

// servedOps are the ops a handler may serve: those DTM delivers to branch URLs.
var servedOps = []string{
	barrier.OpAction, barrier.OpCompensate,
	barrier.OpTry, barrier.OpConfirm, barrier.OpCancel,
	barrier.OpCommit, barrier.OpRollback,
}

// Handle returns a handler for branch calls of op (barrier.OpAction, OpCompensate, OpTry,
// OpConfirm, OpCancel, OpCommit or OpRollback) that runs run for each of them and answers as the
// package documentation says. A call carrying another op is answered 400 and run is not called.
//
// A nil *Branches serves with the default options. Handle panics when run is nil or op is not one of
// those: both are programmer errors.
func (b *Branches) Handle(op string, run Business) http.Handler {
	if b == nil {
		b, _ = New(nil)
	}
	if run == nil {
		panic("dtmhttp: Handle: nil Business")
	}
	found := false
	for _, o := range servedOps {
		found = found || o == op
	}
	if !found {
		panic(fmt.Sprintf("dtmhttp: Handle: op %q is not a branch op DTM delivers", op))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { b.serve(w, r, op, run) })
}

// LockKey returns the key under which a delivery of (gid, branchID, op) is locked in the Locker:
// LockPrefix, then gid and branchID length-prefixed (so no two branches share a key), then op. It is
// exported for operations and tests. A nil *Branches uses DefaultLockPrefix.
func (b *Branches) LockKey(gid, branchID, op string) string {
	prefix := DefaultLockPrefix
	if b != nil {
		prefix = b.opts.LockPrefix
	}
	return prefix + ":" + strconv.Itoa(len(gid)) + ":" + gid + ":" +
		strconv.Itoa(len(branchID)) + ":" + branchID + ":" + op
}

// ErrWrongOp: a handler got a branch call for an op it does not serve (a misrouted URL).
var ErrWrongOp = errors.New("dtmhttp: branch op not served by this handler")

func (b *Branches) serve(w http.ResponseWriter, r *http.Request, op string, run Business) {
	ev := &Event{}
	start := time.Now()
	br, err := barrier.FromRequest(r)
	if err != nil {
		// The fields as barrier.FromQuery read them: the answer to an invalid branch depends on its op.
		q := r.URL.Query()
		ev.TransType, ev.GID = dtmimp.EscapeGet(q, "trans_type"), dtmimp.EscapeGet(q, "gid")
		ev.BranchID, ev.Op = dtmimp.EscapeGet(q, "branch_id"), dtmimp.EscapeGet(q, "op")
		b.answer(w, r, ev, start, err)
		return
	}
	ev.TransType, ev.GID, ev.BranchID, ev.Op = br.TransType, br.Gid, br.BranchID, br.Op
	if br.Op != op {
		b.answer(w, r, ev, start, fmt.Errorf("%w: got op %q at a %s handler", ErrWrongOp, br.Op, op))
		return
	}
	payload, perr := readBody(w, r, b.opts.MaxBody)
	if perr != nil && (MayFail(br.TransType, br.Op) || !errors.Is(perr, ErrMalformedPayload)) {
		b.answer(w, r, ev, start, perr)
		return
	}
	release, err := b.lock(r.Context(), br)
	if err != nil {
		b.answer(w, r, ev, start, err)
		return
	}

	req := &Request{HTTP: r, Branch: br, Payload: payload}
	if perr != nil {
		// An oversized payload of an op that must not fail: the op it undoes was refused the same
		// payload, so the barrier most likely skips this call as a null compensation, which needs
		// no payload. Gorm and Redis let it decide first; a Business written by hand gets no Branch.
		req.Branch, req.branch, req.payloadErr = nil, br, perr
	}
	work, done := r.Context(), func() {}
	if !MayFail(br.TransType, br.Op) {
		work, done = b.businessContext(r.Context(), start)
	}
	defer done()
	ctx := context.WithValue(work, requestKey{}, req)
	finished := false
	defer func() {
		if finished {
			return
		}
		// The business panicked (or called runtime.Goexit): its transaction was rolled back by the
		// barrier. Release, answer a complete 500 and let the panic go on, unrecovered, so the
		// server's recoverer sees it with its stack.
		release()
		ev.Status, ev.Err, ev.Duration = http.StatusInternalServerError, errPanic, time.Since(start)
		// net/http closes the connection after a panic: tell the client not to reuse it.
		w.Header().Set("Connection", "close")
		writeAnswer(w, http.StatusInternalServerError, "", "panic in branch business; see the service log")
		_ = http.NewResponseController(w).Flush()
		b.opts.Logger.ErrorContext(r.Context(), "dtmhttp: panic in branch business", branchAttrs(ev)...)
		if b.opts.Observe != nil {
			b.opts.Observe(r.Context(), ev)
		}
	}()
	out, err := run(ctx, req)
	finished = true
	release()
	if err != nil && req.payloadErr != nil && !req.seen {
		err = req.payloadErr // a Business written by hand failed on the missing Branch
	}
	ev.Outcome = out
	b.answer(w, r, ev, start, err)
}

var errPanic = errors.New("dtmhttp: panic in branch business")

// businessContext returns the context the business of an op that must not fail runs on, and the
// function that ends it once the business returned: req's values, and req's cancellation deferred.
// DTM gives up on a branch call after its request timeout (3 s by default) and calls such an op again
// later, until it succeeds; a business cancelled then would roll back and run again on every delivery
// — one slower than the timeout never finishing, its effects outside the transaction repeated each
// time — where the barrier finds it done once it committed (as dtmcli's barrier, which takes no
// context, does). So once req ends the business goes on until LockTTL after the delivery started,
// while its lock keeps the redeliveries away, and is cancelled then.
//
// An op that may fail (a saga's action, a TCC's try) keeps req's cancellation, so that no work goes on
// for a call nobody waits for: it loses nothing by rolling back. DTM takes an action it gave up on for
// one that may have run: it delivers it again, or, when the saga rolls back meanwhile (its
// TimeoutToFail, a concurrent step's failure), compensates it — DTM marks every action that was
// started or could start as done before compensating (v1.19's prepareToCompensate), as a TCC's
// rollback cancels every registered try — and the barrier makes the compensation of an action that
// did not commit a null compensation.
func (b *Branches) businessContext(req context.Context, start time.Time) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(req))
	stop := context.AfterFunc(req, func() {
		cause := fmt.Errorf("dtmhttp: the branch call ended (%w) and its business ran past LockTTL (%s)", context.Cause(req), b.opts.LockTTL)
		grace := time.NewTimer(time.Until(start.Add(b.opts.LockTTL)))
		defer grace.Stop()
		select {
		case <-grace.C:
			cancel(cause)
		case <-ctx.Done():
		}
	})
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// lock takes the branch lock and returns its release function (a no-op without a Locker).
func (b *Branches) lock(ctx context.Context, br *barrier.Branch) (release func(), err error) {
	lk := b.opts.Locker
	if lk == nil {
		return func() {}, nil
	}
	key := b.LockKey(br.Gid, br.BranchID, br.Op)
	token := newToken()
	cached, err := lk.Acquire(ctx, key, token, b.opts.LockTTL)
	switch {
	case err == nil && cached != nil:
		// Something cached a result under our key; this package never does. No lock was taken: the
		// barrier decides alone.
		return func() {}, nil
	case err == nil:
	case errors.Is(err, idemkit.ErrLocked):
		var inflight *idemkit.InFlightError
		if !errors.As(err, &inflight) {
			inflight = &idemkit.InFlightError{}
		}
		return nil, inflight
	case ctx.Err() == nil && b.opts.FailOpen:
		b.forgetLock(ctx, err, key, token)
		b.opts.Logger.WarnContext(ctx, "dtmhttp: lock unavailable, running on the barrier alone", "error", err)
		return func() {}, nil
	default:
		b.forgetLock(ctx, err, key, token)
		// An outage, not the business's answer: DTM must call again, whatever IsPermanent says.
		return nil, idemkit.Retryable(fmt.Errorf("%w: %w", idemkit.ErrLockUnavailable, err))
	}
	released := false
	return func() {
		if released {
			return
		}
		released = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
		defer cancel()
		if err := lk.Release(rctx, key, token, nil, 0); err != nil && !errors.Is(err, idemkit.ErrLockNotHeld) {
			b.opts.Logger.WarnContext(ctx, "dtmhttp: releasing branch lock", "key", key, "error", err)
			b.releaseLater(ctx, &b.retries, key, token)
		}
	}, nil
}

// Wait waits until the releases the Branches run in the background after their handlers answered
// have ended, or ctx ends (its error returned): a lock released again after its release failed, or
// after its Acquire's reply was lost. Each lasts until Redis answers, DefaultReleaseTimeout at most.
// Call it at a graceful shutdown, once the handlers have returned, before closing the Redis client:
// a lock left behind answers DTM's retries of its branch 425 until LockTTL runs out. Handlers
// answering while it waits may add releases it then waits for too.
func (b *Branches) Wait(ctx context.Context) error {
	return background.WaitAll(ctx, &b.retries, &b.forgets)
}

// maxForgets bounds the background releases of Branches.releaseLater running at once, of each kind.
const maxForgets = 64

// forgetLock releases in the background the lock an Acquire that failed with err may yet have taken
// (its reply lost): not when the Acquire was never sent (idemkit.ErrNotSent), which took none — on a
// slow Redis such releases would fill the background slots, and the release of a lock that did land
// would be dropped.
func (b *Branches) forgetLock(ctx context.Context, err error, key, token string) {
	if !errors.Is(err, idemkit.ErrNotSent) {
		b.releaseLater(ctx, &b.forgets, key, token)
	}
}

// releaseLater releases token's lock on key in the background, on l, trying again with a backoff (10
// ms doubling, up to a second) for DefaultReleaseTimeout until the Locker answers; at most maxForgets
// run at once on each of b.forgets and b.retries (a Redis that never answers fails every delivery). It
// is for the locks nothing else would release, which DTM's retries of the branch would meet, answered
// 425, until LockTTL ran out:
//   - on b.forgets, the lock an Acquire that failed may have taken all the same: its command can take
//     effect while its reply is lost (a read timeout, the request's context ending the wait);
//   - on b.retries, the lock whose release failed (a connection Redis dropped, a client that does
//     not retry): an outage, which fails every delivery's Acquire, fills b.forgets, and must not
//     crowd out the lock of a branch that ran.
//
// The release compares token, so it deletes nothing but that lock.
func (b *Branches) releaseLater(ctx context.Context, l *background.Limit, key, token string) {
	lk := b.opts.Locker
	l.Retry(ctx, DefaultReleaseTimeout, func(ctx context.Context) bool {
		err := lk.Release(ctx, key, token, nil, 0)
		return err == nil || errors.Is(err, idemkit.ErrLockNotHeld)
	})
}

// readBody reads at most limit bytes of r's body.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, idemkit.Permanent(fmt.Errorf("%w: payload larger than %d bytes", ErrMalformedPayload, limit))
	case err != nil:
		return nil, idemkit.Retryable(fmt.Errorf("dtmhttp: reading payload: %w", err))
	}
	return body, nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
