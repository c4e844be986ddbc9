#!/usr/bin/env bash
# Runs the idemkit benchmark (cmd/idembench) against the local MariaDB and Redis and writes the results
# under docs/. Not part of the test run: the full run takes 8–10 minutes and loads the machine.
#
#   ./scripts/bench.sh              default run + heap measurement → docs/BENCHMARKS.md, docs/bench.json, docs/bench.png
#   ./scripts/bench.sh quick        one short round, results on stdout only
#   ./scripts/bench.sh profile      CPU and allocation profiles of the hot paths → docs/profiles/
#   ./scripts/bench.sh prepare      gorm PrepareStmt on/off, DSN interpolateParams on/off, multiStatements off → docs/bench-*.md
#   ./scripts/bench.sh -- FLAGS...  idembench with these flags (see go run ./cmd/idembench -h)
#   ./scripts/bench.sh --help       this text
set -euo pipefail

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
# Answer a request for help, or an argument it does not know, before bringing up the services
# (which may install them) and building the benchmark.
case "${1:-full}" in
full | quick | profile | prepare | --) ;;
-h | --help | help) usage; exit 0 ;;
*) echo "bench: unknown argument $1" >&2; usage >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."
./scripts/services.sh
mkdir -p docs/profiles
bin=$(mktemp -d)/idembench
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/idembench
echo "[bench] load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

case "${1:-full}" in
full)
  "$bin" -heap -out docs/BENCHMARKS.md -json docs/bench.json -chart docs/bench.png -summary docs/bench-summary.md
  (cd tools/benchchart && go run . -in ../../docs/bench.json -out ../../docs/bench.png)
  ;;
quick)
  "$bin" -rounds 1 -duration 500ms -c 1,16
  ;;
profile)
  for v in tx tx-nolock execute replay http-guarded; do
    "$bin" -variants "$v" -c 16 -rounds 1 -duration 10s -warmup 1s \
      -cpuprofile "docs/profiles/$v.cpu.pprof" -memprofile "docs/profiles/$v.alloc.pprof" >/dev/null
    {
      echo "# $v at 16 concurrent clients: CPU (top 25 by cumulative time in the idembench process)"
      go tool pprof -top -cum -nodecount=25 "$bin" "docs/profiles/$v.cpu.pprof" 2>/dev/null | sed -n '5,40p'
      echo
      echo "# $v: allocated objects (top 20)"
      go tool pprof -sample_index=alloc_objects -top -nodecount=20 "$bin" "docs/profiles/$v.alloc.pprof" 2>/dev/null | sed -n '5,40p'
    } > "docs/profiles/$v.txt"
  done
  ;;
prepare)
  "$bin" -c 1,16 -rounds 3 -duration 1s -variants bare,bare+ps,execute,execute+ps,tx,tx+ps,classic,classic+ps,replay-uncached,replay-uncached+ps \
    -out docs/bench-preparestmt.md -json docs/bench-preparestmt.json
  "$bin" -c 1,16 -rounds 3 -duration 1s -dsn-params - -variants bare,bare-sql,tx,execute,classic,dtm-barrier \
    -out docs/bench-no-interpolate.md -json docs/bench-no-interpolate.json
  "$bin" -c 1,16,64 -rounds 5 -duration 1s -dsn-params interpolateParams=true -variants bare,tx,tx-nolock,mark-tx-nolock,dtm-barrier \
    -out docs/bench-no-multi.md -json docs/bench-no-multi.json
  ;;
--)
  shift
  "$bin" "$@"
  ;;
esac
