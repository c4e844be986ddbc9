package record

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/ownedtx"
)

// TxFunc is a business function guarded by [Store.Tx]: it makes its writes through tx, the
// transaction the Guard began, and returns the result to store and replay.
type TxFunc func(ctx context.Context, tx *gorm.DB) ([]byte, error)

// SQLTxFunc is a business function guarded by [Store.SQLTx], writing through a database/sql
// transaction.
type SQLTxFunc func(ctx context.Context, tx *sql.Tx) ([]byte, error)

// Tx runs fn once for c with g in a gorm transaction g begins on the Store's database, commits and
// owns ([idemkit.Guard.Tx]): fn's writes and the record of their outcome commit together, and the
// record costs one INSERT in that transaction. g must be a Guard over this Store (or another Store
// on the same table). Results and errors are those of [idemkit.Guard.Tx].
//
//	res, err := store.Tx(ctx, guard, call, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
//		if err := tx.Exec("UPDATE accounts SET balance = balance - ? WHERE id = ?", amount, id).Error; err != nil {
//			return nil, err
//		}
//		return []byte(`{"status":"paid"}`), nil
//	})
func (s *Store) Tx(ctx context.Context, g *idemkit.Guard, c idemkit.Call, fn TxFunc) (idemkit.Result, error) {
	if fn == nil {
		return idemkit.Result{}, idemkit.ErrNilFunc
	}
	return g.Tx(ctx, s, c, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
		return fn(ctx, GormTx(tx))
	})
}

// TxMarkFunc is a business function guarded by [Store.TxMark]: it makes its writes through tx, the
// transaction the Guard began.
type TxMarkFunc func(ctx context.Context, tx *gorm.DB) error

// TxMark runs fn once for c with g in a gorm transaction g begins on the Store's database, commits and
// owns ([idemkit.Guard.TxMark]): the mark is one INSERT at the start of the transaction — on MySQL and
// MariaDB with multiStatements, in the packet of START TRANSACTION — then fn's writes, then the
// COMMIT. Duplicates get idemkit.ErrDuplicate without running fn; nothing is replayed. When fn fails
// its writes and the mark roll back and the key is free again. A transaction the database rolls back
// on a write conflict before fn ran (InnoDB deadlocks duplicates that waited on a mark whose
// transaction rolled back) runs again, a few times at most. g must be a Guard over this Store (or
// another Store on the same table).
//
//	err := store.TxMark(ctx, guard, call, func(ctx context.Context, tx *gorm.DB) error {
//		return tx.Exec("UPDATE stock SET qty = qty - ? WHERE sku = ?", n, sku).Error
//	})
func (s *Store) TxMark(ctx context.Context, g *idemkit.Guard, c idemkit.Call, fn TxMarkFunc) error {
	if fn == nil {
		return idemkit.ErrNilFunc
	}
	return g.TxMark(ctx, s, c, func(ctx context.Context, tx idemkit.TxStore) error {
		return fn(ctx, GormTx(tx))
	})
}

// SQLTx is [Store.Tx] on a database/sql transaction begun on the pool under the Store's gorm.DB: for
// business code written against database/sql. It returns an error when that pool is not a *sql.DB.
func (s *Store) SQLTx(ctx context.Context, g *idemkit.Guard, c idemkit.Call, fn SQLTxFunc) (idemkit.Result, error) {
	if fn == nil {
		return idemkit.Result{}, idemkit.ErrNilFunc
	}
	return g.Tx(ctx, sqlBeginner{s}, c, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
		return fn(ctx, tx.(*txStore).stx)
	})
}

