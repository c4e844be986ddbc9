#!/usr/bin/env bash
# The cluster checks, live and at full size: idemkit on a 6-node Redis Cluster (3 masters, 3
# replicas), on a 3-node MariaDB Galera cluster and under two DTM servers sharing one store, each
# started here as private processes on free loopback ports (package internal/cluster) and killed in
# the middle of duplicate storms. The default test suite (./scripts/test.sh) runs quick versions of
# the same tests; this script runs the long ones, the example against DTM in HA, and the capacity
# harness. Nothing touches the shared services on 3306/6379 beyond the test database the Redis test's
# record table lives in.
#
#   ./scripts/cluster.sh                  every cluster test at full scale, then the example tour
#                                         against two DTM servers with one killed mid-tour
#   ./scripts/cluster.sh redis|galera|dtm one kind at full scale
#   ./scripts/cluster.sh example          only the example tour against DTM in HA
#   ./scripts/cluster.sh capacity         measure and rewrite the figures in docs/SCALING.md (~3 min)
#   ./scripts/cluster.sh up redis|galera|dtm   start one, print its addresses, keep it until Ctrl-C
#   ./scripts/cluster.sh --help           this text
#
# Needs redis-server and redis-cli, mariadbd and mariadb-install-db, the galera-4 provider and rsync
# (Debian: redis-server mariadb-server galera-4 rsync); ./scripts/services.sh brings up the shared
# services the Redis test's record table needs.
set -euo pipefail
usage() { sed -n '2,20p' "$self"; }
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0") # $0 may be relative to the directory left below
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

tests() { # test-name-regexp: the figures and verdicts on the terminal, everything in a log file
  step "cluster tests at full scale: $1"
  local log rc=0
  log=$(mktemp -t idemkit-cluster-XXXXXX.log)
  IDEMKIT_CLUSTER_SCALE=full IDEMKIT_REQUIRE_SERVICES=1 \
    go test -race -count=1 -timeout 45m -run "$1" -v ./internal/cluster/ >"$log" 2>&1 || rc=$?
  grep -E '^\s*(--- |ok|FAIL|panic)|_test\.go:[0-9]+: ' "$log" | grep -v 'Conformance/' || true
  if [ "$rc" != 0 ]; then echo "cluster tests FAILED; full output in $log"; exit "$rc"; fi
  rm -f "$log"
}

example() {
  step "the example's tour against two DTM servers sharing a MariaDB store, server 0 killed mid-tour"
  local bin
  bin=$(mktemp -d)/order-pay-inventory
  go build -o "$bin" ./examples/order-pay-inventory
  go run ./internal/cluster/cmd/clusterup -kill-after 1s dtm -- "$bin"
  rm -rf "$(dirname "$bin")"
}

prepare() {
  ./scripts/services.sh
  step "DTM server (built once, then cached)"
  go run ./internal/dtmserver/cmd/dtmbuild
}

case "${1:-all}" in
  all)
    prepare
    tests 'TestRedisCluster|TestGalera|TestDTMHA'
    example ;;
  redis) prepare; tests TestRedisCluster ;;
  galera) prepare; tests TestGalera ;;
  dtm) prepare; tests TestDTMHA ;;
  example) prepare; example ;;
  capacity)
    step "capacity figures (private MariaDB, Redis and Galera; rewrites docs/SCALING.md's block)"
    go run ./cmd/idemcapacity -galera -update docs/SCALING.md ;;
  up)
    [ $# -ge 2 ] || { echo "usage: $0 up redis|galera|dtm" >&2; exit 2; }
    go run ./internal/cluster/cmd/clusterup "$2"
    exit ;; # nothing was checked: no verdict
  -h | --help | help)
    usage; exit 0 ;;
  *)
    usage >&2; exit 2 ;;
esac
echo; echo "cluster checks passed"
