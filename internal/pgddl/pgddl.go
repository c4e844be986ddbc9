// Package pgddl is what the packages creating tables on PostgreSQL (record, barrier) share about a
// CREATE ... IF NOT EXISTS that several processes run at once, as the replicas of a service starting
// together do, and about the sessions' client_encoding their statements need ([EncodingCheck]).
package pgddl

import "errors"

// RaceRetries bounds how many times a CREATE ... IF NOT EXISTS that lost a race with the same
// statement of another session is run again.
const RaceRetries = 3

// SQLSTATEs of a CREATE ... IF NOT EXISTS that lost a race with the same statement.
const (
	uniqueViolation = "23505" // unique_violation, on the system catalog's unique index
	duplicateTable  = "42P07" // duplicate_table (also a relation such as an index)
	duplicateObject = "42710" // duplicate_object
)

// LostCreateRace reports whether err is what PostgreSQL answers a CREATE ... IF NOT EXISTS whose object
// another session created meanwhile. Such a statement checks for its object before either session has
// committed it, then fails on the catalog's unique index (23505), or as a duplicate (42P07, 42710) once
// the other committed; run again, IF NOT EXISTS finds the object. The error of any driver that reports
// SQLSTATEs (pgx, lib/pq) is recognised.
func LostCreateRace(err error) bool {
	var e interface{ SQLState() string }
	if !errors.As(err, &e) {
		return false
	}
	switch e.SQLState() {
	case uniqueViolation, duplicateTable, duplicateObject:
		return true
	}
	return false
}
