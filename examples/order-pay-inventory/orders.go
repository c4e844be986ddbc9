package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/go-chi/chi/v5"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/tcc"
	"github.com/idemkit/idemkit/txstatus"
)

// The order service. POST /api/orders (saga) and POST /api/orders/tcc sit behind the httpx middleware,
// so a request runs once per Idempotency-Key and duplicates get the stored 201. The handler starts the
// global transaction through the saga or TCC initiator, whose hooks.Lifecycle keeps a second record tied
// to the transaction's gid and runs the hooks:
//
//	BeforeTransaction  insert the order PENDING with the gid
//	Commit             UPDATE orders SET status = 'PAID'   WHERE gid = ? AND status = 'PENDING'
//	Rollback           UPDATE orders SET status = 'FAILED' WHERE gid = ? AND status = 'PENDING'
//
// The handler waits up to Config.Wait for the outcome; when it is not known by then the order stays
// PENDING and the Reconciler (run by the sweeper) settles it later by asking DTM, through the same hooks.

// Order statuses.
const (
	statusPending = "PENDING"
	statusPaid    = "PAID"
	statusFailed  = "FAILED"
)

// Scopes of the records the initiators keep (the httpx middleware's scopes are the routes).
const (
	scopeSaga = "order-pay-inventory/saga"
	scopeTCC  = "order-pay-inventory/tcc"
)

// orderRequest is the body of POST /api/orders and /api/orders/tcc.
type orderRequest struct {
	UserID string `json:"user_id"`
	SKU    string `json:"sku"`
	Qty    int64  `json:"qty"`
	Amount int64  `json:"amount"` // cents
}

func (o *orderRequest) validate() error {
	switch {
	case !idRE.MatchString(o.UserID):
		return errors.New(`user_id: 1 to 64 letters, digits, "_", "." or "-"`)
	case !idRE.MatchString(o.SKU):
		return errors.New(`sku: 1 to 64 letters, digits, "_", "." or "-"`)
	case o.Qty < 1 || o.Qty > 1_000_000:
		return errors.New("qty: 1 to 1000000")
	case o.Amount < 1 || o.Amount > 1_000_000_000_00:
		return errors.New("amount: 1 to 100000000000 cents")
	}
	return nil
}

// created is the 201 answer to an order request.
type created struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	GID     string `json:"gid"`
}

// order is the JSON of GET /api/orders/{order_id}.
type order struct {
	OrderID   string    `json:"order_id"`
	UserID    string    `json:"user_id"`
	SKU       string    `json:"sku"`
	Qty       int64     `json:"qty"`
	Amount    int64     `json:"amount"`
	Status    string    `json:"status"`
	GID       string    `json:"gid"`
	CreatedAt time.Time `json:"created_at"`
}

// orders is the order service.
type orders struct {
	db        *database
	table     string
	publicURL string
	cfg       *Config
	sagas     *saga.Initiator
	tccs      *tcc.Global
	logger    *slog.Logger
	now       func() time.Time
	// unreadable counts replays whose order could not be found (see answer).
	unreadable atomic.Int64
}

// draft is the order a request is about to create; the BeforeTransaction hook inserts it with the gid.
type draft struct {
	orderRequest
	id       string
	gid      string
	inserted bool
	// started is set when the initiator built the transaction to start it (it calls the saga's Steps
	// and the TCC's Options only then): unset, nothing reached DTM.
	started bool
}

type draftKey struct{}

// lifecycle returns the hooks that make an order's status follow its global transaction.
func (o *orders) lifecycle(guard *idemkit.Guard) *hooks.Lifecycle {
	return &hooks.Lifecycle{
		Guard:      guard,
		Before:     hooks.BeforeTransactionFunc(o.insertOrder),
		OnCommit:   hooks.CommitFunc(func(ctx context.Context, t *hooks.Txn, _ []byte) error { return o.settle(ctx, t.GID, statusPaid) }),
		OnRollback: hooks.RollbackFunc(func(ctx context.Context, t *hooks.Txn, _ error) error { return o.settle(ctx, t.GID, statusFailed) }),
	}
}

