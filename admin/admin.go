package admin

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/pgddl"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// Errors of the package, besides idemkit.ErrNotFound (no such record) and idemkit.ErrFenced (the
// record changed since it was read). Compare with errors.Is.
var (
	// ErrUnknownScope: no record of the table (in the namespace) has the scope.
	ErrUnknownScope = errors.New("admin: unknown scope")
	// ErrRefused: the operation would be unsafe on the record as it is; the error says why and what
	// to do instead. Options like ReleaseOptions.Force override some refusals.
	ErrRefused = errors.New("admin: refused")
	// ErrNoTable: the table does not exist or is not a record table.
	ErrNoTable = errors.New("admin: no record table")
	// ErrRedisCleanup: a release or purge was written, but Redis could not be cleared afterwards (the
	// lock or cached result then expires by itself).
	ErrRedisCleanup = errors.New("admin: Redis not cleared")
)

// Options configure an [Admin]. They must match those of the application's Store, Guard and
// Locker, or the Admin looks in the wrong place. The zero value works for an application with the
// defaults.
type Options struct {
	// Table is record.Options.Table. Defaults to record.DefaultTable.
	Table string
	// Namespace is idemkit.Options.Namespace. When set, the Admin sees only the records of that
	// namespace (stored scopes "ns/..."), shows scopes without it, and applies it to the scopes it is
	// given. A scope longer than idemkit.MaxStoredLen with its namespace is stored hashed and cannot
	// be attributed to a namespace: listings under a namespace miss it (address it by its scope).
	// Defaults to "": every record of the table, scopes as stored.
	Namespace string
	// MaxKeyLen is idemkit.Options.MaxKeyLen. Defaults to idemkit.DefaultMaxKeyLen.
	MaxKeyLen int
	// Lease is idemkit.Options.Lease. Without Redis, a Mark-mode record (SUCCEEDED from the moment
	// it is written, while its function runs) written less than a lease ago may still be running, and
	// [Admin.Purge] refuses it. Defaults to idemkit.DefaultLease.
	Lease time.Duration
	// Redis is the client of the application's lock.Locker, to inspect locks and cached results and
	// to clear them on release, purge and sweep. Defaults to none.
	Redis redis.UniversalClient
	// RedisPrefix is lock.Options.Prefix. Defaults to lock.DefaultPrefix.
	RedisPrefix string
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Admin answers an operator's questions about a record table and performs the few repairs that are
// safe: releasing a stuck claim and deleting records, each conditioned on the version it was decided
// from. It is safe for concurrent use.
type Admin struct {
	db    *gorm.DB
	store *record.Store
	guard *idemkit.Guard // for Address: the Guard's own namespace and hashing rules
	q     *sqlTexts
	lk    *lock.Locker // nil without Options.Redis
	ns    string       // "ns/" or ""
	opts  Options
}

// New returns an Admin over the record table of db. It touches no database: call [Admin.Check] to
// find out whether the table is there. It returns an error when db, the table name or the
// namespace is invalid (the errors of record.New and idemkit.New).
func New(db *gorm.DB, opts *Options) (*Admin, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Table = cmp.Or(o.Table, record.DefaultTable)
	o.MaxKeyLen = cmp.Or(o.MaxKeyLen, idemkit.DefaultMaxKeyLen)
	o.RedisPrefix = cmp.Or(o.RedisPrefix, lock.DefaultPrefix)
	o.Lease = cmp.Or(o.Lease, idemkit.DefaultLease)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Lease < 0 {
		return nil, fmt.Errorf("admin: Lease %s must not be negative", o.Lease)
	}
	if strings.ContainsAny(o.RedisPrefix, "{}") {
		return nil, fmt.Errorf("admin: Redis prefix %q must not contain '{' or '}'", o.RedisPrefix)
	}
	st, err := record.New(db, &record.Options{Table: o.Table})
	if err != nil {
		return nil, err
	}
	g, err := idemkit.New(st, &idemkit.Options{Namespace: o.Namespace, MaxKeyLen: o.MaxKeyLen})
	if err != nil {
		return nil, err
	}
	a := &Admin{db: db, store: st, guard: g, q: newSQLTexts(st.Dialect(), o.Table), lk: newLocker(&o), opts: o}
	if o.Namespace != "" {
		a.ns = o.Namespace + "/"
	}
	return a, nil
}

// Table returns the record table's name.
func (a *Admin) Table() string { return a.store.Table() }

// Dialect returns the database's dialect: "mysql", "postgres" or "sqlite".
func (a *Admin) Dialect() string { return a.store.Dialect() }

// Store returns the record.Store the Admin reads and writes through.
func (a *Admin) Store() *record.Store { return a.store }

// Check reads no row but every column the Admin uses: it returns an error wrapping ErrNoTable when
// the table is missing or lacks a column, or the database's error (unreachable, bad credentials). On
// PostgreSQL it also returns an error naming client_encoding when the session does not exchange text
// in UTF-8 (client_encoding UTF8, or SQL_ASCII on a UTF8 database): the Admin's filters would look for
// other scopes and keys than the application's, and show stored ones altered (see record.New).
// It returns record.Store.CheckKeyColumns's error when the table's scope or idem_key column does
// not tell every two keys apart (a case-insensitive collation, citext: made by hand or changed by a
// migration tool), naming the column and the ALTER TABLE that fixes it.
func (a *Admin) Check(ctx context.Context) error {
	sqlDB, err := a.db.DB()
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("admin: connecting to the database: %w", err)
	}
	if a.store.Dialect() == "postgres" {
		if err := new(pgddl.EncodingCheck).Check(ctx, a.show); err != nil {
			return fmt.Errorf("admin: %w", err)
		}
	}
	rows, err := a.db.WithContext(ctx).Raw(a.q.probe()).Rows()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("admin: reading table %s: %w", a.Table(), err)
		}
		return fmt.Errorf("%w %s: %w", ErrNoTable, a.Table(), err)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := a.store.CheckKeyColumns(ctx); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}

