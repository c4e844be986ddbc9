package barrier

// The business of DTM's own barrier tests (test/busi): two accounts, TransOut (1) and TransIn (2), each
// with a balance and a trading (reserved) balance; a saga moves money with adjustBalance, a TCC reserves
// it in try and settles it in confirm or releases it in cancel. Every backend implements it behind the
// barrier so one set of scenarios runs on all of them.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

const (
	transOut    = 1
	transIn     = 2
	initBalance = 10000
	amount      = 30
)

// change is one kind of business write.
type change int

const (
	adjustBalance change = iota // balance += delta; refused (FAILURE) when it would go negative
	adjustTrading               // trading += delta; refused when balance + trading + delta < 0
	settle                      // trading -= delta, balance += delta (TCC confirm)
)

// errFailure is the business's permanent failure (DTM's FAILURE, HTTP 409).
var errFailure = errors.New("FAILURE")

type account struct{ Balance, Trading int }

// bank is the business of one backend behind its barrier.
type bank interface {
	// run applies c with delta to account uid behind the barrier for b; fail makes the business refuse.
	run(ctx context.Context, b *Branch, uid int, c change, delta int, fail bool) (Outcome, error)
	// panicking writes to account uid behind the barrier for b and then panics (Redis: raises a Lua
	// error). It returns the recovered panic value, or the error for Redis.
	panicking(ctx context.Context, b *Branch, uid int) (recovered any, err error)
	accounts(t testing.TB) map[int]account
	// barrierRows counts the barrier rows (keys) of gid.
	barrierRows(t testing.TB, gid string) int
}

// backend names a bank constructor.
type backend struct {
	name string
	new  func(t testing.TB) bank
}

// backends lists every barrier backend, the gorm ones in three ways of holding the transaction.
func backends() []backend {
	var bs []backend
	for _, d := range []struct {
		name string
		open func(testing.TB, *gorm.Config) *gorm.DB
	}{{"mysql", testsvc.MySQL}, {"postgres", testsvc.Postgres}, {"sqlite", testsvc.SQLite}} {
		bs = append(bs,
			backend{d.name, func(t testing.TB) bank { return newGormBank(t, d.open(t, nil), ownTx) }},
			backend{d.name + "/db.Transaction", func(t testing.TB) bank { return newGormBank(t, d.open(t, nil), gormTx) }},
			backend{d.name + "/PrepareStmt", func(t testing.TB) bank {
				return newGormBank(t, d.open(t, &gorm.Config{Logger: logger.Discard, PrepareStmt: true}), gormTx)
			}},
		)
	}
	return append(bs, backend{"redis", func(t testing.TB) bank { return newRedisBank(t) }})
}

// gormMode says who holds the transaction.
type gormMode int

const (
	ownTx  gormMode = iota // Gorm.Transaction opens and ends it
	gormTx                 // the caller's db.Transaction holds it; the barrier runs with Gorm.Call
)

type gormBank struct {
	db    *gorm.DB
	g     *Gorm
	accts string
	mode  gormMode
}

// newGormTable returns a barrier on a fresh table of db, dropped when t ends. PostgreSQL gets a fresh
// schema holding a table named barrier, as DTM's dtm_barrier.barrier, so the constraint is uniq_barrier.
func newGormTable(t testing.TB, db *gorm.DB) *Gorm {
	t.Helper()
	var table string
	switch db.Dialector.Name() {
	case "postgres":
		schema := testsvc.Name("bar_")
		table = schema + ".barrier"
		t.Cleanup(func() {
			if err := db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE").Error; err != nil {
				t.Logf("dropping schema %s: %v", schema, err)
			}
		})
	default:
		table = testsvc.Name("bar_")
		testsvc.DropTable(t, db, table)
	}
	g, err := NewGorm(db, &GormOptions{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return g
}

// newAccounts creates the account table with both accounts at initBalance.
func newAccounts(t testing.TB, db *gorm.DB) string {
	t.Helper()
	name := testsvc.Name("acct_")
	testsvc.DropTable(t, db, name)
	if err := db.Exec("CREATE TABLE " + name + " (user_id int PRIMARY KEY, balance int NOT NULL, trading_balance int NOT NULL DEFAULT 0)").Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO "+name+" (user_id, balance) VALUES (?, ?), (?, ?)", transOut, initBalance, transIn, initBalance).Error; err != nil {
		t.Fatal(err)
	}
	return name
}

func newGormBank(t testing.TB, db *gorm.DB, mode gormMode) *gormBank {
	t.Helper()
	return &gormBank{db: db, g: newGormTable(t, db), accts: newAccounts(t, db), mode: mode}
}

func (k *gormBank) business(uid int, c change, delta int, fail bool) func(tx *gorm.DB) error {
	return func(tx *gorm.DB) error {
		if fail {
			return idemkit.Permanent(errFailure)
		}
		var res *gorm.DB
		switch c {
		case adjustBalance:
			res = tx.Exec("UPDATE "+k.accts+" SET balance = balance + ? WHERE user_id = ? AND balance + ? >= 0", delta, uid, delta)
		case adjustTrading:
			res = tx.Exec("UPDATE "+k.accts+" SET trading_balance = trading_balance + ? WHERE user_id = ? AND balance + trading_balance + ? >= 0", delta, uid, delta)
		case settle:
			res = tx.Exec("UPDATE "+k.accts+" SET trading_balance = trading_balance - ?, balance = balance + ? WHERE user_id = ?", delta, delta, uid)
		}
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return idemkit.Permanent(fmt.Errorf("%w: balance not enough", errFailure))
		}
		return nil
	}
}

