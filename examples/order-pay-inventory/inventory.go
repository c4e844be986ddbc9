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

// The inventory service: per SKU a stock and a reserved quantity (held by a TCC try until its confirm
// or cancel). Like the payment service, its branch functions run inside the barrier's local transaction
// and change rows with single conditional UPDATEs.

// stockMove is the payload of every inventory branch.
type stockMove struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int64  `json:"qty"`
}

// item is the JSON of a SKU's inventory.
type item struct {
	SKU      string `json:"sku"`
	Stock    int64  `json:"stock"`
	Reserved int64  `json:"reserved"`
}

// Permanent business failures of the inventory service.
var (
	errOutOfStock = errors.New("insufficient stock")
	errUnknownSKU = errors.New("unknown SKU")
)

type inventory struct {
	db    *database
	table string
}

func (v *inventory) getItem(ctx context.Context, db *gorm.DB, sku string) (item, error) {
	it := item{SKU: sku}
	row := db.WithContext(ctx).Raw("SELECT stock, reserved FROM "+v.table+" WHERE sku = ?", sku).Row()
	if err := row.Scan(&it.Stock, &it.Reserved); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return it, errNotFound
		}
		return it, fmt.Errorf("reading inventory of %s: %w", sku, err)
	}
	return it, nil
}

// handleGet answers GET /api/inventory/{sku}.
func (v *inventory) handleGet(w http.ResponseWriter, r *http.Request) {
	it, err := v.getItem(r.Context(), v.db.db, chi.URLParam(r, "sku"))
	switch {
	case errors.Is(err, errNotFound):
		writeProblem(w, http.StatusNotFound, "not-found", "no such SKU")
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	default:
		writeJSON(w, http.StatusOK, it)
	}
}

// handlePut answers PUT /api/inventory/{sku} {"stock":N}: it creates the SKU or sets its stock (the
// reserved quantity is kept).
func (v *inventory) handlePut(w http.ResponseWriter, r *http.Request) {
	sku := chi.URLParam(r, "sku")
	var in struct {
		Stock *int64 `json:"stock"`
	}
	if err := decodeJSON(r, &in); err != nil {
		writeDecodeError(w, err)
		return
	}
	if !idRE.MatchString(sku) || in.Stock == nil || *in.Stock < 0 {
		writeProblem(w, http.StatusBadRequest, "bad-request", `want PUT /api/inventory/{sku} {"stock":N}, N >= 0, sku of letters, digits, "_", "." or "-"`)
		return
	}
	err := v.db.db.WithContext(r.Context()).Exec(v.db.upsert(v.table, "sku", "stock", "reserved"), sku, *in.Stock).Error
	if err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	v.handleGet(w, r)
}

func (v *inventory) refusal(ctx context.Context, tx *gorm.DB, m stockMove) error {
	it, err := v.getItem(ctx, tx, m.SKU)
	switch {
	case errors.Is(err, errNotFound):
		return idemkit.Permanent(fmt.Errorf("%w %q", errUnknownSKU, m.SKU))
	case err != nil:
		return err
	}
	return idemkit.Permanent(fmt.Errorf("%w: %s has %d in stock, the order needs %d", errOutOfStock, m.SKU, it.Stock, m.Qty))
}

// deduct is the saga action: take the quantity out of stock.
func (v *inventory) deduct(ctx context.Context, tx *gorm.DB, m stockMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+v.table+" SET stock = stock - ? WHERE sku = ? AND stock >= ?", m.Qty, m.SKU, m.Qty)
	if err != nil || ok {
		return err
	}
	return v.refusal(ctx, tx, m)
}

// restore is the saga compensation: put the quantity back.
func (v *inventory) restore(ctx context.Context, tx *gorm.DB, m stockMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+v.table+" SET stock = stock + ? WHERE sku = ?", m.Qty, m.SKU)
	return mustChange(ok, err, "restore", m)
}

// reserve is the TCC try: move the quantity from stock to reserved.
func (v *inventory) reserve(ctx context.Context, tx *gorm.DB, m stockMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+v.table+" SET stock = stock - ?, reserved = reserved + ? WHERE sku = ? AND stock >= ?",
		m.Qty, m.Qty, m.SKU, m.Qty)
	if err != nil || ok {
		return err
	}
	return v.refusal(ctx, tx, m)
}

// confirm is the TCC confirm: the reserved quantity is shipped.
func (v *inventory) confirm(ctx context.Context, tx *gorm.DB, m stockMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+v.table+" SET reserved = reserved - ? WHERE sku = ? AND reserved >= ?", m.Qty, m.SKU, m.Qty)
	return mustChange(ok, err, "inventory confirm", m)
}

// cancel is the TCC cancel: the reserved quantity goes back to stock.
func (v *inventory) cancel(ctx context.Context, tx *gorm.DB, m stockMove) error {
	ok, err := exec(ctx, tx, "UPDATE "+v.table+" SET stock = stock + ?, reserved = reserved - ? WHERE sku = ? AND reserved >= ?",
		m.Qty, m.Qty, m.SKU, m.Qty)
	return mustChange(ok, err, "inventory cancel", m)
}
