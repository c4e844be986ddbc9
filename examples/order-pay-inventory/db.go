package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	mysqldrv "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Table names without the prefix.
const (
	tableOrders    = "orders"
	tableAccounts  = "accounts"
	tableInventory = "inventory"
	tableRecords   = "idemkit_records"
	tableBarrier   = "barrier"
)

// sqliteFile is the database file in the data directory.
const sqliteFile = "shop.db"

// database is the business database and the SQL that differs between dialects.
type database struct {
	db      *gorm.DB
	dialect string // "sqlite" or "mysql"
	where   string // for messages, password hidden
	tables  tables
}

// tables are the table names with the prefix applied.
type tables struct {
	orders, accounts, inventory, records, barrier string
}

func newTables(prefix string) tables {
	return tables{
		orders:    prefix + tableOrders,
		accounts:  prefix + tableAccounts,
		inventory: prefix + tableInventory,
		records:   prefix + tableRecords,
		barrier:   prefix + tableBarrier,
	}
}

// openDatabase opens cfg.DB (or the SQLite file in cfg.DataDir) and waits up to cfg.StartupTimeout for
// it to answer.
func openDatabase(ctx context.Context, cfg *Config) (*database, error) {
	d := &database{tables: newTables(cfg.TablePrefix)}
	var dialector gorm.Dialector
	switch {
	case strings.HasPrefix(cfg.DB, "mysql://"):
		dc, err := mysqldrv.ParseDSN(strings.TrimPrefix(cfg.DB, "mysql://"))
		if err != nil {
			return nil, fmt.Errorf("db: %w", err)
		}
		dc.ParseTime = true // created_at reads back as time.Time
		dc.Loc = time.UTC
		if dc.Timeout == 0 {
			dc.Timeout = 5 * time.Second
		}
		d.dialect, d.where = "mysql", "MySQL "+dc.Addr+"/"+dc.DBName
		dialector = mysql.Open(dc.FormatDSN())
	default:
		path := strings.TrimPrefix(cfg.DB, "sqlite://")
		if cfg.DB == "" {
			if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
				return nil, fmt.Errorf("data directory: %w", err)
			}
			path = filepath.Join(cfg.DataDir, sqliteFile)
		}
		d.dialect, d.where = "sqlite", "SQLite "+path
		// WAL lets readers run beside the single writer; BEGIN IMMEDIATE takes the write lock up front
		// so a transaction never fails to upgrade its read lock; the busy timeout queues writers.
		dialector = sqlite.Open(path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
			"&_pragma=synchronous(NORMAL)&_txlock=immediate")
	}
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", d.where, err)
	}
	d.db = db
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if d.dialect == "sqlite" {
		sqlDB.SetMaxOpenConns(8)
	} else {
		sqlDB.SetMaxOpenConns(50)
		sqlDB.SetMaxIdleConns(50)
	}
	if err := waitUp(ctx, cfg.StartupTimeout, d.where, sqlDB.PingContext); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	return d, nil
}

// waitUp calls ping until it succeeds, ctx ends or timeout passes.
func waitUp(ctx context.Context, timeout time.Duration, what string, ping func(context.Context) error) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		err := ping(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("interrupted while waiting for %s to answer: %w", what, err)
			}
			return fmt.Errorf("%s did not answer within %s: %w", what, timeout, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (d *database) close() error {
	sqlDB, err := d.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// createTables creates the business tables if they do not exist (the record and barrier tables are
// created by their packages).
func (d *database) createTables(ctx context.Context) error {
	t := d.tables
	var stmts []string
	if d.dialect == "mysql" {
		stmts = []string{
			`CREATE TABLE IF NOT EXISTS ` + t.orders + ` (
				id VARCHAR(40) NOT NULL PRIMARY KEY,
				user_id VARCHAR(64) NOT NULL,
				sku VARCHAR(64) NOT NULL,
				qty BIGINT NOT NULL,
				amount BIGINT NOT NULL,
				status VARCHAR(16) NOT NULL,
				gid VARCHAR(128) NOT NULL,
				created_at DATETIME(3) NOT NULL,
				UNIQUE KEY ` + t.orders + `_gid (gid),
				KEY ` + t.orders + `_user (user_id),
				KEY ` + t.orders + `_pending (status, created_at),
				CHECK (qty > 0 AND amount > 0)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
			`CREATE TABLE IF NOT EXISTS ` + t.accounts + ` (
				user_id VARCHAR(64) NOT NULL PRIMARY KEY,
				balance BIGINT NOT NULL,
				frozen BIGINT NOT NULL DEFAULT 0,
				CHECK (balance >= 0 AND frozen >= 0)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
			`CREATE TABLE IF NOT EXISTS ` + t.inventory + ` (
				sku VARCHAR(64) NOT NULL PRIMARY KEY,
				stock BIGINT NOT NULL,
				reserved BIGINT NOT NULL DEFAULT 0,
				CHECK (stock >= 0 AND reserved >= 0)
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		}
	} else {
		stmts = []string{
			`CREATE TABLE IF NOT EXISTS ` + t.orders + ` (
				id TEXT NOT NULL PRIMARY KEY,
				user_id TEXT NOT NULL,
				sku TEXT NOT NULL,
				qty INTEGER NOT NULL CHECK (qty > 0),
				amount INTEGER NOT NULL CHECK (amount > 0),
				status TEXT NOT NULL,
				gid TEXT NOT NULL UNIQUE,
				created_at DATETIME NOT NULL
			)`,
			`CREATE INDEX IF NOT EXISTS ` + t.orders + `_user ON ` + t.orders + ` (user_id)`,
			`CREATE INDEX IF NOT EXISTS ` + t.orders + `_pending ON ` + t.orders + ` (status, created_at)`,
			`CREATE TABLE IF NOT EXISTS ` + t.accounts + ` (
				user_id TEXT NOT NULL PRIMARY KEY,
				balance INTEGER NOT NULL CHECK (balance >= 0),
				frozen INTEGER NOT NULL DEFAULT 0 CHECK (frozen >= 0)
			)`,
			`CREATE TABLE IF NOT EXISTS ` + t.inventory + ` (
				sku TEXT NOT NULL PRIMARY KEY,
				stock INTEGER NOT NULL CHECK (stock >= 0),
				reserved INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0)
			)`,
		}
	}
	for _, s := range stmts {
		if err := d.db.WithContext(ctx).Exec(s).Error; err != nil {
			return fmt.Errorf("creating tables: %w", err)
		}
	}
	return nil
}

// upsert returns an INSERT of (key, value) into table's columns that sets only col on a conflict.
func (d *database) upsert(table, keyCol, col, zeroCol string) string {
	ins := "INSERT INTO " + table + " (" + keyCol + ", " + col + ", " + zeroCol + ") VALUES (?, ?, 0)"
	if d.dialect == "mysql" {
		return ins + " ON DUPLICATE KEY UPDATE " + col + " = VALUES(" + col + ")"
	}
	return ins + " ON CONFLICT (" + keyCol + ") DO UPDATE SET " + col + " = excluded." + col
}

// errNotFound reports a missing order, account or SKU.
var errNotFound = errors.New("not found")
