package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
	idemsql "github.com/idemkit/idemkit/sql"
)

// Defaults of [Config].
const (
	DefaultDSNParams = "interpolateParams=true&multiStatements=true"
	DefaultMaxConns  = 80
	DefaultDatabase  = testsvc.Database // idemkit_test
	// BarrierTable is DTM's barrier table, shared with dtmcli.
	BarrierTable = "dtm_barrier.barrier"
)

// Config says where the services are and how to reach them. The zero value uses the test services
// of this machine (IDEMKIT_TEST_MYSQL, IDEMKIT_TEST_REDIS).
type Config struct {
	// MySQLDSN is the server DSN without a database. Defaults to testsvc.MySQLDSN().
	MySQLDSN string
	// Database holds the business, record and classic tables. Defaults to DefaultDatabase.
	Database string
	// DSNParams are appended to the DSN of every pool. Defaults to DefaultDSNParams:
	// interpolateParams=true (one round trip per statement, as DTM's own DSN) and
	// multiStatements=true, which idemkit's Guard-owned transactions use to send two statements in
	// one packet (record.Store.BeginTx) and nothing else here uses; "-" for none, which makes the
	// driver prepare and close every statement with arguments.
	DSNParams string
	// RedisAddr defaults to testsvc.RedisAddr().
	RedisAddr string
	// MaxConns bounds the MySQL pool (open and idle) and sizes the Redis pool. Defaults to
	// DefaultMaxConns.
	MaxConns int
}

// Env is one benchmark run's view of the services: one counted MySQL pool shared by gorm (with and
// without PrepareStmt) and database/sql, one counted Redis client, and tables named for the run.
// Close drops the tables and deletes the run's Redis keys and barrier rows.
type Env struct {
	Run string // run id: prefix of tables, keys and gids

	SQL       *sql.DB
	SQLCount  *SQLCounter
	Gorm      *gorm.DB // PrepareStmt off
	GormPS    *gorm.DB // PrepareStmt on, same pool
	GormCnt   *GormCounter
	GormPSCnt *GormCounter

	Redis      *redis.Client
	RedisCount *RedisCounter

	BizTable, RecTable, ClassicTable string
	InsertBiz                        string // the business statement, the same for every variant

	Store   *record.Store // on Gorm
	StorePS *record.Store // on GormPS
	// StorePrep is on a second pool whose DSN does not set interpolateParams, so the Store runs on
	// server-side prepared statements (binary protocol) instead of interpolated text: the other way
	// record.Store talks to MySQL, measured by the execute-lean variant.
	StorePrep    *record.Store
	SQLPrep      *sql.DB
	SQLPrepCount *SQLCounter
	Locker       *lock.Locker
	Prefix       string // Redis key prefix of the run

	cfg     Config
	closers []func() error
	diag    *diag
	server  *Server
}

// HTTP returns the loopback server of the httpx variants, or nil before one of them was set up.
func (e *Env) HTTP() *Server { return e.server }

// Open connects to MariaDB and Redis and creates the run's tables (and DTM's barrier table if it is
// missing). It returns an error when a service is unreachable.
func Open(ctx context.Context, c *Config) (*Env, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg.MySQLDSN = cmp.Or(cfg.MySQLDSN, testsvc.MySQLDSN())
	cfg.Database = cmp.Or(cfg.Database, DefaultDatabase)
	cfg.DSNParams = cmp.Or(cfg.DSNParams, DefaultDSNParams)
	cfg.RedisAddr = cmp.Or(cfg.RedisAddr, testsvc.RedisAddr())
	cfg.MaxConns = cmp.Or(cfg.MaxConns, DefaultMaxConns)

	var b [3]byte
	_, _ = rand.Read(b[:])
	e := &Env{Run: "ib" + hex.EncodeToString(b[:]), cfg: cfg}
	e.Prefix = "idembench:" + e.Run + ":"
	e.BizTable, e.RecTable, e.ClassicTable = e.Run+"_orders", e.Run+"_records", e.Run+"_classic"
	e.InsertBiz = "INSERT INTO `" + e.BizTable + "` (order_key, amount) VALUES (?, ?)"

	if err := e.openSQL(ctx); err != nil {
		return nil, err
	}
	if err := e.openRedis(ctx); err != nil {
		_ = e.SQL.Close()
		return nil, err
	}
	e.diag = openDiag(e.DSN(), e.Redis.Options())
	if err := e.createTables(ctx); err != nil {
		e.Close(ctx)
		return nil, err
	}
	return e, nil
}

// DSN returns the DSN of the run's pool.
func (e *Env) DSN() string {
	dsn := e.cfg.MySQLDSN + e.cfg.Database + "?timeout=3s"
	if e.cfg.DSNParams != "-" {
		dsn += "&" + e.cfg.DSNParams
	}
	return dsn
}