// BeginTx implements [idemkit.TxBeginner]: it begins a gorm transaction on the Store's database
// (gorm's Begin, so a PrepareStmt session gets its prepared transaction) and returns a Store bound to
// it, with Commit and Rollback. It fails on a Store that is itself bound to a transaction. The gorm
// session the business gets ([GormTx]) works as a gorm transaction — its statements run in the
// transaction, a nested db.Transaction is a savepoint — but refuses db.Commit() and db.Rollback(): the
// Guard ends the transaction, after the record is written in it.
//
// On MySQL and MariaDB, when the DSN sets multiStatements=true (and Options.NoMultiStatements is not
// set, and gorm's PrepareStmt is off), the transaction runs instead on a connection the Store holds,
// and the returned Store implements [idemkit.InsertCommitter]: the Guard sends the record's INSERT
// and the COMMIT in one packet.
func (s *Store) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	if s.inTx || s.gdb == nil {
		return nil, errors.New("record: BeginTx on a Store bound to a transaction")
	}
	s.ps.prepareAll(ctx) // before the transaction holds a connection (see stmtCache)
	if s.multiCapable() {
		m, err := s.beginMulti(ctx)
		if err != nil {
			return nil, err
		}
		if m != nil {
			return m, nil
		}
	}
	otx, err := ownedtx.BeginGorm(ctx, s.gdb) // on a connection of its own: see txStore
	if err != nil {
		return nil, s.q.interpretError("beginning a transaction on", err)
	}
	// The business's session refuses Commit and Rollback, as on a multi-statement pool: the Guard
	// ends the transaction, after writing the record in it.
	st, biz := s.WithSealedTx(otx.Gorm)
	return &txStore{Store: st, gtx: otx.Gorm, biz: biz, tx: otx, ctx: ctx}, nil
}

// Sealed returns a session of the gorm transaction tx that runs its statements in tx — a nested
// db.Transaction is a savepoint — but refuses db.Commit() and db.Rollback(), and raw statements that
// would end the transaction (COMMIT, ROLLBACK but not ROLLBACK TO, END, ABORT, BEGIN, START
// TRANSACTION; on MySQL and MariaDB also those that commit it implicitly: DDL but a temporary
// table's CREATE and DROP, LOCK TABLES, SET autocommit and their like): the session to hand to
// business code in a transaction whose end is not the business's to decide (the Guard's, which
// writes the record in it first). Adapters that begin such transactions themselves use it.
func Sealed(tx *gorm.DB) *gorm.DB { return sealed(tx, nil) }

// Watched returns [Sealed] of tx and a function telling whether a statement of that session ended
// the transaction on the server: nil until one did, then the error, wrapping [ErrTxAborted], the
// session gives every later statement. On MySQL and MariaDB a deadlock (error 1213, also a Galera
// conflict; MariaDB's snapshot-isolation conflict, 1020, likewise) rolls the whole transaction back
// and leaves the connection outside any transaction (see [Store.WithSealedTx]): a business that
// ignored that error returns nil, and the COMMIT that follows succeeds with nothing of the
// transaction in it. For adapters whose transaction holds no record written after the business
// (dtmmsg's local transaction, whose barrier row is written before it).
func Watched(tx *gorm.DB) (*gorm.DB, func() error) {
	lost := &txLost{}
	return sealed(tx, lost), lost.check
}

// sealed is Sealed, its statements watched by lost when not nil (see txLost).
func sealed(tx *gorm.DB, lost *txLost) *gorm.DB {
	biz := tx.Session(&gorm.Session{Context: tx.Statement.Context, NewDB: true})
	mysql := tx.Dialector != nil && tx.Dialector.Name() == "mysql"
	biz.Statement.ConnPool = &guardedPool{ConnPool: tx.Statement.ConnPool, lost: lost, mysql: mysql}
	return biz
}

// WithSealedTx returns [Store.WithTx] of tx and [Sealed] of tx, for an adapter that begins a
// transaction, hands the business the sealed session and writes the record with the Store. They
// share what the business's statements reported: on MySQL and MariaDB a deadlock (error 1213, also
// a Galera conflict; MariaDB's snapshot-isolation conflict, 1020, likewise) rolls the whole
// transaction back and leaves the connection outside any transaction, so after a business that
// ignored that error the record, and the business's later writes, would each commit on their own —
// the message or request answered as done without its effect. Once the business's session has seen
// such an error, it and the Store refuse every statement with an error wrapping [ErrTxAborted], as
// PostgreSQL does with an aborted transaction.
func (s *Store) WithSealedTx(tx *gorm.DB) (*Store, *gorm.DB) {
	lost := &txLost{}
	st := s.WithTx(tx)
	st.c = lostConn{st.c, lost}
	return st, sealed(tx, lost)
}

// txLost records the error of a statement after which the database no longer runs the rest of the
// transaction in it: a MySQL/MariaDB deadlock (1213) or MariaDB snapshot-isolation conflict (1020),
// which rolled it back.
type txLost struct{ err atomic.Pointer[error] }

