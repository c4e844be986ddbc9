package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// TestDamagedLockValue: a Redis value under a key's lock key that starts like a lock but is none
// the Locker wrote ("Lgarbage", no expiry: a partial copy, an edit) is held by no attempt, and a
// Guard failing closed answers its key ErrLockUnavailable for as long as Redis keeps it.
// lock.Locker.Forget deletes such a value; purge --redis read the lock state first and stopped at
// it (a bulk purge gave up after the records before it), inspect failed, purge of a key without a
// record failed, and release and a sweep pass left it in place (the retry still failed). Each now
// handles it as Forget does: inspect shows it, purge, release and sweep delete it, and the key runs
// again.
func TestDamagedLockValue(t *testing.T) {
	f := setup(t, "sqlite")
	ctx := context.Background()
	lk := lock.New(f.rdb, &lock.Options{Prefix: f.prefix})
	damage := func(key string) {
		t.Helper()
		if err := f.rdb.Set(ctx, lk.Key(mustAddress(t, f, key)), "Lgarbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	run := func(key string) {
		t.Helper()
		ran := false
		_, err := f.guard.Do(ctx, idemkit.Call{Scope: scopeA, Key: key}, func(context.Context) ([]byte, error) { ran = true; return []byte("v"), nil })
		if err != nil || !ran {
			t.Fatalf("%s: Do = %v, ran %v; want it run", key, err, ran)
		}
	}
	unavailable := func(key string) {
		t.Helper()
		_, err := f.guard.Do(ctx, idemkit.Call{Scope: scopeA, Key: key}, func(context.Context) ([]byte, error) { return []byte("v"), nil })
		if !errors.Is(err, idemkit.ErrLockUnavailable) {
			t.Fatalf("%s over a damaged lock value: %v, want ErrLockUnavailable", key, err)
		}
	}

	// inspect shows the value and what the next attempt gets.
	for _, k := range []string{"d-1", "d-2", "d-3"} {
		run(k)
	}
	damage("d-2")
	unavailable("d-2")
	ins := jsonOf[inspectJSON](t, f.want(t, exitOK, nil, []string{"inspect", "--json", scopeA, "d-2"}))
	if ins.Redis == nil || !ins.Redis.Damaged || ins.Redis.Locked || ins.Redis.Cached || !strings.Contains(ins.Next, "ErrLockUnavailable") {
		t.Fatalf("inspect over a damaged lock value: %+v", ins)
	}
	f.want(t, exitOK, nil, []string{"inspect", scopeA, "d-2"}, "damaged")

	// A bulk purge goes through it and deletes it with its record.
	r := f.want(t, exitOK, nil, []string{"purge", "--yes", "--scope", scopeA}, "deleted 3 record(s)")
	run("d-2")
	if n, _ := f.rdb.Exists(ctx, lk.Key(mustAddress(t, f, "d-2"))).Result(); n == 0 {
		t.Fatalf("the key's lock or result should exist again after the run\n%s", r)
	}

	// One record's purge.
	damage("d-2")
	f.want(t, exitOK, nil, []string{"purge", "--yes", scopeA, "d-2"}, "deleted")
	run("d-2")

	// No record: purge offers to delete the value.
	damage("d-none")
	unavailable("d-none")
	f.want(t, exitOK, strings.NewReader("y\n"), []string{"purge", scopeA, "d-none"}, "damaged", "deleted")
	run("d-none")

	// release of a stuck claim deletes it with the claim, so the retry runs.
	cl, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: scopeA, Key: "d-stuck"})
	if err != nil || cl == nil {
		t.Fatalf("Begin: %v", err)
	}
	f.clock.Advance(2 * testLease)
	damage("d-stuck")
	f.want(t, exitOK, nil, []string{"release", "--yes", scopeA, "d-stuck"}, "released")
	run("d-stuck")

	// So does a sweep pass, recovering a stuck claim.
	if cl, _, err = f.guard.Begin(ctx, idemkit.Call{Scope: scopeA, Key: "d-swept"}); err != nil || cl == nil {
		t.Fatalf("Begin: %v", err)
	}
	f.clock.Advance(2 * testLease)
	damage("d-swept")
	f.env["IDEMCTL_NAMESPACE"] = "" // a sweep works on the whole table
	f.want(t, exitOK, nil, []string{"sweep", "--yes"}, "recovered 1 stuck claim(s)")
	run("d-swept")
}

// mustAddress returns the lock key of scopeA's key in the fixture's Guard.
func mustAddress(t *testing.T, f *fixture, key string) string {
	t.Helper()
	ad, err := f.guard.Address(scopeA, key)
	if err != nil {
		t.Fatal(err)
	}
	return ad.LockKey
}
