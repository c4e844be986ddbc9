package barrier_test

import (
	"errors"
	"net/http"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
)

// A saga action and its compensation on MySQL/PostgreSQL/SQLite: DTM calls these handlers with
// trans_type, gid, branch_id and op in the query string.
func ExampleGorm() {
	var db *gorm.DB // opened by the application
	// The table is dtm_barrier.barrier, as DTM's.
	bar, err := barrier.NewGorm(db, nil)
	if err != nil {
		panic(err)
	}
	adjust := func(delta int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, err := barrier.FromRequest(r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			err = db.WithContext(r.Context()).Transaction(func(tx *gorm.DB) error {
				// The barrier rows and the business's writes commit or roll back together.
				return bar.Call(r.Context(), tx, b, func(tx *gorm.DB) error {
					res := tx.Exec("UPDATE account SET balance = balance + ? WHERE id = 1 AND balance + ? >= 0", delta, delta)
					if res.Error == nil && res.RowsAffected == 0 {
						return idemkit.Permanent(errors.New("insufficient balance")) // DTM: 409 FAILURE
					}
					return res.Error
				})
			})
			switch {
			case err == nil:
				w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
			case idemkit.IsPermanent(err):
				w.WriteHeader(http.StatusConflict)
				w.Write([]byte(`{"dtm_result":"FAILURE"}`))
			default:
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		}
	}
	http.Handle("POST /TransOut", adjust(-30))
	http.Handle("POST /TransOutCompensate", adjust(+30))
}

// The same business held in Redis: the business is a Lua body run in the barrier's script.
func ExampleRedis() {
	var rdb *redis.Client // opened by the application, with ContextTimeoutEnabled
	bar, err := barrier.NewRedis(rdb, nil)
	if err != nil {
		panic(err)
	}
	adjust := barrier.NewScript(`
local bal = tonumber(redis.call('HGET', KEYS[1], 'balance') or '0')
if bal + tonumber(ARGV[1]) < 0 then return redis.error_reply('FAILURE: insufficient balance') end
return redis.call('HINCRBY', KEYS[1], 'balance', ARGV[1])`)
	http.HandleFunc("POST /TransOut", func(w http.ResponseWriter, r *http.Request) {
		b, err := barrier.FromRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// {acct:1} is the hash tag: the barrier keys go to the same Redis Cluster slot.
		_, err = bar.Call(r.Context(), b, &barrier.RedisCall{Script: adjust, Keys: []string{"{acct:1}:balance"}, Args: []any{-30}})
		if errors.Is(err, barrier.ErrBusinessFailure) {
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"dtm_result":"FAILURE"}`))
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
	})
}

// Moving a TCC branch off dtmcli's Redis barrier one op at a time: with LayoutDTMCli the keys are
// dtmcli's, so this cancel releases what a try made with bb.RedisCheckAdjustAmount(rdb, key, -30, expire)
// reserved, and a try still served by dtmcli sees this barrier's null compensation.
func ExampleRedis_dtmcliLayout() {
	var rdb *redis.Client // the Redis dtmcli's v8 client talks to
	bar, err := barrier.NewRedis(rdb, &barrier.RedisOptions{Layout: barrier.LayoutDTMCli})
	if err != nil {
		panic(err)
	}
	http.HandleFunc("POST /TransOutCancel", func(w http.ResponseWriter, r *http.Request) {
		b, err := barrier.FromRequest(r) // reads gid etc. exactly as dtmcli.BarrierFromQuery
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// Was bb.RedisCheckAdjustAmount(rdb, "acct:1:balance", 30, expire).
		if _, err := bar.Call(r.Context(), b, barrier.AdjustAmount("acct:1:balance", 30)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
	})
}
