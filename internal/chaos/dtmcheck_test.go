//go:build unix

package chaos

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// TestDTMCheckerCatches feeds the DTM scenario's checker tables with planted faults and expects each
// to be reported: a failed order whose action ran and was never compensated, a key with two PAID
// orders, money taken from an account for an order it was told failed, an answer naming an order
// that does not exist, two answers naming different orders, and a PAID order with a compensation.
// A clean key next to them raises nothing.
func TestDTMCheckerCatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shop.db")
	db, err := gorm.Open(sqlite.Open(path), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE orders (id TEXT, user_id TEXT, sku TEXT, qty INTEGER, amount INTEGER, status TEXT, gid TEXT)",
		"CREATE TABLE accounts (user_id TEXT, balance INTEGER, frozen INTEGER)",
		"CREATE TABLE inventory (sku TEXT, stock INTEGER, reserved INTEGER)",
		"CREATE TABLE barrier (gid TEXT, branch_id TEXT, op TEXT, reason TEXT)",
		"CREATE TABLE idemkit_records (status TEXT)",
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if err := db.Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	l := &orderLoad{}
	key := func(name, user string, balance, amount int64, answers ...string) {
		k := &orderKey{Key: name, Req: orderReq{UserID: user, SKU: "plenty-0", Qty: 1, Amount: amount}, Balance: balance}
		l.keys = append(l.keys, k)
		for _, id := range answers {
			l.answers = append(l.answers, orderAnswer{Key: name, Phase: "settle", Class: OrderCreated, OrderID: id})
		}
	}
	// clean: paid once, answered consistently.
	key("clean", "u1", 1000, 100, "o1", "o1")
	exec("INSERT INTO orders VALUES ('o1', 'u1', 'plenty-0', 1, 100, 'PAID', 'g1')")
	exec("INSERT INTO accounts VALUES ('u1', 900, 0)")
	exec("INSERT INTO barrier VALUES ('g1', '01', 'action', 'action'), ('g1', '02', 'action', 'action')")
	// uncompensated: FAILED, its first action ran, no compensation row.
	key("uncompensated", "u2", 1000, 100, "o2")
	exec("INSERT INTO orders VALUES ('o2', 'u2', 'plenty-0', 1, 100, 'FAILED', 'g2')")
	exec("INSERT INTO accounts VALUES ('u2', 1000, 0)")
	exec("INSERT INTO barrier VALUES ('g2', '01', 'action', 'action'), ('g2', '02', 'action', 'compensate'), ('g2', '02', 'compensate', 'compensate')")
	// twice: two PAID orders for one key, money taken twice.
	key("twice", "u3", 1000, 100, "o3")
	exec("INSERT INTO orders VALUES ('o3', 'u3', 'plenty-0', 1, 100, 'PAID', 'g3'), ('o3b', 'u3', 'plenty-0', 1, 100, 'PAID', 'g3b')")
	exec("INSERT INTO accounts VALUES ('u3', 800, 0)")
	// told failed, charged anyway (and an answer naming another order).
	key("lied", "u4", 1000, 100, "o4", "o4x")
	exec("INSERT INTO orders VALUES ('o4', 'u4', 'plenty-0', 1, 100, 'FAILED', 'g4'), ('o4b', 'u4', 'plenty-0', 1, 100, 'PAID', 'g4b')")
	exec("INSERT INTO accounts VALUES ('u4', 900, 0)")
	// compensated although PAID.
	key("paidcomp", "u5", 1000, 100, "o5")
	exec("INSERT INTO orders VALUES ('o5', 'u5', 'plenty-0', 1, 100, 'PAID', 'g5')")
	exec("INSERT INTO accounts VALUES ('u5', 900, 0)")
	exec("INSERT INTO barrier VALUES ('g5', '01', 'action', 'action'), ('g5', '01', 'compensate', 'compensate')")
	// the stock: five PAID units, and one more unit gone.
	exec("INSERT INTO inventory VALUES ('plenty-0', ?, 0)", plentyStock-6)

	res, err := checkOrders(context.Background(), tables{sqlitePath: path}, l)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, v := range res.Violations {
		t.Log(v)
		kinds = append(kinds, v.Kind)
	}
	for _, want := range []string{ViolationOrphan, ViolationDuplicateEffect, ViolationNotConserved, ViolationInconsistentAnswer} {
		if !slices.Contains(kinds, want) {
			t.Errorf("no %s violation among %q", want, kinds)
		}
	}
	for _, v := range res.Violations {
		if strings.Contains(v.Detail, "clean") || strings.Contains(v.Detail, "g1 ") || strings.Contains(v.Detail, "o1 ") {
			t.Errorf("the clean key was reported: %s", v)
		}
	}
	if res.Paid != 5 || res.Failed != 2 || res.BarrierRows != 7 {
		t.Errorf("read %d PAID, %d FAILED orders, %d barrier rows", res.Paid, res.Failed, res.BarrierRows)
	}
}
