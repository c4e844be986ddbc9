package idemtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

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
	"dirty-reads":             "its Get returns records an open transaction wrote",
	"peeks-dirty":             "its transactions' Peek returns records another open transaction wrote",
	"aliases":                 "it keeps the caller's Response and hands it to every reader",
	"folds-keys":              "it compares keys as a case-insensitive, PAD SPACE collation does",
	"sweeps-never":            "its DeleteExpired deletes records whose zero ExpiresAt means never",
	"truncates-times":         "it keeps times to the second, as a DATETIME column without fractional seconds does",
	"update-keeps-expiry":     "its Update leaves ExpiresAt as it was",
	"update-finish-only":      "its Update writes a finish's columns only, a takeover's new GID, BranchID, Fingerprint and CreatedAt lost",
	"get-hides-expired":       "its Get hides records whose expiry passed by the real clock",
	"insert-replaces-expired": "its Insert replaces a record whose expiry passed by the real clock",
	"claims-as-recovered":     "its RecoverStaleClaims reports the claims as it left them (owner \"\"), not as they were",
}

// TestRunStoreRefusesBrokenStores runs RunStore, in a child process, on Stores that break the
// contract in one way each, and fails unless the suite fails every one of them.
func TestRunStoreRefusesBrokenStores(t *testing.T) {
	if defect := os.Getenv(envBroken); defect != "" {
		idemtest.RunStore(t, func(t *testing.T) idemkit.Store { return newBrokenStore(defect) })
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

// envBrokenLocker names the defect of the Locker TestRunLockerRefusesBrokenLockers runs the suite on in
// its child process.
const envBrokenLocker = "IDEMTEST_BROKEN_LOCKER"

// brokenLockerDefects are the defects RunLocker must catch, each one a memory Locker with that defect.
var brokenLockerDefects = map[string]string{
	"aliases":        "it hands every duplicate the buffer it cached",
	"folds-keys":     "it compares keys as a case-insensitive, PAD SPACE collation does",
	"truncates-keys": "it keeps the first 64 bytes of a key only",
	"stale-holder":   "its InFlightError names the first token that ever locked the key, not the holder",
}

// TestRunLockerRefusesBrokenLockers runs RunLocker, in a child process, on Lockers that break the
// contract in one way each, and fails unless the suite fails every one of them.
func TestRunLockerRefusesBrokenLockers(t *testing.T) {
	if defect := os.Getenv(envBrokenLocker); defect != "" {
		idemtest.RunLocker(t, func(t *testing.T) idemkit.Locker {
			switch defect {
			case "aliases":
				return &aliasingLocker{Locker: memory.NewLocker(nil), kept: map[string][]byte{}}
			case "stale-holder":
				return &staleHolderLocker{Locker: memory.NewLocker(nil), first: map[string]string{}}
			}
			return &keyLocker{Locker: memory.NewLocker(nil), defect: defect}
		})
		return
	}
	for defect, what := range brokenLockerDefects {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunLockerRefusesBrokenLockers$", "-test.count=1")
		cmd.Env = append(os.Environ(), envBrokenLocker+"="+defect)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			t.Errorf("RunLocker passed a Locker with a defect: %s", what)
		case !errors.As(err, &exit) || !strings.Contains(string(out), "--- FAIL: TestRunLockerRefusesBrokenLockers/"):
			t.Errorf("the suite over a Locker with a defect (%s) did not fail a check: %v\n%s", what, err, out)
		}
	}
}

// keyLocker is a memory Locker that conflates keys: folding them as a text collation does, or
// truncating them.
type keyLocker struct {
	*memory.Locker
	defect string
}

func (l *keyLocker) key(key string) string {
	switch {
	case l.defect == "folds-keys":
		return strings.ToLower(strings.TrimRight(key, " "))
	case l.defect == "truncates-keys" && len(key) > 64:
		return key[:64]
	}
	return key
}

func (l *keyLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	return l.Locker.Acquire(ctx, l.key(key), token, ttl)
}

func (l *keyLocker) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	return l.Locker.Refresh(ctx, l.key(key), token, ttl)
}

func (l *keyLocker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	return l.Locker.Release(ctx, l.key(key), token, result, cacheTTL)
}

// staleHolderLocker is a memory Locker whose InFlightError names the first token that locked the key.
type staleHolderLocker struct {
	*memory.Locker
	mu    sync.Mutex
	first map[string]string
}

func (l *staleHolderLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	cached, err := l.Locker.Acquire(ctx, key, token, ttl)
	l.mu.Lock()
	defer l.mu.Unlock()
	var inf *idemkit.InFlightError
	switch {
	case err == nil && cached == nil:
		if _, ok := l.first[key]; !ok {
			l.first[key] = token
		}
	case errors.As(err, &inf) && l.first[key] != "":
		return nil, &idemkit.InFlightError{RetryAfter: inf.RetryAfter, Holder: l.first[key]}
	}
	return cached, err
}