// saw records err when it ended the transaction, and returns it.
func (l *txLost) saw(err error) error {
	if err == nil || l == nil { // most calls: nothing escapes to the heap
		return err
	}
	if mysqlRolledBack(err) {
		lost := err
		l.err.CompareAndSwap(nil, &lost)
	}
	return err
}

// check returns the error refusing a statement after the transaction was lost, or nil.
func (l *txLost) check() error {
	if l == nil {
		return nil
	}
	if p := l.err.Load(); p != nil {
		return fmt.Errorf("%w: the database rolled it back at: %v", ErrTxAborted, *p)
	}
	return nil
}

// mysqlRolledBack reports whether err is a MySQL/MariaDB error after which the transaction it was
// sent in is over (rolled back by the server): a deadlock victim's, Galera's conflict, or MariaDB's
// snapshot-isolation conflict (1020, "Record has changed since last read").
func mysqlRolledBack(err error) bool {
	var my *mysql.MySQLError
	return errors.As(err, &my) && ownedtx.MySQLConflict(my.Number)
}

// lostConn is a transaction's conn that refuses every statement once lost says the transaction is over.
type lostConn struct {
	conn
	lost *txLost
}

func (c lostConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if err := c.lost.check(); err != nil {
		return 0, err
	}
	n, err := c.conn.exec(ctx, query, args...)
	return n, c.lost.saw(err)
}

func (c lostConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := c.lost.check(); err != nil {
		return nil, err
	}
	rows, err := c.conn.query(ctx, query, args...)
	return rows, c.lost.saw(err)
}

// GormTx returns the gorm transaction of tx when tx is a transaction [Store.BeginTx] began — what
// [idemkit.Guard.Tx] hands its function when the Store is the TxBeginner (grpcx's Tx mode puts it in
// the handler's context) — and nil for any other value, nil included. Business writes made through
// it commit or roll back with the record; do not commit or roll it back yourself: the Guard does.
func GormTx(tx idemkit.TxStore) *gorm.DB {
	switch t := tx.(type) {
	case *txStore:
		if t.biz != nil {
			return t.biz
		}
		return t.gtx
	case *multiStore:
		return t.gdb
	}
	return nil
}

// sqlBeginner begins database/sql transactions for SQLTx.
type sqlBeginner struct{ *Store }

// BeginTxGet only reads (the Store's would begin a transaction that is not a *sql.Tx).
func (b sqlBeginner) BeginTxGet(ctx context.Context, scope, key string) (idemkit.TxStore, *idemkit.Record, error) {
	rec, err := b.Get(ctx, scope, key)
	return nil, rec, err
}

func (b sqlBeginner) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	s := b.Store
	if s.inTx || s.sdb == nil {
		return nil, errors.New("record: SQLTx needs a Store on a gorm.DB whose pool is a *sql.DB, not bound to a transaction")
	}
	s.ps.prepareAll(ctx) // before the transaction holds a connection (see stmtCache)
	// On a connection of its own: see txStore.
	otx, err := ownedtx.BeginSQL(ctx, s.sdb)
	if err != nil {
		return nil, s.q.interpretError("beginning a transaction on", err)
	}
	bound := s.WithSQLTx(otx.SQL)
	bound.c = txConn{tx: otx.SQL, ps: s.ps} // begun on the pool the statements were prepared on, and checked
	if s.enc != nil {
		bound.c = encodingConn{bound.c, s.enc}
	}
	return &txStore{Store: bound, stx: otx.SQL, tx: otx, ctx: ctx}, nil
}

// txStore is a Store bound to a transaction it owns: what BeginTx returns. The transaction holds a
// connection of its own (package internal/ownedtx; in gorm's PrepareStmt mode too): one whose COMMIT
// or ROLLBACK failed is rolled back on it or closed, never returned to the pool with the transaction
// open — as database/sql does when the database answers with an error and keeps the transaction (a
// Galera node without a primary component, error 1047; SQLite's COMMIT failing with SQLITE_BUSY), and
// the pool's next statement on it would join or commit half of it.
type txStore struct {
	*Store
	gtx    *gorm.DB
	biz    *gorm.DB // gtx as the business gets it: Commit and Rollback refused
	stx    *sql.Tx
	tx     *ownedtx.Tx // gtx's or stx's
	sealed atomic.Bool // see SealTx
	// ctx is the context the transaction was begun with: database/sql rolls the transaction back
	// when it ends (see Commit).
	ctx context.Context
}

