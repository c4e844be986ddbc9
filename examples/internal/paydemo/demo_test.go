package paydemo

import (
	"context"
	"strings"
	"testing"
)

// TestOpenRefusesANegativeCount: `-n -3` was accepted; the run published no payment and its check
// then reported "a payment was lost or applied twice" (ledger: 0 rows, expected -3): a false report
// of the very failure the examples exist to rule out. Open refuses a count below 1 before it touches
// anything (found by a defect hunt).
func TestOpenRefusesANegativeCount(t *testing.T) {
	for _, n := range []int{-3, 0} {
		// A database on a port nothing listens on: the count must be refused before it is dialled.
		_, err := Open(context.Background(), "t", Config{MySQL: "root:@tcp(127.0.0.1:1)/x", N: n, Workers: 1})
		if err == nil || !strings.Contains(err.Error(), "-n") {
			t.Errorf("-n %d: Open returned %v, want an error about -n", n, err)
		}
	}
}
