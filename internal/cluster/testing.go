//go:build unix

package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// StartRedisClusterT starts a Redis Cluster for t ([StartRedisCluster]) and stops it when t ends. When
// the binaries are missing or the cluster does not form it fails t under IDEMKIT_REQUIRE_SERVICES=1
// and skips it, saying why, otherwise.
func StartRedisClusterT(t testing.TB, o *RedisClusterOptions) *RedisCluster {
	t.Helper()
	c, err := StartRedisCluster(context.Background(), o)
	if err != nil {
		testsvc.Unavailable(t, "Redis Cluster", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartGaleraT starts a Galera cluster for t ([StartGalera]) and stops it when t ends; unavailable
// binaries or a cluster that does not form fail or skip t as for [StartRedisClusterT]. When t fails,
// the tail of each node's error log is logged. What the cluster does on its own (a primary
// component it restores) is logged with t.Logf unless o sets Logf.
func StartGaleraT(t testing.TB, o *GaleraOptions) *Galera {
	t.Helper()
	var opts GaleraOptions
	if o != nil {
		opts = *o
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	g, err := StartGalera(context.Background(), &opts)
	if err != nil {
		testsvc.Unavailable(t, "Galera cluster", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range g.Nodes() {
				t.Logf("%s error log (tail):\n%s", n.Name(), tailFile(n.ErrorLog(), 3000))
			}
		}
		g.Stop()
	})
	return g
}

// StartMariaDBT starts a standalone private MariaDB for t ([StartMariaDB]) and stops it when t ends.
func StartMariaDBT(t testing.TB) *MariaNode {
	t.Helper()
	n, err := StartMariaDB(context.Background())
	if err != nil {
		testsvc.Unavailable(t, "private MariaDB", err)
	}
	t.Cleanup(n.Stop)
	return n
}

// StartDTMClusterT starts DTM in high availability for t ([StartDTMCluster]; building the server
// takes minutes when it is not cached) and stops it when t ends, logging the servers' output when t
// failed. Failures to start fail or skip t as for [StartRedisClusterT].
func StartDTMClusterT(t testing.TB, o *DTMClusterOptions) *DTMCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var oo DTMClusterOptions
	if o != nil {
		oo = *o
	}
	if oo.BuildProgress == nil {
		oo.BuildProgress = tLogWriter{t}
	}
	d, err := StartDTMCluster(ctx, &oo)
	if err != nil {
		testsvc.Unavailable(t, "DTM cluster", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("DTM servers' output (tail):\n%s", d.Logs())
		}
		d.Stop()
	})
	return d
}

// tLogWriter writes lines to t.Log.
type tLogWriter struct{ t testing.TB }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
