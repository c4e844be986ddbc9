package bench

import (
	"testing"

	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
)

// TestMessageVariants runs each message variant for a few messages through the real brokers: every
// message handled without error, and what the guard adds per message counted (at the driver and by a
// go-redis hook). The bare consumer: its business INSERT, alone in its transaction. The guarded one
// (msgx Tx mode, on the guard-owned Guard.Tx with the Redis Locker): the Locker's acquire (SET ... NX
// GET) and its release with the cache fill (one SET), no script; the business INSERT and the record's
// one INSERT, both inside the one transaction; nothing read before it (the Locker's cache vouches for
// new keys). v1's caller-owned DoTx cost three statements in the transaction (read, INSERT and the
// business's) and a script to release the lock without filling the cache.
func TestMessageVariants(t *testing.T) {
	testbroker.NATS(t)
	testbroker.AMQP(t)
	e, vs := setup(t)
	const biz = 1 // the business's INSERT
	bare := budget{redis: 0, scripts: 0, stmts: biz, inTx: biz, begins: 1, gorm: biz}
	guarded := budget{redis: 2, scripts: 0, stmts: 1 + biz, inTx: 1 + biz, begins: 1, gorm: biz}
	for _, tc := range []struct {
		name string
		want budget
	}{
		{VNATSBare, bare}, {VNATSGuarded, guarded}, {VAMQPBare, bare}, {VAMQPGuarded, guarded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := vs[tc.name]
			if err := v.Setup(ctxb); err != nil {
				t.Fatal(err)
			}
			w := &Worker{pfx: []byte(e.Run + "-" + tc.name + "-")}
			for i := range 5 {
				w.Seq = i
				d, err := measure(e, func() error { return v.Op(ctxb, w) })
				check(t, tc.name, d, err, tc.want)
			}
		})
	}
}
