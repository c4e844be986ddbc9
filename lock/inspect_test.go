package lock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock"
)

// TestStateFollowsLocker: State reads what the Locker's own commands wrote — nothing, a lock with its
// token and deadline, a refreshed lock, a cached result of every shape (escaped or not, empty, large)
// — in native and in script mode, at the key Key names.
func TestStateFollowsLocker(t *testing.T) {
	for _, scripts := range []bool{false, true} {
		t.Run(map[bool]string{false: "native", true: "scripts"}[scripts], func(t *testing.T) {
			l, b := setupMode(t, scripts)
			ctx := testCtx(t)
			state := func(key string) lock.State {
				t.Helper()
				s, err := l.State(ctx, key)
				must(t, err)
				return s
			}
			if s := state("k"); s != (lock.State{}) {
				t.Fatalf("State of an absent key = %+v, want the zero State", s)
			}
			before := time.Now()
			v, err := l.Acquire(ctx, "k", "tok-1", time.Minute)
			if err != nil || v != nil {
				t.Fatalf("Acquire = %q, %v", v, err)
			}
			s := state("k")
			if !s.Locked || s.Token != "tok-1" || s.Cached || s.TTL <= 0 || s.TTL > time.Minute ||
				s.Deadline.Before(before.Add(time.Minute).Truncate(time.Millisecond)) || s.Deadline.After(time.Now().Add(time.Minute+time.Millisecond)) {
				t.Fatalf("State after Acquire = %+v", s)
			}
			must(t, l.Refresh(ctx, "k", "tok-1", time.Hour))
			if s := state("k"); !s.Locked || s.Token != "tok-1" || s.TTL <= time.Minute || s.Deadline.Before(before.Add(time.Hour).Truncate(time.Millisecond)) {
				t.Fatalf("State after Refresh = %+v", s)
			}
			if n, err := b.rdb.Exists(ctx, l.Key("k")).Result(); err != nil || n != 1 {
				t.Fatalf("Key(k) = %q does not exist: %d %v", l.Key("k"), n, err)
			}

			results := map[string][]byte{
				"plain":   []byte("\x01\x01cached"),
				"L-first": []byte("Looks like a lock"),
				"E-first": []byte("Escaped"),
				"empty":   {},
				"large":   []byte("\x01" + strings.Repeat("x", 1<<20)),
			}
			for name, res := range results {
				k := "r-" + name
				if _, err := l.Acquire(ctx, k, "tok", time.Minute); err != nil {
					t.Fatal(err)
				}
				must(t, l.Release(ctx, k, "tok", res, time.Hour))
				s := state(k)
				if s.Locked || !s.Cached || s.Size != int64(len(res)) || s.TTL <= time.Minute || s.TTL > time.Hour {
					t.Errorf("%s: State of a cached result of %d bytes = %+v", name, len(res), s)
				}
				// What State calls the cached result is what a duplicate gets.
				got, err := l.Acquire(ctx, k, "dup", time.Minute)
				if err != nil || got == nil || string(got) != string(res) {
					t.Errorf("%s: Acquire of the cached key = %d bytes, %v", name, len(got), err)
				}
			}
		})
	}
}

// TestStateRefusesForeignValues: a value the Locker never writes — a malformed lock, a hash — is an
// error, not a guess.
func TestStateRefusesForeignValues(t *testing.T) {
	l, b := setup(t)
	ctx := testCtx(t)
	must(t, b.rdb.Set(ctx, l.Key("bad"), "Lnot-a-deadline", time.Minute).Err())
	if s, err := l.State(ctx, "bad"); err == nil || !strings.Contains(err.Error(), "malformed lock value") {
		t.Fatalf("State of a malformed lock = %+v, %v", s, err)
	}
	must(t, b.rdb.HSet(ctx, l.Key("hash"), "f", "v").Err())
	if s, err := l.State(ctx, "hash"); err == nil {
		t.Fatalf("State of a hash = %+v, nil error", s)
	}
	// A value written without expiry (not by the Locker) reads with TTL 0.
	must(t, b.rdb.Set(ctx, l.Key("forever"), "\x01r", 0).Err())
	if s, err := l.State(ctx, "forever"); err != nil || !s.Cached || s.Size != 2 || s.TTL != 0 {
		t.Fatalf("State of a result without expiry = %+v, %v", s, err)
	}
}

// TestForget: Forget deletes a cached result and the lock of its token, and leaves another attempt's
// lock (and, without a token, every lock) in place.
func TestForget(t *testing.T) {
	l, _ := setup(t)
	ctx := testCtx(t)
	forget := func(key, token string, want bool) {
		t.Helper()
		got, err := l.Forget(ctx, key, token)
		if err != nil || got != want {
			t.Fatalf("Forget(%q, %q) = %v, %v; want %v", key, token, got, err, want)
		}
	}
	forget("absent", "tok", false)

	_, err := l.Acquire(ctx, "cached", "tok", time.Minute)
	must(t, err)
	must(t, l.Release(ctx, "cached", "tok", []byte("\x01r"), time.Hour))
	forget("cached", "", true)
	if v, err := l.Acquire(ctx, "cached", "next", time.Minute); err != nil || v != nil {
		t.Fatalf("after Forget the key still answers %q, %v; want a free key", v, err)
	}

	_, err = l.Acquire(ctx, "locked", "holder", time.Minute)
	must(t, err)
	forget("locked", "", false)
	forget("locked", "someone-else", false)
	forget("locked", "holder:", false) // a prefix trick is not the token
	if s, err := l.State(ctx, "locked"); err != nil || !s.Locked || s.Token != "holder" {
		t.Fatalf("another token's Forget touched the lock: %+v, %v", s, err)
	}
	forget("locked", "holder", true)
	if s, err := l.State(ctx, "locked"); err != nil || s.Locked || s.Cached {
		t.Fatalf("the holder's lock survived Forget: %+v, %v", s, err)
	}
}
