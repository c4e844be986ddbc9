//go:build unix

package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// tables is where the order service's tables live: a MariaDB database or a SQLite file.
type tables struct {
	mysqlDSN   string
	sqlitePath string
}

func (t tables) open() (*gorm.DB, error) {
	cfg := &gorm.Config{Logger: logger.Discard}
	if t.mysqlDSN != "" {
		return gorm.Open(mysql.Open(t.mysqlDSN), cfg)
	}
	return gorm.Open(sqlite.Open(t.sqlitePath+"?_pragma=busy_timeout(10000)"), cfg)
}

// quiesce waits, at most limit, until no order is PENDING and no record PROCESSING, and returns how
// long it took.
func (t tables) quiesce(ctx context.Context, limit time.Duration) (time.Duration, error) {
	db, err := t.open()
	if err != nil {
		return 0, err
	}
	defer closeGorm(db)
	start := time.Now()
	for {
		var pending, processing int64
		err1 := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE status = 'PENDING'").Scan(&pending).Error
		err2 := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM idemkit_records WHERE status = 'PROCESSING'").Scan(&processing).Error
		if err1 == nil && err2 == nil && pending == 0 && processing == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > limit || ctx.Err() != nil {
			return time.Since(start), fmt.Errorf("after %s: %d orders PENDING, %d records PROCESSING (%v, %v)", limit, pending, processing, err1, err2)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func closeGorm(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// DTMCheck is what the DTM scenario's checker read and found.
type DTMCheck struct {
	Orders      int `json:"orders"`       // order rows
	Paid        int `json:"paid"`         // PAID orders
	Failed      int `json:"failed"`       // FAILED orders (compensated or cancelled)
	RetriedKeys int `json:"retried_keys"` // keys with more than one order (a retry after a rollback)
	Answers     int `json:"answers"`      // 201 answers checked against the tables
	BarrierRows int `json:"barrier_rows"` // barrier rows checked
	Accounts    int `json:"accounts"`     // accounts whose money was checked
	SKUs        int `json:"skus"`         // SKUs whose stock was checked
	// Violations are the broken invariants (kinds as in [Violation]).
	Violations []Violation `json:"violations"`
}

type dbOrder struct {
	ID     string `gorm:"column:id"`
	UserID string `gorm:"column:user_id"`
	SKU    string `gorm:"column:sku"`
	Status string `gorm:"column:status"`
	GID    string `gorm:"column:gid"`
	Qty    int64  `gorm:"column:qty"`
	Amount int64  `gorm:"column:amount"`
}

// barrierRow is one row of the barrier table.
type barrierRow struct {
	GID      string `gorm:"column:gid"`
	BranchID string `gorm:"column:branch_id"`
	Op       string `gorm:"column:op"`
	Reason   string `gorm:"column:reason"`
}

// checkOrders reads the tables and verifies, against every key's request and every answer the
// clients got:
//
//   - every key was answered 201, every 201 of a key names the same order, and that order is the
//     key's request (user, SKU, quantity, amount) and says what the tables say once settled;
//   - per key at most one PAID order, and none besides the answered one;
//   - money and stock are conserved: every account holds its opening balance minus its PAID orders,
//     every SKU its opening stock minus its PAID orders, nothing frozen or reserved;
//   - no order PENDING, no record PROCESSING, no answer a 5xx (other than 503) or unexpected;
//   - the barrier: every branch of a FAILED order that ran (action, try) was compensated
//     (compensate, cancel); no PAID order has a compensation; every try of a PAID TCC confirmed; no
//     barrier row without its order.
func checkOrders(ctx context.Context, t tables, l *orderLoad) (*DTMCheck, error) {
	db, err := t.open()
	if err != nil {
		return nil, err
	}
	defer closeGorm(db)
	db = db.WithContext(ctx)
	var orders []dbOrder
	if err := db.Raw("SELECT id, user_id, sku, qty, amount, status, gid FROM orders").Scan(&orders).Error; err != nil {
		return nil, err
	}
	var accounts []struct {
		UserID  string `gorm:"column:user_id"`
		Balance int64  `gorm:"column:balance"`
		Frozen  int64  `gorm:"column:frozen"`
	}
	if err := db.Raw("SELECT user_id, balance, frozen FROM accounts").Scan(&accounts).Error; err != nil {
		return nil, err
	}
	var stock []struct {
		SKU      string `gorm:"column:sku"`
		Stock    int64  `gorm:"column:stock"`
		Reserved int64  `gorm:"column:reserved"`
	}
	if err := db.Raw("SELECT sku, stock, reserved FROM inventory").Scan(&stock).Error; err != nil {
		return nil, err
	}
	var barrier []barrierRow
	if err := db.Raw("SELECT gid, branch_id, op, reason FROM barrier").Scan(&barrier).Error; err != nil {
		return nil, err
	}
	var processing int64
	if err := db.Raw("SELECT COUNT(*) FROM idemkit_records WHERE status = 'PROCESSING'").Scan(&processing).Error; err != nil {
		return nil, err
	}

	r := &DTMCheck{Orders: len(orders), BarrierRows: len(barrier)}
	add := func(kind, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	if processing > 0 {
		add(ViolationStuckProcessing, "%d records left PROCESSING", processing)
	}
	keys, answers := l.snapshot()
	byUser := map[string][]dbOrder{}
	byID := map[string]dbOrder{}
	byGID := map[string]dbOrder{}
	paidQty := map[string]int64{}
	for _, o := range orders {
		if o.ID == "" || o.GID == "" || o.UserID == "" {
			return nil, fmt.Errorf("order row read without its id, gid or user: %+v", o)
		}
		byUser[o.UserID] = append(byUser[o.UserID], o)
		byID[o.ID], byGID[o.GID] = o, o
		switch o.Status {
		case "PAID":
			r.Paid++
			paidQty[o.SKU] += o.Qty
		case "FAILED":
			r.Failed++
		default:
			add(ViolationStuckProcessing, "order %s (gid %s) left %s", o.ID, o.GID, o.Status)
		}
	}
	created := map[string][]orderAnswer{}
	for _, a := range answers {
		switch a.Class {
		case OrderCreated:
			created[a.Key] = append(created[a.Key], a)
		case OrderServerError, OrderUnexpected:
			add(ViolationUnexpectedAnswer, "key %s (%s): %d %s", a.Key, a.Phase, a.Status, a.Detail)
		}
	}
	balances := map[string]struct{ Balance, Frozen int64 }{}
	for _, a := range accounts {
		balances[a.UserID] = struct{ Balance, Frozen int64 }{a.Balance, a.Frozen}
	}
	users := map[string]bool{}
	for _, k := range keys {
		users[k.Req.UserID] = true
		mine := byUser[k.Req.UserID]
		if len(mine) > 1 {
			r.RetriedKeys++
		}
		var paid []dbOrder
		var spent int64
		for _, o := range mine {
			if o.Status == "PAID" {
				paid = append(paid, o)
				spent += o.Amount
			}
		}
		if len(paid) > 1 {
			add(ViolationDuplicateEffect, "key %s: %d PAID orders %v", k.Key, len(paid), paid)
		}
		if acct, ok := balances[k.Req.UserID]; ok {
			r.Accounts++
			if acct.Balance != k.Balance-spent || acct.Frozen != 0 {
				add(ViolationNotConserved, "key %s: account %s holds %d (frozen %d), want %d - %d paid", k.Key, k.Req.UserID, acct.Balance, acct.Frozen, k.Balance, spent)
			}
		} else if len(mine) > 0 {
			add(ViolationOrphan, "key %s: orders %v but no account", k.Key, mine)
		}
		ans := created[k.Key]
		if len(ans) == 0 {
			add(ViolationUnsettled, "key %s (%s) was never answered with an order", k.Key, kind(k))
			continue
		}
		id := ans[0].OrderID
		for _, a := range ans {
			r.Answers++
			if a.OrderID != id {
				add(ViolationInconsistentAnswer, "key %s was answered order %s and order %s", k.Key, id, a.OrderID)
			}
		}
		o, ok := byID[id]
		switch {
		case !ok:
			add(ViolationMissingEffect, "key %s was answered order %s, which does not exist", k.Key, id)
			continue
		case o.UserID != k.Req.UserID || o.SKU != k.Req.SKU || o.Qty != k.Req.Qty || o.Amount != k.Req.Amount:
			add(ViolationInconsistentAnswer, "key %s was answered order %s, which is %+v, not its request %+v", k.Key, id, o, k.Req)
		}
		for _, a := range ans {
			if (a.State == "PAID" || a.State == "FAILED") && a.State != o.Status {
				add(ViolationInconsistentAnswer, "key %s: answered order %s %s, which is %s", k.Key, id, a.State, o.Status)
				break
			}
		}
		if o.Status == "PAID" && (len(paid) != 1 || paid[0].ID != id) || o.Status == "FAILED" && len(paid) != 0 {
			add(ViolationDuplicateEffect, "key %s was answered order %s (%s), but its PAID orders are %v", k.Key, id, o.Status, paid)
		}
	}
	for u, mine := range byUser {
		if !users[u] {
			add(ViolationOrphan, "orders %v of user %s, whom no key created", mine, u)
		}
	}
	opening := map[string]int64{}
	for _, s := range plentySKUs {
		opening[s] = plentyStock
	}
	for _, s := range scarceSKUs {
		opening[s] = scarceStock
	}
	for _, s := range stock {
		r.SKUs++
		if s.Stock != opening[s.SKU]-paidQty[s.SKU] || s.Reserved != 0 {
			add(ViolationNotConserved, "SKU %s holds %d (reserved %d), want %d - %d paid", s.SKU, s.Stock, s.Reserved, opening[s.SKU], paidQty[s.SKU])
		}
	}

	// The barrier, branch by branch.
	type branch struct{ gid, id string }
	ops := map[branch]map[string]string{} // op → reason
	for _, b := range barrier {
		if b.GID == "" || b.BranchID == "" || b.Op == "" {
			return nil, fmt.Errorf("barrier row read without its gid, branch or op: %+v", b)
		}
		k := branch{b.GID, b.BranchID}
		if ops[k] == nil {
			ops[k] = map[string]string{}
		}
		ops[k][b.Op] = b.Reason
	}
	bks := make([]branch, 0, len(ops))
	for k := range ops {
		bks = append(bks, k)
	}
	sort.Slice(bks, func(i, j int) bool { return bks[i].gid+bks[i].id < bks[j].gid+bks[j].id })
	for _, k := range bks {
		o, ok := byGID[k.gid]
		if !ok {
			add(ViolationOrphan, "barrier rows %v of gid %s, which no order carries", ops[k], k.gid)
			continue
		}
		b := ops[k]
		ran := func(op string) bool { return b[op] == op } // the op's own row: its business committed
		switch o.Status {
		case "FAILED":
			if ran("action") && b["compensate"] == "" || ran("try") && b["cancel"] == "" {
				add(ViolationOrphan, "order %s FAILED, branch %s of %s ran (%v) and was never compensated", o.ID, k.id, k.gid, b)
			}
		case "PAID":
			if b["compensate"] != "" || b["cancel"] != "" {
				add(ViolationInconsistentAnswer, "order %s PAID, yet branch %s of %s was compensated (%v)", o.ID, k.id, k.gid, b)
			}
			if ran("try") && b["confirm"] == "" {
				add(ViolationOrphan, "order %s PAID, branch %s of %s tried but never confirmed (%v)", o.ID, k.id, k.gid, b)
			}
		}
	}
	return r, nil
}

func kind(k *orderKey) string {
	if k.TCC {
		return "tcc"
	}
	return "saga"
}

// createDatabase creates database name on the server at serverDSN.
func createDatabase(ctx context.Context, serverDSN, name string) error {
	admin, err := sql.Open("mysql", serverDSN)
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+name); err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	return nil
}
