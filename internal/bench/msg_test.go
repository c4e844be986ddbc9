package bench

import (
	"testing"

	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
)

// TestMessageVariants runs each message variant for a few messages through the real brokers: every
// message handled without error, and what the guard adds per message counted — the bare consumer's
// one business statement in one transaction; the guarded one's claim and finish in the same
// transaction plus the Locker's two Redis commands (the write path's v1 Tx-mode budget).
func TestMessageVariants(t *testing.T) {
	testbroker.NATS(t)
	testbroker.AMQP(t)
	e, vs := setup(t)
	for _, tc := range []struct {
		name  string
		redis int64
		stmts int64
	}{
		{VNATSBare, 0, 1}, {VNATSGuarded, 2, 3}, {VAMQPBare, 0, 1}, {VAMQPGuarded, 2, 3},
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
				check(t, tc.name, d, err, budget{redis: tc.redis, stmts: tc.stmts, begins: 1})
			}
		})
	}
}