// aliasingLocker is a memory Locker that caches the caller's result itself and answers every cache
// hit with it.
type aliasingLocker struct {
	*memory.Locker
	mu   sync.Mutex
	kept map[string][]byte
}

func (l *aliasingLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	cached, err := l.Locker.Acquire(ctx, key, token, ttl)
	l.mu.Lock()
	defer l.mu.Unlock()
	if kept, ok := l.kept[key]; ok && cached != nil {
		return kept, err
	}
	return cached, err
}

func (l *aliasingLocker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	if result != nil && cacheTTL > 0 {
		l.mu.Lock()
		l.kept[key] = result
		l.mu.Unlock()
	}
	return l.Locker.Release(ctx, key, token, result, cacheTTL)
}

// brokenStore is a memory Store with one defect.
type brokenStore struct {
	*memory.Store
	defect string
	mu     sync.Mutex
	dirty  map[[2]string]*idemkit.Record // written by open transactions, for "dirty-reads"
	kept   map[[2]string]*idemkit.Record // the callers' records, for "aliases"
	canon  map[[2]string][2]string       // folded scope and key -> the first spelling, for "folds-keys"
	never  []*idemkit.Record             // inserted without expiry, for "sweeps-never"
}

func newBrokenStore(defect string) *brokenStore {
	return &brokenStore{Store: memory.NewStore(), defect: defect,
		dirty: map[[2]string]*idemkit.Record{}, kept: map[[2]string]*idemkit.Record{}, canon: map[[2]string][2]string{}}
}

// DeleteExpired deletes, when the Store sweeps records that never expire, those it inserted first.
func (b *brokenStore) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	n := 0
	if b.defect == "sweeps-never" {
		b.mu.Lock()
		never := b.never
		b.never = nil
		b.mu.Unlock()
		for _, r := range never {
			if cur, err := b.Store.Get(ctx, r.Scope, r.Key); err == nil && cur.ExpiresAt.IsZero() && n < limit &&
				b.Store.Delete(ctx, r.Scope, r.Key, cur.Version()) == nil {
				n++
			}
		}
	}
	m, err := b.Store.DeleteExpired(ctx, now, limit-n)
	return n + m, err
}

// RecoverStaleClaims reports, when the Store reports claims as recovered, the records it left.
func (b *brokenStore) RecoverStaleClaims(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
	recs, err := b.Store.RecoverStaleClaims(ctx, now, limit)
	if b.defect == "claims-as-recovered" {
		for i, r := range recs {
			if cur, gerr := b.Store.Get(ctx, r.Scope, r.Key); gerr == nil {
				recs[i] = cur
			}
		}
	}
	return recs, err
}

// fold returns the spelling of scope and key the Store first met, when it folds keys.
func (b *brokenStore) fold(scope, key string) (string, string) {
	if b.defect != "folds-keys" {
		return scope, key
	}
	f := func(s string) string { return strings.ToLower(strings.TrimRight(s, " ")) }
	b.mu.Lock()
	defer b.mu.Unlock()
	k := [2]string{f(scope), f(key)}
	if c, ok := b.canon[k]; ok {
		return c[0], c[1]
	}
	b.canon[k] = [2]string{scope, key}
	return scope, key
}

func (b *brokenStore) Delete(ctx context.Context, scope, key string, prev idemkit.Version) error {
	scope, key = b.fold(scope, key)
	return b.Store.Delete(ctx, scope, key, prev)
}

// folded returns rec under the spelling of its scope and key the Store first met.
func (b *brokenStore) folded(rec *idemkit.Record) *idemkit.Record {
	scope, key := b.fold(rec.Scope, rec.Key)
	if scope == rec.Scope && key == rec.Key {
		return rec
	}
	c := *rec
	c.Scope, c.Key = scope, key
	return &c
}

// partial returns rec with the columns the Store's Update does not write as they are stored.
func (b *brokenStore) partial(ctx context.Context, rec *idemkit.Record) *idemkit.Record {
	cur, err := b.Store.Get(ctx, rec.Scope, rec.Key)
	if err != nil || b.defect != "update-keeps-expiry" && b.defect != "update-finish-only" {
		return rec
	}
	c := *rec
	if b.defect == "update-keeps-expiry" {
		c.ExpiresAt = cur.ExpiresAt
	} else {
		c.GID, c.BranchID, c.Fingerprint, c.CreatedAt = cur.GID, cur.BranchID, cur.Fingerprint, cur.CreatedAt
	}
	return &c
}

