package bench

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idemkit/internal/sqlcount"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
)

// SQLCounts are the statements a database/sql pool sent to the server, counted at the driver (see
// package sqlcount).
type SQLCounts = sqlcount.Counts

// SQLCounter wraps a driver.Connector and counts what every connection it opens sends. It sees all
// traffic of the pool, gorm or not (DTM's dtmcli barrier and idemkit's record Store use database/sql
// directly), so every variant is counted the same way.
type SQLCounter = sqlcount.Counter

// NewSQLCounter returns a counting connector around inner; open the pool with sql.OpenDB.
func NewSQLCounter(inner driver.Connector) *SQLCounter { return sqlcount.New(inner) }

// RedisCounts are the commands a go-redis client sent.
type RedisCounts struct {
	// Commands, each command of a pipeline counted.
	Commands int64
	// RoundTrips: one per command outside pipelines, one per pipeline.
	RoundTrips int64
	// Evals counts EVAL commands: a script sent in full, because the server did not have it cached
	// (EVALSHA's NOSCRIPT fallback) or the caller did not use EVALSHA.
	Evals int64
	// Scripts counts the commands that run a Lua script: EVALSHA and EVAL.
	Scripts int64
}

// Sub returns c-o.
func (c RedisCounts) Sub(o RedisCounts) RedisCounts {
	return RedisCounts{Commands: c.Commands - o.Commands, RoundTrips: c.RoundTrips - o.RoundTrips, Evals: c.Evals - o.Evals,
		Scripts: c.Scripts - o.Scripts}
}

// RedisCounter is a go-redis hook counting commands and round trips (client.AddHook). It is safe for
// concurrent use.
type RedisCounter struct{ cmds, trips, evals, scripts atomic.Int64 }

// Counts returns the totals so far.
func (c *RedisCounter) Counts() RedisCounts {
	return RedisCounts{Commands: c.cmds.Load(), RoundTrips: c.trips.Load(), Evals: c.evals.Load(), Scripts: c.scripts.Load()}
}

// DialHook implements redis.Hook.
func (c *RedisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *RedisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		c.trips.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *RedisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		c.trips.Add(1)
		return next(ctx, cmds)
	}
}

func (c *RedisCounter) count(cmd redis.Cmder) {
	c.cmds.Add(1)
	switch n := cmd.Name(); {
	case strings.EqualFold(n, "eval"):
		c.evals.Add(1)
		c.scripts.Add(1)
	case strings.EqualFold(n, "evalsha"):
		c.scripts.Add(1)
	}
}

// GormCounter counts the statements gorm runs on a *gorm.DB, by a callback after each processor:
// it sees what the record Store and the business statements send through gorm, not DTM's
// database/sql statements. Install it with [CountGorm].
type GormCounter struct{ n atomic.Int64 }

// Statements returns the total so far.
func (c *GormCounter) Statements() int64 { return c.n.Load() }

// CountGorm registers a GormCounter's callbacks on db and returns it.
func CountGorm(db *gorm.DB) (*GormCounter, error) {
	c := new(GormCounter)
	inc := func(*gorm.DB) { c.n.Add(1) }
	const name = "idembench:count"
	cb := db.Callback()
	for _, err := range []error{
		cb.Create().After("gorm:create").Register(name, inc),
		cb.Query().After("gorm:query").Register(name, inc),
		cb.Update().After("gorm:update").Register(name, inc),
		cb.Delete().After("gorm:delete").Register(name, inc),
		cb.Raw().After("gorm:raw").Register(name, inc), // db.Exec
		cb.Row().After("gorm:row").Register(name, inc), // db.Raw(...).Row() and .Rows()
	} {
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}
