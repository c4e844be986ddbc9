// Package capacity is idemkit's capacity harness: it measures, on private servers it starts on this
// machine (a MariaDB, a Redis and, optionally, a 3-node Galera cluster; see package
// internal/cluster), the figures the capacity model of docs/SCALING.md is built from — database,
// Redis and Go CPU per guarded call on the v2 write path (Guard.Tx through record.Store.Tx with and
// without a Locker, MarkTx, Execute, a cached and an uncached replay), InnoDB bytes per record of the
// v2 table, the sweeper's recovery and delete rates through its (status, expires_at) index, Redis
// memory per in-flight lock and per cached result (one key each) — and renders them, with the sizing
// they imply, as the Markdown block that document embeds.
//
// Run it with ./scripts/cluster.sh capacity (go run ./cmd/idemcapacity -galera -update
// docs/SCALING.md), which replaces the block between the capacity markers in place. It needs Linux
// (CPU times come from /proc) and mariadbd, mariadb-install-db and redis-server.
package capacity