// SealTx implements [idemkit.TxSealer]: while the Guard's function runs, Commit and Rollback refuse.
func (t *txStore) SealTx(sealed bool) { t.sealed.Store(sealed) }

func (t *txStore) Commit() error {
	if t.sealed.Load() {
		return errGuardOwned
	}
	err := t.tx.Commit()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrTxDone) && t.ctx.Err() != nil:
		// database/sql rolled the transaction back when its context ended (the caller left while
		// the function ran): nothing committed, and the error is the context's, not a store's.
		return fmt.Errorf("record: committing: the transaction was rolled back as its context ended: %w", t.ctx.Err())
	case IsConflict(err):
		// A Galera certification failure (a brute-force abort surfaces here too), a PostgreSQL
		// serialization failure: the write conflict a statement reports with ErrConflict, and so
		// does a multi-statement transaction's COMMIT. Nothing else is translated: a business's
		// deferred constraint failing here is no record that exists.
		return fmt.Errorf("record: committing: %w: %w", ErrConflict, err)
	}
	return fmt.Errorf("record: committing: %w", err)
}

func (t *txStore) Rollback() error {
	if t.sealed.Load() {
		return errGuardOwned
	}
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("record: rolling back: %w", err)
	}
	return nil
}

// guardedPool is the connection pool of the business's session of a Guard-owned transaction: the
// transaction's, whose Commit and Rollback refuse (gorm calls them for db.Commit() and db.Rollback()).
// Being a gorm.TxCommitter keeps a nested db.Transaction a savepoint; being a full gorm.Tx (with
// StmtContext) keeps a PrepareStmt session of it on the transaction — without, gorm prepares on the
// whole database and such a session's writes commit outside the transaction.
type guardedPool struct {
	gorm.ConnPool
	lost  *txLost // nil, or shared with the transaction's Store (see WithSealedTx)
	mysql bool    // MySQL or MariaDB: statements that commit implicitly are refused too (see commitsImplicitly)
}

func (p *guardedPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if err := p.refuses(query); err != nil {
		return nil, err
	}
	st, err := p.ConnPool.PrepareContext(ctx, query)
	return st, p.lost.saw(err)
}

func (p *guardedPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := p.refuses(query); err != nil {
		return nil, err
	}
	res, err := p.ConnPool.ExecContext(ctx, query, args...)
	return res, p.lost.saw(err)
}

func (p *guardedPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := p.refuses(query); err != nil {
		return nil, err
	}
	rows, err := p.ConnPool.QueryContext(ctx, query, args...)
	return rows, p.lost.saw(err)
}

var _ gorm.Tx = (*guardedPool)(nil)

func (*guardedPool) Commit() error   { return errGuardOwned }
func (*guardedPool) Rollback() error { return errGuardOwned }

// refuses returns why query must not run in the transaction: it would end it (see endsTx and
// commitsImplicitly), or the transaction is lost (see txLost). nil when it may run.
func (p *guardedPool) refuses(query string) error {
	if err := endingStatement(query, p.mysql); err != nil {
		return err
	}
	return p.lost.check()
}

// endingStatement returns the error a business gets for a statement that would end the Guard's
// transaction: one that ends it (endsTx) or, on MySQL and MariaDB, commits it implicitly
// (commitsImplicitly). nil for any other statement.
func endingStatement(query string, mysql bool) error {
	switch {
	case endsTx(query):
		return errGuardOwned
	case mysql && commitsImplicitly(query):
		return errImplicitCommit
	}
	return nil
}

// errImplicitCommit is what a business gets for a statement MySQL or MariaDB would commit the
// Guard's transaction before (and after) running.
var errImplicitCommit = errors.New("record: the statement would commit the Guard's transaction implicitly " +
	"(MySQL and MariaDB commit before DDL, LOCK TABLES, SET autocommit, GRANT, ANALYZE and their like): " +
	"run it outside the guarded function")

