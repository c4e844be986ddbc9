package lock_test

import (
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
)

// TestConformance runs the shared Locker suite against Redis, each subtest under its own prefix.
func TestConformance(t *testing.T) {
	idemtest.RunLocker(t, func(t *testing.T) idemkit.Locker {
		l, _ := setup(t)
		return l
	})
}
