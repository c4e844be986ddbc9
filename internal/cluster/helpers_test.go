package cluster_test

import (
	"os"
	"testing"
)

// EnvScale names the environment variable that sizes the cluster tests: "full" (set by
// ./scripts/cluster.sh) runs the long storms and extra faults; anything else the quick ones the
// default test suite runs.
const EnvScale = "IDEMKIT_CLUSTER_SCALE"

// scale sizes a test: quick in the default suite, full under ./scripts/cluster.sh.
type scale struct{ full bool }

func scaleFromEnv() scale { return scale{full: os.Getenv(EnvScale) == "full"} }

// pick returns quick or full.
func (s scale) pick(quick, full int) int {
	if s.full {
		return full
	}
	return quick
}

func (s scale) String() string {
	if s.full {
		return "full"
	}
	return "quick"
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