// insertOrder is the BeforeTransaction hook: the order exists, PENDING, before DTM hears of its gid.
func (o *orders) insertOrder(ctx context.Context, t *hooks.Txn) error {
	d, ok := ctx.Value(draftKey{}).(*draft)
	if !ok {
		return errors.New("no order to create in the context")
	}
	err := o.db.db.WithContext(ctx).Exec("INSERT INTO "+o.table+" (id, user_id, sku, qty, amount, status, gid, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		d.id, d.UserID, d.SKU, d.Qty, d.Amount, statusPending, t.GID, o.now().UTC()).Error
	if err != nil {
		return fmt.Errorf("inserting order %s: %w", d.id, err)
	}
	d.inserted = true
	return nil
}

// settle is the Commit and Rollback hook. It is idempotent (the initiator and the reconciler may both
// run it) and never moves an order out of PAID or FAILED.
func (o *orders) settle(ctx context.Context, gid, status string) error {
	err := o.db.db.WithContext(ctx).Exec("UPDATE "+o.table+" SET status = ? WHERE gid = ? AND status = ?", status, gid, statusPending).Error
	if err != nil {
		return fmt.Errorf("marking the order of %s %s: %w", gid, status, err)
	}
	return nil
}

func (o *orders) get(ctx context.Context, id string) (order, error) {
	v := order{OrderID: id}
	row := o.db.db.WithContext(ctx).Raw("SELECT user_id, sku, qty, amount, status, gid, created_at FROM "+o.table+" WHERE id = ?", id).Row()
	if err := row.Scan(&v.UserID, &v.SKU, &v.Qty, &v.Amount, &v.Status, &v.GID, &v.CreatedAt); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return v, errNotFound
		}
		return v, fmt.Errorf("reading order %s: %w", id, err)
	}
	v.CreatedAt = v.CreatedAt.UTC()
	return v, nil
}

