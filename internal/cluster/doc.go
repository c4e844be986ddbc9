// Package cluster starts the clustered versions of idemkit's engines on this machine, as private
// child processes on free loopback ports with their own directories, for idemkit's cluster tests,
// ./scripts/cluster.sh and the capacity harness:
//
//   - [StartRedisCluster]: a Redis Cluster (by default 3 masters and 3 replicas) of redis-server
//     processes with cluster mode on, joined by redis-cli --cluster create; nodes can be killed
//     (SIGKILL), failed over ([RedisCluster.WaitFailover], [RedisCluster.Failover]) and restarted;
//   - [StartGalera]: a MariaDB Galera cluster (by default 3 nodes) — mariadbd with the galera-4
//     provider, rsync state transfers, one node bootstrapping, the others joining; a node killed and
//     restarted recovers its position (--wsrep-recover) and rejoins by incremental state transfer;
//   - [StartMariaDB]: a standalone private mariadbd;
//   - [StartDTMCluster]: DTM in high availability — several DTM servers sharing a MariaDB store
//     (DTM's Store.Driver "mysql", tables from DTM's own schema file) behind a [FailoverProxy].
//
// Nothing here touches the shared services (MariaDB on 3306, Redis on 6379): every server listens on
// 127.0.0.1 on ports picked free, keeps its files in its own temporary directory, is started in its
// own process group, and dies with the process that started it (Linux's parent-death signal; for
// mariadbd, which switches to the mysql user when started as root and so loses that signal, a small
// shell wrapper kills it when its pipe from this process closes). Stop methods kill everything and
// remove the directories.
//
// The T variants ([StartRedisClusterT], [StartGaleraT], [StartMariaDBT], [StartDTMClusterT]) start a
// cluster for a test and stop it when the test ends; when the binaries are missing they fail the test
// under IDEMKIT_REQUIRE_SERVICES=1 and skip it, saying why, otherwise.
//
// The package's tests are the cluster tests: TestRedisCluster, TestGalera and TestDTMHA run quick
// versions in the default suite and long ones with IDEMKIT_CLUSTER_SCALE=full (./scripts/cluster.sh).
package cluster
