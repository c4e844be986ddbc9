package lock_test

import (
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
)

// TestConformance runs the shared Locker suite against Redis, each subtest under its own prefix, with
// native commands (Redis 7.0 and later) and with the Lua scripts a Redis before 7.0 gets.
func TestConformance(t *testing.T) {
	for _, scripts := range []bool{false, true} {
		t.Run(map[bool]string{false: "Native", true: "Scripts"}[scripts], func(t *testing.T) {
			idemtest.RunLocker(t, func(t *testing.T) idemkit.Locker {
				l, _ := setupMode(t, scripts)
				return l
			})
		})
	}
}