// handleGet answers GET /api/orders/{order_id}.
func (o *orders) handleGet(w http.ResponseWriter, r *http.Request) {
	v, err := o.get(r.Context(), chi.URLParam(r, "order_id"))
	switch {
	case errors.Is(err, errNotFound):
		writeProblem(w, http.StatusNotFound, "not-found", "no such order")
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// handleCreate answers POST /api/orders (tcc false: a saga) and POST /api/orders/tcc.
func (o *orders) handleCreate(tccMode bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req orderRequest
		if err := decodeJSON(r, &req); err != nil {
			writeDecodeError(w, err)
			return
		}
		if err := req.validate(); err != nil {
			writeProblem(w, http.StatusBadRequest, "bad-request", err.Error())
			return
		}
		// The middleware already checked the key; the initiator's record uses it too, so even a
		// handler run again after a 5xx cannot start a second transaction for it.
		key, err := httpx.Header(httpx.DefaultHeader)(r)
		if err != nil {
			writeProblem(w, http.StatusBadRequest, "bad-request", "Idempotency-Key: "+err.Error())
			return
		}
		// The order's id and its transaction's gid are chosen now: they are the initiator's result,
		// stored with its claim, so whoever settles the record — this request, or the reconciler after
		// this process died — leaves what a retry of the key needs to answer with this order.
		d := &draft{orderRequest: req, id: newOrderID(), gid: txstatus.NewGID()}
		// The work goes on when the client goes away: its retry will get the stored answer.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), o.cfg.Wait+30*time.Second)
		defer cancel()
		ctx = context.WithValue(ctx, draftKey{}, d)
		result, _ := json.Marshal(initiatorResult{OrderID: d.id, GID: d.gid})

		scope := scopeSaga
		if !tccMode {
			// A saga of this key that ran and was refused is the key's answer (see earlierSaga).
			prev, inFlight, err := o.earlierSaga(ctx, key)
			switch {
			case err != nil:
				o.logger.WarnContext(ctx, "reading the key's earlier saga", "error", err)
				writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the order could not be created; retry with the same key")
				return
			case inFlight:
				writeInFlight(w)
				return
			case prev.OrderID != "":
				o.writeCreated(ctx, w, prev.OrderID, prev.GID)
				return
			}
		}
		var out hooks.Outcome
		if tccMode {
			scope = scopeTCC
			out, err = o.tccs.Run(ctx, tcc.RunParams{
				Call:    idemkit.Call{Scope: scope, Key: key},
				GID:     d.gid,
				Options: func(t *dtmcli.Tcc) { d.started = true; o.tccOptions(t) },
				Tries:   func(t *dtmcli.Tcc) error { return o.tries(t, d) },
				Result:  result,
			})
		} else {
			out, err = o.sagas.Submit(ctx, saga.SubmitParams{
				Call:   idemkit.Call{Scope: scope, Key: key},
				GID:    d.gid,
				Steps:  func(s *dtmcli.Saga) { d.started = true; o.steps(s, d) },
				Result: result,
			})
		}
		o.answer(ctx, w, d, idemkit.Call{Scope: scope, Key: key}, out, err)
	}
}

// initiatorResult is the result the initiators store for a key: the order it created and its gid.
type initiatorResult struct {
	OrderID string `json:"order_id"`
	GID     string `json:"gid"`
}

// replayedOrder finds the order an earlier run of call created, from the initiator's replayed result;
// when the record is REJECTED (rejected: a TCC try refused the order), which stores the refusal and no
// result, or when the result cannot be read (a record settled without one, by an older version, which
// is logged), from the gid on the record and the order that carries it. It returns an error when neither
// tells.
func (o *orders) replayedOrder(ctx context.Context, call idemkit.Call, result []byte, rejected bool) (initiatorResult, error) {
	var res initiatorResult
	jerr := json.Unmarshal(result, &res)
	if jerr == nil && res.OrderID != "" {
		return res, nil
	}
	unreadable := !rejected || len(result) > 0
	rec, err := o.sagas.Lifecycle.Guard.Get(ctx, call.Scope, call.Key)
	if err != nil {
		return res, fmt.Errorf("the stored result %q cannot be read (%v), and the record cannot either: %w", result, jerr, err)
	}
	res = initiatorResult{GID: rec.GID}
	row := o.db.db.WithContext(ctx).Raw("SELECT id FROM "+o.table+" WHERE gid = ?", rec.GID).Row()
	if err := row.Scan(&res.OrderID); err != nil {
		return res, fmt.Errorf("the stored result %q cannot be read (%v), and no order carries the record's gid %q: %w", result, jerr, rec.GID, err)
	}
	if unreadable {
		o.logger.WarnContext(ctx, "initiator result unreadable; found the order by the record's gid", "result", string(result), "gid", rec.GID, "order_id", res.OrderID)
	}
	return res, nil
}

// earlierSaga tells how the saga the key last started answers a run of the handler: with its order
// when it ran and rolled back; in flight while its record is PROCESSING; else not at all (OrderID "",
// inFlight false: the initiator answers).
//
// A saga that rolled back leaves its record FAILED, which lets the key run again (package saga: a
// retry submits a new saga); the middleware's stored 201 FAILED is what normally answers the key's
// retries. When that answer was never stored (the service was killed while DTM rolled the saga back,
// or the first run's answer was a 5xx), the handler runs again once the reconciler settled the
// record, and a new saga would place the order anew: charged this time, had the account been topped
// up. In this example a saga rolls back only when a step refused it (DTM retries every
// other failure), which is the order's answer. A saga that never started (DTM unreachable, or a gid
// the reconciler fenced: DTM knows nothing of it, or reports it with none of its steps) was answered
// 503, and is placed anew. A PROCESSING record is answered in flight here, as the initiator would: were
// the reconciler to settle it FAILED between this read and the initiator's claim, the claim would take
// the key over and start a second saga.
func (o *orders) earlierSaga(ctx context.Context, key string) (_ initiatorResult, inFlight bool, _ error) {
	rec, err := o.sagas.Lifecycle.Guard.Get(ctx, scopeSaga, key)
	switch {
	case errors.Is(err, idemkit.ErrNotFound):
		return initiatorResult{}, false, nil
	case err != nil:
		return initiatorResult{}, false, err
	case rec.GID == "":
		return initiatorResult{}, false, nil
	case rec.Status == idemkit.StatusProcessing:
		return initiatorResult{}, true, nil
	case rec.Status != idemkit.StatusFailed:
		return initiatorResult{}, false, nil
	}
	info, err := o.sagas.Status.Query(ctx, rec.GID)
	if err != nil {
		return initiatorResult{}, false, fmt.Errorf("asking DTM about %s: %w", rec.GID, err)
	}
	if info.Status != txstatus.Failed || info.RanNothingFor("saga") {
		return initiatorResult{}, false, nil
	}
	res := initiatorResult{GID: rec.GID}
	err = o.db.db.WithContext(ctx).Raw("SELECT id FROM "+o.table+" WHERE gid = ?", rec.GID).Row().Scan(&res.OrderID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return initiatorResult{}, false, nil
	case err != nil:
		return initiatorResult{}, false, fmt.Errorf("reading the order of %s: %w", rec.GID, err)
	}
	return res, false, nil
}

// answer writes the 201 for an order that exists (whatever Run reported: the order is created and its
// status is the database's), or the error that kept it from being created.
func (o *orders) answer(ctx context.Context, w http.ResponseWriter, d *draft, call idemkit.Call, out hooks.Outcome, err error) {
	id, gid := d.id, d.gid
	switch {
	case out.Replayed:
		// The initiator's record already finished for this key (this handler ran again after a 5xx
		// or a crash): answer with the order it created — also when a try refused it (REJECTED: see
		// tries).
		res, rerr := o.replayedOrder(ctx, call, out.Result, errors.Is(err, idemkit.ErrRejected))
		if rerr != nil && errors.Is(err, idemkit.ErrRejected) {
			// A permanent refusal with no order behind it (none of this example's hooks refuses
			// permanently, but the answer must be stable): 422, which the middleware stores and
			// replays.
			writeProblem(w, http.StatusUnprocessableEntity, "rejected", err.Error())
			return
		}
		if rerr != nil {
			// Never silent: the retry would get the same answer forever. The record says the order
			// exists; only an operator can tell which one.
			o.unreadable.Add(1)
			o.logger.ErrorContext(ctx, "cannot tell which order this key created", "scope", call.Scope, "error", rerr)
			writeProblem(w, http.StatusInternalServerError, "internal", "the order of this key exists but cannot be found; an operator was alerted")
			return
		}
		id, gid = res.OrderID, res.GID
	case errors.Is(err, idemkit.ErrRejected) && d.inserted:
		// A try refused the order (see tries): DTM cancelled it, the order is FAILED.
	case errors.Is(err, idemkit.ErrRejected):
		// A permanent refusal before the order existed (see above): 422.
		writeProblem(w, http.StatusUnprocessableEntity, "rejected", err.Error())
		return
	case d.inserted && err != nil && (!d.started || errors.Is(err, txstatus.ErrNotSent)):
		// The order was inserted, but its transaction never started (DTM could not be asked a second
		// time whether the gid is free — a first failure runs no hook, so no order is inserted —, the
		// claim was lost before the start, or the submit — the TCC's prepare —
		// could not even connect to DTM): the Rollback hook marks it FAILED
		// now or, through the sweeper (the reconciler, or the orphan task when the hook failed with
		// the record rolled back: see orphanTask), soon, and the key is free again for the initiator. An
		// outage, not the order's outcome: a 201 FAILED would be stored by the middleware and replayed
		// to every retry. 503: the retry creates the order anew.
		o.logger.WarnContext(ctx, "order not started", "order_id", id, "gid", d.gid, "error", err)
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the order could not be started; retry with the same key")
		return
	case d.inserted && err != nil && !errors.Is(err, context.DeadlineExceeded):
		// The order's transaction started (or may have: the answer to its start was lost), but its
		// outcome could not be learned or recorded — DTM unreachable during the wait (not a wait that
		// just ran out: that is the PENDING below), a hook or the record's write failed: the reconciler
		// settles the record. Not a 201 PENDING, which the middleware would replay to every retry for
		// ever, also when the transaction turns out never to have run (fenced) or DTM cancels it (a TCC
		// whose tries the outage cut short): an outage would be the order's final answer. 503: the
		// retry gets 503 in-flight until the reconciler settled the record, then the order's 201 — or,
		// for a transaction that never ran, a new order.
		o.logger.WarnContext(ctx, "order created, outcome not known yet", "order_id", id, "gid", d.gid, "error", err)
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the order's outcome is not known yet; retry with the same key")
		return
	case d.inserted && call.Scope == scopeTCC && out.Status == txstatus.Failed:
		// DTM cancelled the TCC, and no try refused it (a refusal is ErrRejected, above): a try failed
		// otherwise (the service unreachable, its database down). The initiator's record is FAILED so
		// that the key's retry places the order anew (see tries); a 201 FAILED would be stored by the
		// middleware and replayed to every retry: an outage as the order's final answer. 503: the
		// order stays FAILED, the retry creates it anew.
		o.logger.WarnContext(ctx, "order cancelled by a failed try", "order_id", id, "gid", d.gid, "reason", out.Reason)
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the order could not be placed; retry with the same key")
		return
	case d.inserted:
		// The order exists: PAID or FAILED, or PENDING when DTM had not finished within Config.Wait.
		if err != nil {
			o.logger.WarnContext(ctx, "order created, outcome not known within the wait", "order_id", id, "gid", d.gid, "error", err)
		}
	case errors.Is(err, idemkit.ErrInFlight):
		writeInFlight(w)
		return
	default:
		o.logger.WarnContext(ctx, "order not created", "error", err)
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the order could not be created; retry with the same key")
		return
	}
	o.writeCreated(ctx, w, id, gid)
}

// writeInFlight answers that the initiator's record of the key is held by an earlier run of it whose
// transaction is still running. 503, not 409: the middleware stores 4xx answers and would replay this
// one.
func writeInFlight(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeProblem(w, http.StatusServiceUnavailable, "in-flight", "an order for this key is still being processed; retry later")
}

// writeCreated answers 201 with the order id of gid, its status read from the database.
func (o *orders) writeCreated(ctx context.Context, w http.ResponseWriter, id, gid string) {
	v, gerr := o.get(ctx, id)
	if gerr != nil {
		// Created, but it cannot be read back now: answer with what is known (GET shows the rest).
		o.logger.WarnContext(ctx, "reading the order", "order_id", id, "gid", gid, "error", gerr)
		v = order{OrderID: id, Status: statusPending, GID: gid}
	}
	w.Header().Set("Location", "/api/orders/"+id)
	writeJSON(w, http.StatusCreated, created{OrderID: id, Status: v.Status, GID: v.GID})
}

// steps builds the saga: inventory first, then payment; DTM compensates in reverse order.
func (o *orders) steps(s *dtmcli.Saga, d *draft) {
	u := o.publicURL
	s.Add(u+pathInventoryDeduct, u+pathInventoryRestore, stockMove{OrderID: d.id, SKU: d.SKU, Qty: d.Qty})
	s.Add(u+pathPaymentDebit, u+pathPaymentRefund, moneyMove{OrderID: d.id, UserID: d.UserID, Amount: d.Amount})
	s.RetryInterval = seconds(o.cfg.RetryInterval)
	s.RequestTimeout = requestTimeout
}

// tccOptions sets the TCC's options before it is prepared.
func (o *orders) tccOptions(t *dtmcli.Tcc) {
	t.RetryInterval = seconds(o.cfg.RetryInterval)
	t.TimeoutToFail = seconds(o.cfg.TimeoutToFail)
	t.RequestTimeout = requestTimeout
}

// tries calls the TCC's try branches; an error makes the initiator abort, and DTM cancels what was
// tried. A try the branch refused (409 FAILURE: insufficient stock or balance, an unknown SKU or
// account) is permanent: it is the order's answer, so the initiator's record is REJECTED — by the
// initiator, or by the reconciler from DTM's rollback reason when the service died meanwhile — and a
// retry of the key answers this order instead of placing it anew. Any other try error (the service
// unreachable) leaves the record FAILED: the retry places the order anew.
func (o *orders) tries(t *dtmcli.Tcc, d *draft) error {
	u := o.publicURL
	if _, err := t.CallBranch(stockMove{OrderID: d.id, SKU: d.SKU, Qty: d.Qty},
		u+pathInventoryReserve, u+pathInventoryConfirm, u+pathInventoryCancel); err != nil {
		return tryError("inventory reserve", err)
	}
	if _, err := t.CallBranch(moneyMove{OrderID: d.id, UserID: d.UserID, Amount: d.Amount},
		u+pathPaymentFreeze, u+pathPaymentConfirm, u+pathPaymentCancel); err != nil {
		return tryError("payment freeze", err)
	}
	return nil
}

// tryError is the error of the try what: permanent when the branch refused it (see tries).
func tryError(what string, err error) error {
	err = fmt.Errorf("%s: %w", what, err)
	if errors.Is(err, dtmcli.ErrFailure) {
		return idemkit.Permanent(err)
	}
	return err
}

// requestTimeout is the per-transaction timeout (seconds) of the calls to DTM and of DTM's calls to
// the branches.
const requestTimeout = 5

// seconds rounds d up to whole seconds, as DTM counts them.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

func newOrderID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "ord_" + hex.EncodeToString(b[:])
}

// newStatusClient returns the DTM query client shared by the initiators and the reconciler.
func newStatusClient(server string) *txstatus.Client {
	return &txstatus.Client{Server: server, HTTP: &http.Client{Timeout: 5 * time.Second}, PollInterval: 50 * time.Millisecond}
}