func (k *gormBank) call(ctx context.Context, b *Branch, fn func(tx *gorm.DB) error) (Outcome, error) {
	if k.mode == ownTx {
		return k.g.TransactionOutcome(ctx, b, fn)
	}
	var out Outcome
	err := k.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		out, err = k.g.CallOutcome(ctx, tx, b, fn)
		return err
	})
	return out, err
}

func (k *gormBank) run(ctx context.Context, b *Branch, uid int, c change, delta int, fail bool) (Outcome, error) {
	return k.call(ctx, b, k.business(uid, c, delta, fail))
}

func (k *gormBank) panicking(ctx context.Context, b *Branch, uid int) (recovered any, err error) {
	defer func() { recovered = recover() }()
	_, err = k.call(ctx, b, func(tx *gorm.DB) error {
		if err := k.business(uid, adjustBalance, -amount, false)(tx); err != nil {
			return err
		}
		panic("business panicked")
	})
	return nil, err
}

func (k *gormBank) accounts(t testing.TB) map[int]account {
	t.Helper()
	var rows []struct {
		UserID         int
		Balance        int
		TradingBalance int
	}
	if err := k.db.Raw("SELECT user_id, balance, trading_balance FROM " + k.accts).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	m := map[int]account{}
	for _, r := range rows {
		m[r.UserID] = account{r.Balance, r.TradingBalance}
	}
	return m
}

func (k *gormBank) barrierRows(t testing.TB, gid string) int {
	t.Helper()
	var n int64
	if err := k.db.Raw("SELECT count(*) FROM "+k.g.Table()+" WHERE gid = ?", gid).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// The Redis business: each account is a hash {balance, trading} under one hash tag.
var (
	redisAdjustBalance = NewScript(`
local bal = tonumber(redis.call('HGET', KEYS[1], 'balance'))
if not bal then return redis.error_reply('ERR no account ' .. KEYS[1]) end
local d = tonumber(ARGV[1])
if ARGV[2] == 'fail' or bal + d < 0 then return redis.error_reply('FAILURE: balance not enough') end
return redis.call('HINCRBY', KEYS[1], 'balance', d)`)
	redisAdjustTrading = NewScript(`
local a = redis.call('HMGET', KEYS[1], 'balance', 'trading')
local bal, tr = tonumber(a[1]), tonumber(a[2] or '0')
if not bal then return redis.error_reply('ERR no account ' .. KEYS[1]) end
local d = tonumber(ARGV[1])
if ARGV[2] == 'fail' or bal + tr + d < 0 then return redis.error_reply('FAILURE: balance not enough') end
return redis.call('HINCRBY', KEYS[1], 'trading', d)`)
	redisSettle = NewScript(`
local d = tonumber(ARGV[1])
redis.call('HINCRBY', KEYS[1], 'trading', -d)
return redis.call('HINCRBY', KEYS[1], 'balance', d)`)
	redisPanicking = NewScript(`
error('business panicked')`)
)

type redisBank struct {
	rdb *redis.Client
	r   *Redis
	tag string
}

func newRedisBank(t testing.TB) *redisBank {
	t.Helper()
	rdb := testsvc.Redis(t)
	k := &redisBank{rdb: rdb, tag: testsvc.Name("acct_")}
	var err error
	if k.r, err = NewRedis(rdb, &RedisOptions{TTL: 10 * 60e9}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { deleteTagged(context.Background(), rdb, k.tag) })
	for _, uid := range []int{transOut, transIn} {
		if err := rdb.HSet(ctx, k.key(uid), "balance", initBalance, "trading", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// deleteTagged deletes every key carrying hash tag tag.
func deleteTagged(ctx context.Context, rdb *redis.Client, tag string) {
	iter := rdb.Scan(ctx, 0, "{"+tag+"}*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

func (k *redisBank) key(uid int) string { return "{" + k.tag + "}:acct:" + strconv.Itoa(uid) }

func (k *redisBank) run(ctx context.Context, b *Branch, uid int, c change, delta int, fail bool) (Outcome, error) {
	s := map[change]*Script{adjustBalance: redisAdjustBalance, adjustTrading: redisAdjustTrading, settle: redisSettle}[c]
	flag := ""
	if fail {
		flag = "fail"
	}
	res, err := k.r.Call(ctx, b, &RedisCall{Script: s, Keys: []string{k.key(uid)}, Args: []any{delta, flag}})
	return res.Outcome, err
}

func (k *redisBank) panicking(ctx context.Context, b *Branch, uid int) (any, error) {
	_, err := k.r.Call(ctx, b, &RedisCall{Script: redisPanicking, Keys: []string{k.key(uid)}})
	return nil, err
}

func (k *redisBank) accounts(t testing.TB) map[int]account {
	t.Helper()
	m := map[int]account{}
	for _, uid := range []int{transOut, transIn} {
		v, err := k.rdb.HMGet(context.Background(), k.key(uid), "balance", "trading").Result()
		if err != nil {
			t.Fatal(err)
		}
		bal, _ := strconv.Atoi(fmt.Sprint(v[0]))
		tr, _ := strconv.Atoi(fmt.Sprint(v[1]))
		m[uid] = account{bal, tr}
	}
	return m
}

func (k *redisBank) barrierRows(t testing.TB, gid string) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	pattern := "{" + k.tag + "}:" + DefaultRedisPrefix + ":" + strconv.Itoa(len(gid)) + ":" + gid + ":*"
	iter := k.rdb.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		if strings.HasPrefix(iter.Val(), "{"+k.tag+"}") {
			n++
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
