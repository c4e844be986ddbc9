package idemtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// envBroken names the defect of the Store TestRunStoreRefusesBrokenStores runs the suite on in its
// child process.
const envBroken = "IDEMTEST_BROKEN_STORE"

// brokenDefects are the defects RunStore must catch, each one a memory Store with that defect.
var brokenDefects = map[string]string{
	"tx-update-ignores-fence": "its transactions' Update overwrites whatever version the record has",
	"tx-delete-ignores-fence": "its transactions' Delete deletes whatever version the record has",
	"tx-insert-overwrites":    "its transactions' Insert overwrites an existing record",
	"update-ignores-fence":    "its Update overwrites whatever version the record has",
	"insert-overwrites":       "its Insert overwrites an existing record",
}

// TestRunStoreRefusesBrokenStores runs RunStore, in a child process, on Stores that break the
// contract in one way each, and fails unless the suite fails every one of them.
func TestRunStoreRefusesBrokenStores(t *testing.T) {
	if defect := os.Getenv(envBroken); defect != "" {
		idemtest.RunStore(t, func(t *testing.T) idemkit.Store { return &brokenStore{memory.NewStore(), defect} })
		return
	}
	for defect, what := range brokenDefects {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunStoreRefusesBrokenStores$", "-test.count=1")
		cmd.Env = append(os.Environ(), envBroken+"="+defect)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			t.Errorf("RunStore passed a Store with a defect: %s", what)
		case !errors.As(err, &exit) || !strings.Contains(string(out), "--- FAIL: TestRunStoreRefusesBrokenStores/"):
			t.Errorf("the suite over a Store with a defect (%s) did not fail a check: %v\n%s", what, err, out)
		}
	}
}

// brokenStore is a memory Store with one defect.
type brokenStore struct {
	*memory.Store
	defect string
}

func (b *brokenStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	return insert(ctx, b.Store, rec, b.defect == "insert-overwrites")
}

func (b *brokenStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	return update(ctx, b.Store, rec, prev, b.defect == "update-ignores-fence")
}

func (b *brokenStore) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := b.Store.BeginTx(ctx)
	if err != nil {
		return nil, err
	}
	return &brokenTx{tx, b.defect}, nil
}

// brokenTx is a transaction of a brokenStore.
type brokenTx struct {
	idemkit.TxStore
	defect string
}

func (t *brokenTx) Insert(ctx context.Context, rec *idemkit.Record) error {
	return insert(ctx, t.TxStore, rec, t.defect == "tx-insert-overwrites")
}

func (t *brokenTx) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	return update(ctx, t.TxStore, rec, prev, t.defect == "tx-update-ignores-fence")
}

func (t *brokenTx) Delete(ctx context.Context, scope, key string, prev idemkit.Version) error {
	if cur, err := t.TxStore.Get(ctx, scope, key); err == nil && t.defect == "tx-delete-ignores-fence" {
		prev = cur.Version()
	}
	return t.TxStore.Delete(ctx, scope, key, prev)
}

// insert inserts rec into s, or with overwrite replaces the record it finds.
func insert(ctx context.Context, s idemkit.Store, rec *idemkit.Record, overwrite bool) error {
	err := s.Insert(ctx, rec)
	if !overwrite || !errors.Is(err, idemkit.ErrExists) {
		return err
	}
	cur, err := s.Get(ctx, rec.Scope, rec.Key)
	if err != nil {
		return err
	}
	return s.Update(ctx, rec, cur.Version())
}

// update updates rec in s over prev, or with ignoreFence over whatever version it finds.
func update(ctx context.Context, s idemkit.Store, rec *idemkit.Record, prev idemkit.Version, ignoreFence bool) error {
	if cur, err := s.Get(ctx, rec.Scope, rec.Key); err == nil && ignoreFence {
		prev = cur.Version()
	}
	return s.Update(ctx, rec, prev)
}
