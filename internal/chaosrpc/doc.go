// Package chaosrpc is the chaos run of the gRPC interceptor (package grpcx): server processes that
// guard a Charge method in Tx mode on MariaDB, every other one with a Redis Locker (duplicates on
// the others meet in the database only), clients that call them over
// loopback TCP with duplicates, and a killer that SIGKILLs the servers mid-call and restarts them;
// then a checker, reading the tables with plain SQL (not through the Guard or the record Store),
// verifies one effect per key (a conservation check on the ledger), every answer of a key byte for
// byte the response its record stores, a SUCCEEDED record's response its ledger row, and the
// documented status codes. cmd/idemchaos runs it ("idemchaos grpc") and the grpcx tests run a small
// version.
//
// The service needs no generated code: requests and responses are google.protobuf.Struct messages
// and the service description is written by hand ([ServiceDesc]).
package chaosrpc
