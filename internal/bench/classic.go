package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
)

// The classic flow's lock scripts, built once like idemkit's: EVALSHA, EVAL only when Redis lacks them.
var (
	classicLock = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`)
	classicUnlock = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// Errors of the classic flow.
var (
	ErrClassicBusy   = errors.New("classic: key locked or processing")
	ErrClassicFailed = errors.New("classic: previous attempt failed")
)

// Classic is the idempotency flow idemkit replaces, written plainly as services commonly do it:
//
//  1. GET the Redis result cache; a hit is returned;
//  2. take a lock with a Lua SET NX PX script and a random token;
//  3. INSERT a PROCESSING row into a dedupe table, in its own commit (a duplicate key means another
//     attempt got there first: read the row and return its result or "busy");
//  4. run the business transaction;
//  5. UPDATE the row to SUCCEEDED with the result;
//  6. SET the result in the cache;
//  7. unlock with a Lua compare-and-delete.
//
// It uses the same gorm handle, the same raw-SQL style and the same business statement as idemkit's
// variants, so the difference measured is the flow, not the plumbing. It is safe for concurrent use.
type Classic struct {
	DB       *gorm.DB
	Redis    redis.UniversalClient
	Prefix   string // Redis key prefix
	LockTTL  time.Duration
	CacheTTL time.Duration

	insert, update, get string
}

// NewClassic returns the classic flow on table (created by Open).
func NewClassic(db *gorm.DB, rdb redis.UniversalClient, table, prefix string, cacheTTL time.Duration) *Classic {
	t := "`" + table + "`"
	return &Classic{
		DB: db, Redis: rdb, Prefix: prefix, LockTTL: 30 * time.Second, CacheTTL: cacheTTL,
		insert: "INSERT INTO " + t + " (biz_type, idem_key, status, created_at, updated_at) VALUES (?, ?, 'PROCESSING', ?, ?)",
		update: "UPDATE " + t + " SET status = ?, result = ?, updated_at = ? WHERE biz_type = ? AND idem_key = ?",
		get:    "SELECT status, result FROM " + t + " WHERE biz_type = ? AND idem_key = ?",
	}
}

// Do runs fn once for (bizType, key) and returns its result, or the stored one with replayed set.
func (c *Classic) Do(ctx context.Context, bizType, key string, fn func(ctx context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	base := c.Prefix + bizType + ":" + key
	cacheKey, lockKey := base+":cache", base+":lock"

	// 1. result cache
	if v, err := c.Redis.Get(ctx, cacheKey).Bytes(); err == nil {
		return v, true, nil
	} else if !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("classic: reading cache: %w", err)
	}

	// 2. lock
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	ok, err := classicLock.Run(ctx, c.Redis, []string{lockKey}, token, c.LockTTL.Milliseconds()).Int()
	if err != nil {
		return nil, false, fmt.Errorf("classic: locking: %w", err)
	}
	if ok == 0 {
		return nil, false, ErrClassicBusy
	}
	// 7. unlock, whatever happens
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if uerr := classicUnlock.Run(uctx, c.Redis, []string{lockKey}, token).Err(); uerr != nil && err == nil {
			err = fmt.Errorf("classic: unlocking: %w", uerr)
		}
	}()

	// 3. dedupe row, own commit
	db := c.DB.WithContext(ctx)
	now := time.Now()
	if err := db.Exec(c.insert, bizType, key, now, now).Error; err != nil {
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1062 {
			return nil, false, fmt.Errorf("classic: inserting dedupe row: %w", err)
		}
		var status string
		var res []byte
		if err := db.Raw(c.get, bizType, key).Row().Scan(&status, &res); err != nil {
			return nil, false, fmt.Errorf("classic: reading dedupe row: %w", err)
		}
		switch status {
		case "SUCCEEDED":
			_ = c.Redis.Set(ctx, cacheKey, res, c.CacheTTL).Err()
			return res, true, nil
		case "FAILED":
			return nil, false, ErrClassicFailed
		default:
			return nil, false, ErrClassicBusy
		}
	}

	// 4. business
	out, ferr := fn(ctx)
	status := "SUCCEEDED"
	if ferr != nil {
		status, out = "FAILED", nil
	}

	// 5. finish the row
	if err := db.Exec(c.update, status, out, time.Now(), bizType, key).Error; err != nil {
		return nil, false, errors.Join(fmt.Errorf("classic: updating dedupe row: %w", err), ferr)
	}
	if ferr != nil {
		return nil, false, ferr
	}

	// 6. cache
	if err := c.Redis.Set(ctx, cacheKey, out, c.CacheTTL).Err(); err != nil {
		return nil, false, fmt.Errorf("classic: filling cache: %w", err)
	}
	return out, false, nil
}
