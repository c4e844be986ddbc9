package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// The payment service: accounts with a balance and a frozen amount (held by a TCC try until its confirm
// or cancel). Its branch functions run inside the barrier's local transaction (tx) and change balances
// with single conditional UPDATEs, so concurrent orders never read-modify-write.

// moneyMove is the payload of every payment branch.
type moneyMove struct {
	OrderID string `json:"order_id"`
	UserID  string `json:"user_id"`
	Amount  int64  `json:"amount"`
}

// account is the JSON of an account.
type account struct {
	UserID  string `json:"user_id"`
	Balance int64  `json:"balance"`
	Frozen  int64  `json:"frozen"`
}

// Permanent business failures of the payment service: DTM gets 409 FAILURE, the saga compensates or the
// TCC cancels.
var (
	errInsufficientBalance = errors.New("insufficient balance")
	errUnknownAccount      = errors.New("unknown account")
)

type payment struct {
	db    *database
	table string
}

func (p *payment) getAccount(ctx context.Context, db *gorm.DB, userID string) (account, error) {
	a := account{UserID: userID}
	row := db.WithContext(ctx).Raw("SELECT balance, frozen FROM "+p.table+" WHERE user_id = ?", userID).Row()
	if err := row.Scan(&a.Balance, &a.Frozen); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return a, errNotFound
		}
		return a, fmt.Errorf("reading account %s: %w", userID, err)
	}
	return a, nil
}

// handleGet answers GET /api/accounts/{user_id}.
func (p *payment) handleGet(w http.ResponseWriter, r *http.Request) {
	a, err := p.getAccount(r.Context(), p.db.db, chi.URLParam(r, "user_id"))
	switch {
	case errors.Is(err, errNotFound):
		writeProblem(w, http.StatusNotFound, "not-found", "no such account")
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	default:
		writeJSON(w, http.StatusOK, a)
	}
}

// handlePut answers PUT /api/accounts/{user_id} {"balance":N}: it creates the account or sets its
// balance (the frozen amount is kept). PUT is idempotent by definition and needs no key.
func (p *payment) handlePut(w http.ResponseWriter, r *http.Request) {
	userID := chi.URLParam(r, "user_id")
	var in struct {
		Balance *int64 `json:"balance"`
	}
	if err := decodeJSON(r, &in); err != nil {
		writeDecodeError(w, err)
		return
	}
	if !idRE.MatchString(userID) || in.Balance == nil || *in.Balance < 0 {
		writeProblem(w, http.StatusBadRequest, "bad-request", `want PUT /api/accounts/{user_id} {"balance":N}, N >= 0, user_id of letters, digits, "_", "." or "-"`)
		return
	}
	err := p.db.db.WithContext(r.Context()).Exec(p.db.upsert(p.table, "user_id", "balance", "frozen"), userID, *in.Balance).Error
	if err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	p.handleGet(w, r)
}

// refusal explains why a conditional debit changed nothing: a permanent failure either way.
func (p *payment) refusal(ctx context.Context, tx *gorm.DB, m moneyMove) error {
	a, err := p.getAccount(ctx, tx, m.UserID)
	switch {
	case errors.Is(err, errNotFound):
		return idemkit.Permanent(fmt.Errorf("%w %q", errUnknownAccount, m.UserID))
	case err != nil:
		return err
	}
	return idemkit.Permanent(fmt.Errorf("%w: %s has %d, the order needs %d", errInsufficientBalance, m.UserID, a.Balance, m.Amount))
}

// exec runs a conditional UPDATE and reports whether it changed the row.
func exec(ctx context.Context, tx *gorm.DB, query string, args ...any) (bool, error) {
	res := tx.WithContext(ctx).Exec(query, args...)
	return res.RowsAffected == 1, res.Error
}

// mustChange turns an UPDATE that changed nothing in a branch that must succeed into an error DTM
// retries (500): it can only happen when the data was changed behind the services' back.
func mustChange(changed bool, err error, what string, m any) error {
	if err == nil && !changed {
		err = fmt.Errorf("%s changed nothing for %+v", what, m)
	}
	return err
}

// debit is the saga action: take the amount from the balance.
func (p *payment) debit(ctx context.Context, tx *gorm.DB, m moneyMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+p.table+" SET balance = balance - ? WHERE user_id = ? AND balance >= ?", m.Amount, m.UserID, m.Amount)
	if err != nil || ok {
		return err
	}
	return p.refusal(ctx, tx, m)
}

// refund is the saga compensation: give the amount back.
func (p *payment) refund(ctx context.Context, tx *gorm.DB, m moneyMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+p.table+" SET balance = balance + ? WHERE user_id = ?", m.Amount, m.UserID)
	return mustChange(ok, err, "refund", m)
}

// freeze is the TCC try: move the amount from the balance to the frozen amount.
func (p *payment) freeze(ctx context.Context, tx *gorm.DB, m moneyMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+p.table+" SET balance = balance - ?, frozen = frozen + ? WHERE user_id = ? AND balance >= ?",
		m.Amount, m.Amount, m.UserID, m.Amount)
	if err != nil || ok {
		return err
	}
	return p.refusal(ctx, tx, m)
}

// confirm is the TCC confirm: the frozen amount is spent.
func (p *payment) confirm(ctx context.Context, tx *gorm.DB, m moneyMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+p.table+" SET frozen = frozen - ? WHERE user_id = ? AND frozen >= ?", m.Amount, m.UserID, m.Amount)
	return mustChange(ok, err, "payment confirm", m)
}

// cancel is the TCC cancel: the frozen amount goes back to the balance.
func (p *payment) cancel(ctx context.Context, tx *gorm.DB, m moneyMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+p.table+" SET balance = balance + ?, frozen = frozen - ? WHERE user_id = ? AND frozen >= ?",
		m.Amount, m.Amount, m.UserID, m.Amount)
	return mustChange(ok, err, "payment cancel", m)
}
