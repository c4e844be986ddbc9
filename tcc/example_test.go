package tcc_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/tcc"
	"github.com/idemkit/idemkit/txstatus"
)

// The initiator: one TCC per idempotency key. A try that fails makes Run abort, DTM cancels the tried
// branches, and the record is FAILED so the client may retry with the same key.
func ExampleGlobal_Run() {
	var guard *idemkit.Guard // over record.Store and lock.Locker, as for sagas
	const dtm = "http://dtm:36789/api/dtmsvr"
	global := &tcc.Global{Server: dtm, Lifecycle: &hooks.Lifecycle{Guard: guard}, Wait: 5 * time.Second}
	req := &transfer{Amount: 30}
	out, err := global.Run(context.Background(), tcc.RunParams{
		Call:    idemkit.Call{Scope: "POST /transfers", Key: "client-key-123", Fingerprint: "amount=30"},
		Result:  []byte(`{"status":"transferred"}`), // stored with the claim, replayed to duplicates
		Options: func(t *dtmcli.Tcc) { t.TimeoutToFail = 60 },
		Tries: func(t *dtmcli.Tcc) error {
			if _, err := t.CallBranch(req, "http://accounts/OutTry", "http://accounts/OutConfirm", "http://accounts/OutCancel"); err != nil {
				return err // Run aborts: DTM cancels what was tried, the record is FAILED (REJECTED for an idemkit.Permanent error)
			}
			_, err := t.CallBranch(req, "http://wallet/InTry", "http://wallet/InConfirm", "http://wallet/InCancel")
			return err
		},
	})
	switch {
	case errors.Is(err, idemkit.ErrInFlight):
		log.Print("the same transfer is running")
	case errors.Is(err, idemkit.ErrPayloadMismatch): // the key was used for another transfer: no retry with it helps
		log.Printf("this key was used for another transfer: %v", err)
	case errors.Is(err, idemkit.ErrRejected): // a try's idemkit.Permanent error, on the first call as on replays
		log.Printf("refused for good, a retry gets the same answer: %v", err)
	case err != nil: // store, lock or DTM unreachable, or DTM's answer lost
		log.Printf("no outcome yet, retry with the same key: %v", err)
	case out.Status == txstatus.Failed:
		log.Printf("cancelled: %v", out.Reason) // the try's error
	case out.Replayed, out.Status == txstatus.Succeed:
		log.Printf("done: %s", out.Result)
	case out.Status == txstatus.Aborting, out.Status == txstatus.Prepared: // a try failed; DTM is cancelling (or will, at TimeoutToFail)
		log.Printf("cancelling: %v", out.Reason) // the reconciler records FAILED (REJECTED for a permanent try error)
	default: // submitted
		log.Printf("confirming: %s", out.Result) // the reconciler settles the record
	}
}

// Branches on a gorm database: the try reserves, the confirm settles, the cancel releases; the barrier
// makes confirm and cancel idempotent, an empty cancel (try never ran) and a late try (after its cancel)
// do nothing.
func ExampleTry() {
	var db *gorm.DB
	bar, err := barrier.NewGorm(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	var branches *dtmhttp.Branches // nil: defaults, no lock; see dtmhttp.New
	http.Handle("POST /OutTry", tcc.Try(branches, dtmhttp.Gorm(bar, func(ctx context.Context, tx *gorm.DB, t transfer) error {
		res := tx.Exec("UPDATE account SET trading = trading - ? WHERE id = 1 AND balance + trading - ? >= 0", t.Amount, t.Amount)
		if res.Error == nil && res.RowsAffected == 0 {
			return idemkit.Permanent(errors.New("insufficient balance")) // 409: the initiator aborts
		}
		return res.Error
	})))
	http.Handle("POST /OutConfirm", tcc.Confirm(branches, dtmhttp.Gorm(bar, func(ctx context.Context, tx *gorm.DB, t transfer) error {
		return tx.Exec("UPDATE account SET trading = trading + ?, balance = balance - ? WHERE id = 1", t.Amount, t.Amount).Error
	})))
	http.Handle("POST /OutCancel", tcc.Cancel(branches, dtmhttp.Gorm(bar, func(ctx context.Context, tx *gorm.DB, t transfer) error {
		return tx.Exec("UPDATE account SET trading = trading + ? WHERE id = 1", t.Amount).Error
	})))
}

// Branches on Redis: the business is a Lua body run atomically with the barrier keys, which share the
// account's hash tag. A 'FAILURE...' error reply is a permanent failure (409).
func ExampleTry_redis() {
	var rdb *redis.Client
	bar, err := barrier.NewRedis(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	try := barrier.NewScript(`
if redis.call('HGET', KEYS[1], 'frozen') == '1' then return redis.error_reply('FAILURE: account frozen') end
return redis.call('HINCRBY', KEYS[1], 'trading', ARGV[1])`)
	call := func(s *barrier.Script) dtmhttp.RedisFunc[transfer] {
		return func(ctx context.Context, t transfer) (*barrier.RedisCall, error) {
			return &barrier.RedisCall{Script: s, Keys: []string{"{wallet:2}:account"}, Args: []any{t.Amount}}, nil
		}
	}
	http.Handle("POST /InTry", tcc.Try(nil, dtmhttp.Redis(bar, call(try))))
}