// truncated returns rec with its times cut to the second, when the Store keeps no fractions.
func (b *brokenStore) truncated(rec *idemkit.Record) *idemkit.Record {
	if b.defect != "truncates-times" {
		return rec
	}
	c := *rec
	for _, tm := range []*time.Time{&c.LeaseUntil, &c.ExpiresAt, &c.CreatedAt, &c.UpdatedAt} {
		*tm = tm.Truncate(time.Second)
	}
	return &c
}

// keep remembers rec itself, its Response with it, when the Store aliases.
func (b *brokenStore) keep(rec *idemkit.Record, err error) error {
	if err == nil && b.defect == "aliases" {
		b.mu.Lock()
		b.kept[[2]string{rec.Scope, rec.Key}] = rec
		b.mu.Unlock()
	}
	return err
}

func (b *brokenStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	scope, key = b.fold(scope, key)
	if b.defect == "get-hides-expired" {
		if r, err := b.Store.Get(ctx, scope, key); err == nil && r.Expired(time.Now()) {
			return nil, idemkit.ErrNotFound
		}
	}
	if r := b.dirtyRecord(scope, key); r != nil && b.defect == "dirty-reads" {
		return r, nil
	}
	rec, err := b.Store.Get(ctx, scope, key)
	b.mu.Lock()
	defer b.mu.Unlock()
	if kept, ok := b.kept[[2]string{scope, key}]; ok && err == nil && kept.Version() == rec.Version() {
		rec.Response = kept.Response
	}
	return rec, err
}

// dirtyRecord returns a copy of what an open transaction wrote under scope and key, or nil.
func (b *brokenStore) dirtyRecord(scope, key string) *idemkit.Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.dirty[[2]string{scope, key}]; r != nil {
		c := *r
		return &c
	}
	return nil
}

func (b *brokenStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	rec = b.truncated(b.folded(rec))
	if rec.ExpiresAt.IsZero() {
		b.mu.Lock()
		b.never = append(b.never, rec)
		b.mu.Unlock()
	}
	overwrite := b.defect == "insert-overwrites"
	if b.defect == "insert-replaces-expired" {
		cur, err := b.Store.Get(ctx, rec.Scope, rec.Key)
		overwrite = err == nil && cur.Expired(time.Now())
	}
	return b.keep(rec, insert(ctx, b.Store, rec, overwrite))
}

func (b *brokenStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	rec = b.partial(ctx, b.truncated(b.folded(rec)))
	return b.keep(rec, update(ctx, b.Store, rec, prev, b.defect == "update-ignores-fence"))
}

func (b *brokenStore) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := b.Store.BeginTx(ctx)
	if err != nil {
		return nil, err
	}
	return &brokenTx{TxStore: tx, s: b}, nil
}

// brokenTx is a transaction of a brokenStore.
type brokenTx struct {
	idemkit.TxStore
	s     *brokenStore
	wrote [][2]string
}

func (t *brokenTx) Insert(ctx context.Context, rec *idemkit.Record) error {
	err := insert(ctx, t.TxStore, rec, t.s.defect == "tx-insert-overwrites")
	t.leak(rec, err)
	return err
}

func (t *brokenTx) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	err := update(ctx, t.TxStore, rec, prev, t.s.defect == "tx-update-ignores-fence")
	t.leak(rec, err)
	return err
}

// leak shows rec, written in t, to reads outside t until t ends, when the Store has dirty reads.
func (t *brokenTx) leak(rec *idemkit.Record, err error) {
	if err != nil || t.s.defect != "dirty-reads" && t.s.defect != "peeks-dirty" {
		return
	}
	k := [2]string{rec.Scope, rec.Key}
	c := *rec
	t.s.mu.Lock()
	t.s.dirty[k] = &c
	t.s.mu.Unlock()
	t.wrote = append(t.wrote, k)
}

// Peek reads as the transaction's own Peek does, or, when the Store peeks dirty, what another open
// transaction wrote first.
func (t *brokenTx) Peek(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if r := t.s.dirtyRecord(scope, key); r != nil && t.s.defect == "peeks-dirty" {
		return r, nil
	}
	return t.TxStore.(idemkit.Peeker).Peek(ctx, scope, key)
}

func (t *brokenTx) Commit() error   { defer t.end(); return t.TxStore.Commit() }
func (t *brokenTx) Rollback() error { defer t.end(); return t.TxStore.Rollback() }

// end drops what t showed outside.
func (t *brokenTx) end() {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	for _, k := range t.wrote {
		delete(t.s.dirty, k)
	}
	t.wrote = nil
}

func (t *brokenTx) Delete(ctx context.Context, scope, key string, prev idemkit.Version) error {
	if cur, err := t.TxStore.Get(ctx, scope, key); err == nil && t.s.defect == "tx-delete-ignores-fence" {
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
