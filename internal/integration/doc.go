// Package integration holds tests that combine idemkit's backends against the real services: several
// Guards with their own connection pools sharing one table and one Redis, and a database cut off
// mid-test.
package integration
