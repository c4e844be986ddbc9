// Package bench is the library behind cmd/idembench: it measures idemkit against a bare business
// transaction, DTM's dtmcli barrier and the classic "Redis cache + Lua lock + dedupe table" flow, in
// one run on the same MariaDB and Redis, and asserts idemkit's round-trip budget in its tests.
//
// Every variant writes the same business statement (Env.InsertBiz: one INSERT into one table, in a
// transaction of its own or of the caller's); only the idempotency layer around it differs. Business
// effects are never cached: a replay returns a stored result, a new key always writes.
//
// What is counted, per request:
//
//   - SQL statements, prepares, BEGIN/COMMIT at the MySQL driver, through a counting
//     driver.Connector under the one database/sql pool every variant uses ([SQLCounter]); gorm's
//     callbacks count the statements gorm sees as a cross-check ([GormCounter]);
//   - Redis commands and round trips with a go-redis hook ([RedisCounter]), and EVALs (a script sent
//     in full) to show scripts are not loaded per request;
//   - heap allocations of the process (runtime.MemStats), CPU time of this process, of redis-server
//     and of mariadbd, and InnoDB fsyncs ([ServerStats]).
//
// A [Runner] runs segments — one variant at one concurrency for a duration or a number of requests —
// interleaving the variants round by round so that the machine's drift hits all of them alike;
// [Summarize] and [Ratios] turn the samples into medians and per-round ratios, [WriteMarkdown] and
// [Chart] into the report under docs/.
//
// The tests need the services of scripts/services.sh (MariaDB with database idemkit_test, Redis).
package bench