// DSNParams returns the DSN parameters in force ("-" for none).
func (e *Env) DSNParams() string { return e.cfg.DSNParams }

func (e *Env) openSQL(ctx context.Context) error {
	if err := ensureDatabase(ctx, e.cfg.MySQLDSN, e.cfg.Database); err != nil {
		return err
	}
	mcfg, err := mysql.ParseDSN(e.DSN())
	if err != nil {
		return fmt.Errorf("bench: parsing DSN: %w", err)
	}
	conn, err := mysql.NewConnector(mcfg)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	e.SQLCount = NewSQLCounter(conn)
	e.SQL = sql.OpenDB(e.SQLCount)
	e.SQL.SetMaxOpenConns(e.cfg.MaxConns)
	e.SQL.SetMaxIdleConns(e.cfg.MaxConns)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := e.SQL.PingContext(pctx); err != nil {
		_ = e.SQL.Close()
		return fmt.Errorf("bench: MariaDB at %s: %w", e.cfg.MySQLDSN, err)
	}
	open := func(ps bool) (*gorm.DB, *GormCounter, error) {
		db, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: e.SQL, DSNConfig: mcfg}),
			&gorm.Config{Logger: logger.Discard, PrepareStmt: ps, SkipDefaultTransaction: true})
		if err != nil {
			return nil, nil, fmt.Errorf("bench: gorm: %w", err)
		}
		n, err := CountGorm(db)
		return db, n, err
	}
	if e.Gorm, e.GormCnt, err = open(false); err == nil {
		e.GormPS, e.GormPSCnt, err = open(true)
	}
	if err != nil {
		_ = e.SQL.Close()
		return err
	}
	// The pool of StorePrep: the same server and database, no interpolateParams.
	pcfg := mcfg.Clone()
	pcfg.InterpolateParams = false
	pconn, err := mysql.NewConnector(pcfg)
	if err != nil {
		_ = e.SQL.Close()
		return fmt.Errorf("bench: %w", err)
	}
	e.SQLPrepCount = NewSQLCounter(pconn)
	e.SQLPrep = sql.OpenDB(e.SQLPrepCount)
	e.SQLPrep.SetMaxOpenConns(e.cfg.MaxConns)
	e.SQLPrep.SetMaxIdleConns(e.cfg.MaxConns)
	gprep, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: e.SQLPrep, DSNConfig: pcfg}),
		&gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true})
	if err != nil {
		_ = e.SQL.Close()
		_ = e.SQLPrep.Close()
		return fmt.Errorf("bench: gorm: %w", err)
	}
	if e.StorePrep, err = record.New(gprep, &record.Options{Table: e.RecTable}); err != nil {
		_ = e.SQL.Close()
		_ = e.SQLPrep.Close()
	}
	return err
}

func ensureDatabase(ctx context.Context, dsn, database string) error {
	db, err := sql.Open("mysql", dsn+"?timeout=3s")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer db.Close()
	for _, s := range []string{"CREATE DATABASE IF NOT EXISTS " + database, "CREATE DATABASE IF NOT EXISTS dtm_barrier"} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("bench: MariaDB at %s: %w", dsn, err)
		}
	}
	return nil
}

func (e *Env) openRedis(ctx context.Context) error {
	opts := testsvc.RedisOptions()
	opts.Addr = e.cfg.RedisAddr
	opts.PoolSize = e.cfg.MaxConns
	e.Redis = redis.NewClient(opts)
	e.RedisCount = new(RedisCounter)
	e.Redis.AddHook(e.RedisCount)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := e.Redis.Ping(pctx).Err(); err != nil {
		_ = e.Redis.Close()
		return fmt.Errorf("bench: Redis at %s: %w", e.cfg.RedisAddr, err)
	}
	e.Locker = lock.New(e.Redis, &lock.Options{Prefix: e.Prefix})
	return nil
}

func (e *Env) createTables(ctx context.Context) error {
	var err error
	if e.Store, err = record.New(e.Gorm, &record.Options{Table: e.RecTable}); err != nil {
		return err
	}
	if e.StorePS, err = record.New(e.GormPS, &record.Options{Table: e.RecTable}); err != nil {
		return err
	}
	if err := e.Store.CreateTable(ctx); err != nil {
		return err
	}
	ddl := []string{
		// The business table: what every variant writes, with the same statement (InsertBiz).
		"CREATE TABLE `" + e.BizTable + "` (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, " +
			"order_key VARCHAR(128) NOT NULL, amount BIGINT NOT NULL, " +
			"created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), KEY (order_key)) ENGINE=InnoDB",
		// The classic flow's dedupe table: what such code usually has (see Classic): the unique key and
		// an index for the cleanup job, as idemkit's table has idx_expires_at for its sweeper.
		"CREATE TABLE `" + e.ClassicTable + "` (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, " +
			"biz_type VARCHAR(64) NOT NULL, idem_key VARCHAR(128) NOT NULL, status VARCHAR(16) NOT NULL, " +
			"result BLOB NULL, created_at DATETIME(3) NOT NULL, updated_at DATETIME(3) NOT NULL, " +
			"UNIQUE KEY uk_biz_key (biz_type, idem_key), KEY idx_created_at (created_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
	}
	barrierDDL, err := idemsql.File("barrier", "mysql")
	if err != nil {
		return err
	}
	ddl = append(ddl, idemsql.Statements(barrierDDL)...)
	for _, s := range ddl {
		if _, err := e.SQL.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("bench: creating tables: %w", err)
		}
	}
	return nil
}

