// Package capacity is idemkit's capacity harness: it measures, on private servers it starts on this
// machine (a MariaDB, a Redis and, optionally, a 3-node Galera cluster; see package
// internal/cluster), the figures the capacity model of docs/SCALING.md is built from — database CPU
// per guarded write in each mode, InnoDB bytes per record, the sweeper's recovery and delete rates,
// Redis memory per in-flight lock and per cached result and Redis CPU per call — and renders them,
// with the sizing they imply, as the Markdown block that document embeds.
//
// Run it with ./scripts/cluster.sh capacity (go run ./cmd/idemcapacity -galera -update
// docs/SCALING.md), which replaces the block between the capacity markers in place. It needs Linux
// (CPU times come from /proc) and mariadbd, mariadb-install-db and redis-server.
package capacity
