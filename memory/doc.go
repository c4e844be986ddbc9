// Package memory provides an in-process [idemkit.Store] and [idemkit.Locker], for unit tests and for
// single-process programs that want idempotency without external services. Records live only as long as
// the process: a restart forgets every key. Both pass the same conformance suite (package idemtest) as
// the database and Redis backends.
package memory