// Guard returns a Guard over the run's Store (st nil) or st, with the Redis Locker unless noLock, and
// cacheTTL for finished results. A positive cacheTTL is the records' TTL too, as in the default
// configuration (CacheTTL = TTL): the cache then vouches for the keys it does not hold, and Tx mode
// reads nothing before its function. The benchmark keeps both short so that Redis stays small.
func (e *Env) Guard(st idemkit.Store, noLock bool, cacheTTL time.Duration) (*idemkit.Guard, error) {
	if st == nil {
		st = e.Store
	}
	o := &idemkit.Options{CacheTTL: cacheTTL}
	if cacheTTL > 0 {
		o.TTL = cacheTTL
	}
	if !noLock {
		o.Locker = e.Locker
	}
	return idemkit.New(st, o)
}

// ServerStats reads the machine-wide figures (see [ServerStats]) on connections that are not counted.
func (e *Env) ServerStats(ctx context.Context) ServerStats { return e.diag.stats(ctx) }

// Counts is a snapshot of every counter.
type Counts struct {
	SQL SQLCounts // both pools
	// Gorm counts the statements seen by the gorm callbacks of the two gorm handles: the business's,
	// not the record Store's, which run on database/sql underneath.
	Gorm  int64
	Redis RedisCounts
}

// Counts returns the totals so far.
func (e *Env) Counts() Counts {
	sql := e.SQLCount.Counts()
	prep := e.SQLPrepCount.Counts()
	return Counts{SQL: addSQL(sql, prep), Gorm: e.GormCnt.Statements() + e.GormPSCnt.Statements(), Redis: e.RedisCount.Counts()}
}

// Sub returns c-o.
func (c Counts) Sub(o Counts) Counts {
	return Counts{SQL: c.SQL.Sub(o.SQL), Gorm: c.Gorm - o.Gorm, Redis: c.Redis.Sub(o.Redis)}
}

// Close drops the run's tables and deletes its Redis keys and barrier rows, then closes the pools.
func (e *Env) Close(ctx context.Context) error {
	var errs []error
	for _, c := range e.closers {
		errs = append(errs, c())
	}
	for _, t := range []string{e.BizTable, e.RecTable, e.ClassicTable} {
		if _, err := e.SQL.ExecContext(ctx, "DROP TABLE IF EXISTS `"+t+"`"); err != nil {
			errs = append(errs, err)
		}
	}
	for {
		r, err := e.SQL.ExecContext(ctx, "DELETE FROM "+BarrierTable+" WHERE gid LIKE ? LIMIT 20000", e.Run+"%")
		if err != nil {
			errs = append(errs, err)
			break
		}
		if n, _ := r.RowsAffected(); n == 0 {
			break
		}
	}
	if err := deleteKeys(ctx, e.Redis, e.Prefix+"*"); err != nil {
		errs = append(errs, err)
	}
	e.diag.close()
	errs = append(errs, e.Redis.Close(), e.SQL.Close(), e.SQLPrep.Close())
	return errors.Join(errs...)
}

func deleteKeys(ctx context.Context, rdb *redis.Client, pattern string) error {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 5000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// DropLeftovers drops tables and keys left by runs that did not finish (names starting with "ib"
// followed by six hex digits), for the command's -cleanup flag.
func DropLeftovers(ctx context.Context, c *Config) ([]string, error) {
	e, err := Open(ctx, c)
	if err != nil {
		return nil, err
	}
	defer e.Close(ctx)
	rows, err := e.SQL.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_name REGEXP '^ib[0-9a-f]{6}_'", e.cfg.Database)
	if err != nil {
		return nil, err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, err
		}
		names = append(names, n)
	}
	rows.Close()
	for _, n := range names {
		if _, err := e.SQL.ExecContext(ctx, "DROP TABLE IF EXISTS `"+n+"`"); err != nil {
			return names, err
		}
	}
	if _, err := e.SQL.ExecContext(ctx, "DELETE FROM "+BarrierTable+" WHERE gid REGEXP '^ib[0-9a-f]{6}-'"); err != nil {
		return names, err
	}
	return names, deleteKeys(ctx, e.Redis, "idembench:*")
}