// commitsImplicitly reports whether MySQL or MariaDB commits the transaction a statement is sent in
// before running it: DDL other than on a temporary table's CREATE and DROP (ALTER, CREATE, DROP,
// RENAME, TRUNCATE and the plugin statements), account statements (GRANT, REVOKE and SET
// PASSWORD), LOCK and UNLOCK TABLES, SET autocommit, the administrative table statements (ANALYZE,
// CHECK, OPTIMIZE, REPAIR, CACHE INDEX, LOAD INDEX, FLUSH, RESET) and replication control (CHANGE,
// START and STOP REPLICA or SLAVE), XA. The business's writes before it would commit apart from the
// record, and every duplicate would run them again. The check reads the statement's first words; a
// stored procedure (CALL) that commits is not seen.
func commitsImplicitly(query string) bool {
	word, rest := firstWord(query)
	next, after := firstWord(rest)
	is := strings.EqualFold
	switch {
	case is(word, "CREATE"):
		if is(next, "OR") { // CREATE OR REPLACE [TEMPORARY] TABLE (MariaDB)
			_, after = firstWord(after) // REPLACE
			next, _ = firstWord(after)
		}
		return !is(next, "TEMPORARY")
	case is(word, "DROP"):
		return !is(next, "TEMPORARY")
	case is(word, "ALTER"), is(word, "RENAME"), is(word, "TRUNCATE"), is(word, "INSTALL"), is(word, "UNINSTALL"),
		is(word, "GRANT"), is(word, "REVOKE"), is(word, "LOCK"), is(word, "UNLOCK"), is(word, "ANALYZE"),
		is(word, "OPTIMIZE"), is(word, "REPAIR"), is(word, "FLUSH"), is(word, "RESET"), is(word, "CHANGE"), is(word, "XA"):
		return true
	case is(word, "CHECK"), is(word, "CACHE"):
		return is(next, "TABLE") || is(next, "TABLES") || is(next, "INDEX")
	case is(word, "LOAD"):
		return is(next, "INDEX")
	case is(word, "START"), is(word, "STOP"):
		return is(next, "REPLICA") || is(next, "SLAVE") || is(next, "ALL")
	case is(word, "SET"):
		return is(next, "PASSWORD") || containsFold(query, "autocommit")
	}
	return false
}

// containsFold reports whether s contains the ASCII word sub in any case.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// endsTx reports whether query is a statement that ends (or, on MySQL, implicitly commits and
// replaces) the transaction it is sent in: COMMIT, END, ROLLBACK (not ROLLBACK TO a savepoint), ABORT,
// BEGIN, START TRANSACTION. Sent by the business as raw SQL (tx.Exec("ROLLBACK")), the session's
// refusal of db.Commit() and db.Rollback() would not see it: the business's writes would end apart
// from the record, which would then commit on its own — a message acknowledged, or a request
// answered, without its effect.
func endsTx(query string) bool {
	word, rest := firstWord(query) // compared without strings.ToUpper: every business statement passes here
	switch {
	case strings.EqualFold(word, "COMMIT"), strings.EqualFold(word, "END"), strings.EqualFold(word, "ABORT"):
		return true
	case strings.EqualFold(word, "BEGIN"):
		next, _ := firstWord(rest)
		return !strings.EqualFold(next, "NOT") // MariaDB's compound statement: BEGIN NOT ATOMIC ... END
	case strings.EqualFold(word, "ROLLBACK"):
		next, after := firstWord(rest)
		if strings.EqualFold(next, "WORK") {
			next, _ = firstWord(after)
		}
		return !strings.EqualFold(next, "TO")
	case strings.EqualFold(word, "START"):
		next, _ := firstWord(rest)
		return strings.EqualFold(next, "TRANSACTION")
	}
	return false
}

// firstWord returns the first word of s (letters only, after spaces and semicolons) and what follows it.
func firstWord(s string) (string, string) {
	s = strings.TrimLeft(s, " \t\r\n;")
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z') {
		i++
	}
	return s[:i], s[i:]
}

// GetDBConn names the transaction's database handle to gorm (gorm.GetDBConnector), so that the
// business's tx.DB() answers as in a gorm transaction of its own.
func (p *guardedPool) GetDBConn() (*sql.DB, error) {
	return (&gorm.DB{Config: &gorm.Config{ConnPool: p.ConnPool}}).DB()
}

// StmtContext binds stmt to the transaction, as *sql.Tx and gorm's prepared transaction do.
func (p *guardedPool) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	if tx, ok := p.ConnPool.(interface {
		StmtContext(context.Context, *sql.Stmt) *sql.Stmt
	}); ok {
		return tx.StmtContext(ctx, stmt)
	}
	return stmt
}