// show returns the value of the PostgreSQL setting named.
func (a *Admin) show(ctx context.Context, setting string) (string, error) {
	var v string
	rows, err := a.db.WithContext(ctx).Raw("SHOW " + setting).Rows()
	if err != nil {
		return "", err
	}
	defer rows.Close()
	if !rows.Next() {
		return "", cmp.Or(rows.Err(), sql.ErrNoRows)
	}
	if err := rows.Scan(&v); err != nil {
		return "", err
	}
	return v, rows.Close()
}

// Address returns where the application's Guard keeps scope and key (namespace and hashing
// applied), or an error wrapping idemkit.ErrInvalidKey for a scope or key the Guard would refuse.
func (a *Admin) Address(scope, key string) (idemkit.Address, error) {
	return a.guard.Address(scope, key)
}

// StoredScope returns scope as stored (namespace and hashing applied), or an error wrapping
// idemkit.ErrInvalidKey.
func (a *Admin) StoredScope(scope string) (string, error) {
	ad, err := a.guard.Address(scope, "-")
	if err != nil {
		return "", err
	}
	return ad.Scope, nil
}

// DisplayScope returns a stored scope as the application names it: without the namespace.
func (a *Admin) DisplayScope(stored string) string {
	return strings.TrimPrefix(stored, a.ns)
}

// Get returns the record of scope and key (given as in idemkit.Call), with its result, or
// idemkit.ErrNotFound; ErrUnknownScope when no record has that scope; idemkit.ErrInvalidKey for a
// malformed scope or key.
//
// A scope or key given in its hashed stored form ("sha256:" and 64 hex digits, as listings show a
// long one) is also looked up as it is: the application's own value is not needed to reach its
// record. (No literal value can be stored so: one starting with "sha256:" is always hashed.)
func (a *Admin) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	ad, err := a.Address(scope, key)
	if err != nil {
		return nil, err
	}
	rec, err := a.store.Get(ctx, ad.Scope, ad.Key)
	if as, ok := HashedAddress(ad, scope, key); ok && errors.Is(err, idemkit.ErrNotFound) {
		ad = as
		rec, err = a.store.Get(ctx, ad.Scope, ad.Key)
	}
	if errors.Is(err, idemkit.ErrNotFound) {
		if err := a.requireScope(ctx, ad.Scope, scope); err != nil {
			return nil, err
		}
	}
	return rec, err
}

// HashedAddress returns ad (the address of scope and key as the application passes them) with its
// scope and key taken as they are where scope or key is given in the hashed stored form listings
// show ("sha256:" and 64 hex digits), and whether either was: the second address [Admin.Get] looks a
// record up at.
func HashedAddress(ad idemkit.Address, scope, key string) (idemkit.Address, bool) {
	hs, hk := idemkit.IsHashedForm(scope), idemkit.IsHashedForm(key)
	if hs {
		ad.Scope = scope
	}
	if hk {
		ad.Key = key
	}
	ad.LockKey = idemkit.LockKey(ad.Scope, ad.Key)
	return ad, hs || hk
}

// requireScope returns ErrUnknownScope when no record has the stored scope.
func (a *Admin) requireScope(ctx context.Context, stored, given string) error {
	ok, err := a.scopeExists(ctx, stored)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	msg := fmt.Sprintf("%q: no record of table %s has it", given, a.Table())
	if a.opts.Namespace != "" {
		msg += fmt.Sprintf(" in namespace %q", a.opts.Namespace)
	}
	if known, err := a.Scopes(ctx, 10); err == nil && len(known) > 0 {
		msg += "; known scopes: " + quoteList(known)
	}
	return fmt.Errorf("%w %s", ErrUnknownScope, msg)
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

func (a *Admin) scopeExists(ctx context.Context, stored string) (bool, error) {
	rows, err := a.db.WithContext(ctx).Raw(a.q.scopeExists(), stored).Rows()
	if err != nil {
		return false, fmt.Errorf("admin: reading %s: %w", a.Table(), err)
	}
	defer rows.Close()
	found := rows.Next()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("admin: reading %s: %w", a.Table(), err)
	}
	return found, nil
}

// Scopes returns up to limit scopes of the table (of the namespace), in order, as the application
// names them.
func (a *Admin) Scopes(ctx context.Context, limit int) ([]string, error) {
	var w where
	if a.ns != "" {
		a.q.namespace(&w, a.ns)
	}
	query, args := a.q.scopes(w)
	rows, err := a.db.WithContext(ctx).Raw(query, append(args, limit)...).Rows()
	if err != nil {
		return nil, fmt.Errorf("admin: listing scopes of %s: %w", a.Table(), err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("admin: listing scopes of %s: %w", a.Table(), err)
		}
		out = append(out, a.DisplayScope(s))
	}
	return out, rows.Err()
}

// millis is t as Unix milliseconds, 0 for the zero time (the table's encoding).
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMillis is the inverse of millis.
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
