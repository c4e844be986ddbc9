package bench

import "testing"

// TestGRPCVariants runs each gRPC variant for a few calls over loopback and counts what the guard
// adds per call. Bare: the business INSERT in its own transaction. Execute mode (grpc-guarded): the
// Locker's acquire and release (two native commands, no script), the claim and the finish around the
// business transaction. Tx mode (grpc-guarded-tx, Guard.Tx on the record Store): the same two Redis
// commands, the business INSERT and the record's one INSERT in one transaction, nothing else (START
// TRANSACTION leaves with the business's INSERT, the record's INSERT with the COMMIT: the pool allows
// multi-statement packets).
func TestGRPCVariants(t *testing.T) {
	e, vs := setup(t)
	const biz = 1 // the business's INSERT
	for _, tc := range []struct {
		name string
		want budget
	}{
		{VGRPCBare, budget{redis: 0, scripts: 0, stmts: biz, inTx: biz, begins: 1, gorm: biz}},
		{VGRPCGuarded, budget{redis: 2, scripts: 0, stmts: 2 + biz, inTx: biz, begins: 1, gorm: biz}},
		{VGRPCGuardedTx, budget{redis: 2, scripts: 0, stmts: 1 + biz, inTx: 1 + biz, begins: 1, trips: biz + 1, gorm: biz}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := vs[tc.name]
			if err := v.Setup(ctxb); err != nil {
				t.Fatal(err)
			}
			w := &Worker{pfx: []byte(e.Run + "-" + tc.name + "-")}
			w.Seq = 100 // one call first: the Store's first transaction asks whether the server takes multi-statement packets
			if err := v.Op(ctxb, w); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				w.Seq = i
				d, err := measure(e, func() error { return v.Op(ctxb, w) })
				check(t, tc.name, d, err, tc.want)
			}
		})
	}
}
