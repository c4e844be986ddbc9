package lock_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// aclCommands are the commands package doc's "Permissions" gives a Redis user of the Locker.
var aclCommands = []string{"+set", "+get", "+del", "+pttl", "+strlen", "+getrange", "+eval", "+evalsha"}

// TestLockerNeedsOnlyTheDocumentedCommands runs every Locker operation, native and in script mode, as
// a Redis user granted only the commands the package doc lists (on the Locker's prefix): none is
// refused. Without scripting the operations that compare before they write are, with NOPERM.
func TestLockerNeedsOnlyTheDocumentedCommands(t *testing.T) {
	srv := testsvc.StartRedis(t)
	admin := redis.NewClient(srv.Options())
	defer admin.Close()
	ctx := context.Background()
	grant := func(user string, cmds ...string) {
		args := []any{"ACL", "SETUSER", user, "on", ">pw", "~idemkit:*"}
		for _, c := range cmds {
			args = append(args, c)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	grant("idem", aclCommands...)
	grant("noscripts", aclCommands[:len(aclCommands)-2]...)

	run := func(user string, scripts bool) error {
		o := srv.Options()
		o.Username, o.Password = user, "pw"
		rdb := redis.NewClient(o)
		defer rdb.Close()
		l := lock.New(rdb, &lock.Options{Scripts: scripts})
		k1, k2 := fmt.Sprintf("%s-%v-1", user, scripts), fmt.Sprintf("%s-%v-2", user, scripts)
		if _, err := l.Acquire(ctx, k1, "t1", time.Minute); err != nil {
			return err
		}
		if err := l.Refresh(ctx, k1, "t1", time.Minute); err != nil {
			return err
		}
		if err := l.Release(ctx, k1, "t1", []byte("result"), time.Minute); err != nil {
			return err
		}
		if v, err := l.Acquire(ctx, k1, "t2", time.Minute); err != nil || !bytes.Equal(v, []byte("result")) {
			t.Fatalf("%s: replay = %q, %v", user, v, err)
		}
		if _, err := l.Acquire(ctx, k2, "t1", time.Minute); err != nil {
			return err
		}
		if err := l.Release(ctx, k2, "t1", nil, 0); err != nil {
			return err
		}
		if _, err := l.State(ctx, k1); err != nil {
			return err
		}
		_, err := l.Forget(ctx, k1, "")
		return err
	}
	for _, scripts := range []bool{false, true} {
		if err := run("idem", scripts); err != nil {
			t.Errorf("scripts %v: %v", scripts, err)
		}
		if err := run("noscripts", scripts); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("scripts %v without scripting: %v, want NOPERM", scripts, err)
		}
	}
}
