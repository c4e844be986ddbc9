// Package admin answers an operator's questions about idemkit's records and performs the repairs
// that are safe. It is what the idemctl command runs; programs can use it too (a dashboard's gauges
// of stuck claims, an admin endpoint).
//
//	adm, err := admin.New(db, &admin.Options{Table: "idemkit_records", Namespace: "shop", Redis: rdb})
//	if err != nil { ... }
//	rec, err := adm.Get(ctx, "POST /orders", "key-1")        // the record, namespace and hashing applied
//	stuck, err := adm.List(ctx, admin.Filter{Stuck: true})     // PROCESSING records whose lease ran out
//	stats, err := adm.Stats(ctx, admin.Filter{})                // per scope: states, stuck, takeovers
//	plan, err := adm.PlanSweep(ctx, 100)                        // what the sweeper would delete or recover
//	_, err = adm.Release(ctx, rec, admin.ReleaseOptions{By: "alice"}) // end a stuck claim, fenced
//
// # Addressing
//
// Records are addressed as the application's Guard addresses them: the scope and key of an
// idemkit.Call, to which the Admin applies the Guard's own rules ([idemkit.Guard.Address]: namespace
// prefix "ns/", hashing of values longer than idemkit.MaxStoredLen). Options must therefore match
// the application's: table, namespace, MaxKeyLen, Redis prefix.
//
// # Safety
//
// Reads take no locks. The two writes are conditioned on the version of the record they were decided
// from (fence, owner and status, as record.Store.Update and Delete are): when the record changed in
// between — finished, taken over, recovered — they write nothing and return idemkit.ErrFenced.
// [Admin.Release] ends a stuck claim the way the sweeper does (FAILED, fence + 1, no owner), so the
// stalled holder can never finish it and the next attempt runs again; it refuses live leases and
// claims tied to a global transaction unless forced. [Admin.Purge] deletes a record, and with Redis its
// cached result; unless forced it refuses live claims, claims of a global transaction, and finished
// records an attempt may still run or answer under (a running Mark-mode function, a lock holder that
// would cache the record again).
//
// # Statements
//
// Every SQL text is in one file (sql.go); statements address records by (scope, idem_key) and read
// expires_at = 0 as "no expiry". They follow the v2 table's two keys: the primary key (scope,
// idem_key) and the index (status, expires_at). The claims gauge ([Admin.Claims], run on every
// Prometheus scrape), the sweeper's conditions and listings of one status read that index — the
// claims in flight, not the table — and listings page through one key or the other, 500 rows at a
// time. Stats over every state, and filters on a GID or an age (updated_at), read the table (or the
// scope's part of it): those columns have no index.
package admin
