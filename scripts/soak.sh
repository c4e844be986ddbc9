#!/usr/bin/env bash
# Soak: idemkit's chaos harness for a long time on MariaDB, then on PostgreSQL, then the DTM scenario (the
# example's order service SIGKILLed mid-storm, external and embedded DTM), then the message-consumer chaos run
# on NATS and RabbitMQ (idemchaos msg) and on the last JetStream delivery (-nats-max-deliver 2), then every
# fuzz target of the repository for a set time each. Prints the chaos figures (requests, duplicates, faults by
# kind, effects checked, violations) and one line per fuzz target; exits non-zero if a checker found a
# violation or a fuzz target failed.
#
#   ./scripts/soak.sh                         10 minutes of chaos per database, then 1 minute per fuzz target
#   ./scripts/soak.sh -d 2h -f 10m            2 hours of chaos, 10 minutes per fuzz target
#   ./scripts/soak.sh -d 30m --no-fuzz        chaos only
#   ./scripts/soak.sh --no-chaos -f 5m        fuzzing only
#   ./scripts/soak.sh -d 1h -- -workers 4 -clients 12    extra flags for cmd/idemchaos
#   ./scripts/soak.sh --no-chaos --no-fuzz -D 10m        only the DTM scenario, 10 minutes per mode
#
# Options:
#   -d, --duration D     load phase of each chaos run (Go duration: 90s, 10m, 2h). Default 10m.
#   --db LIST            databases of the chaos runs, one run each: mariadb, postgres. Default both.
#   -f, --fuzztime T     time per fuzz target (go test -fuzztime). Default 1m.
#   -i, --fault-interval I   time between two faults. Default 8s.
#   -D, --dtm-duration D the DTM scenario's storm, per mode (external, embedded): the example's order
#                        service SIGKILLed mid-storm and restarted on its data. Default 5m.
#   -k, --kill-every K   mean time between two SIGKILLs of the order service. Default 5s.
#   -o, --out DIR        where the reports go. Default soak-<date> under $TMPDIR.
#   -m, --msg-messages N     messages of the consumer chaos run, per broker. Default 10000 (200 batches, 30 kills).
#   --no-chaos, --no-dtm, --no-msg, --no-fuzz    skip a part.
#
# Needs mariadbd, mariadb-install-db, PostgreSQL's initdb and postgres, and redis-server
# (scripts/services.sh installs them); the harness starts private instances on free loopback ports
# and stops them, so it may run beside the test suite. The message-consumer run needs NATS with
# JetStream and RabbitMQ (scripts/services.sh starts them). Fuzz targets are discovered with `go test -list '^Fuzz' ./...`.
set -euo pipefail
usage() { sed -n '2,31p' "$self"; }
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0") # $0 may be relative to the directory left below
cd "$(dirname "$0")/.."

duration=10m fuzztime=1m interval=8s out="" dbs=mariadb,postgres chaos=1 fuzz=1 msg=1 msgs=10000 dtm=1 dtmduration=5m killevery=5s
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -d|--duration) duration=$2; shift 2 ;;
    -f|--fuzztime) fuzztime=$2; shift 2 ;;
    -i|--fault-interval) interval=$2; shift 2 ;;
    -o|--out) out=$2; shift 2 ;;
    --db) dbs=$2; shift 2 ;;
    -m|--msg-messages) msgs=$2; shift 2 ;;
    -D|--dtm-duration) dtmduration=$2; shift 2 ;;
    -k|--kill-every) killevery=$2; shift 2 ;;
    --no-chaos) chaos=0; shift ;;
    --no-msg) msg=0; shift ;;
    --no-dtm) dtm=0; shift ;;
    --no-fuzz) fuzz=0; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "soak: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-${TMPDIR:-/tmp}/soak-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

# seconds converts a Go duration (1h30m, 10m, 90s) to whole seconds, for the outer timeouts.
seconds() {
  awk -v d="$1" 'BEGIN {
    s = 0
    while (match(d, /^[0-9.]+(h|ms|m|s)/)) {
      t = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
      n = t + 0; u = t; sub(/^[0-9.]+/, "", u)
      if (u == "h") s += n * 3600; else if (u == "m") s += n * 60; else if (u == "s") s += n; else s += n / 1000
    }
    if (d != "") { print "soak: bad duration" > "/dev/stderr"; exit 1 }
    printf "%d\n", s
  }'
}

status=0
step() { printf '\n== %s\n' "$*"; }

if [ "$chaos" = 1 ]; then
  go build -o "$out/idemchaos" ./cmd/idemchaos
  for db in ${dbs//,/ }; do
    step "chaos on $db: $duration of load, a fault every $interval (report in $out)"
    limit=$(( $(seconds "$duration") + 1200 )) # the load, then setup, settling and checking
    set +e
    timeout --signal=INT --kill-after=60 "$limit" "$out/idemchaos" -db "$db" -duration "$duration" -fault-interval "$interval" \
      -json "$out/chaos-$db.json" "${extra[@]}" > "$out/chaos-$db.txt" 2> "$out/chaos-$db.log"
    rc=$?
    set -e
    # The summary, without the list of each fault (the JSON report has them all).
    grep -v '^  [+-] ' "$out/chaos-$db.txt" || true
    echo "exact command: $out/idemchaos -db $db -duration $duration -fault-interval $interval -json $out/chaos-$db.json ${extra[*]}"
    case $rc in
      0) echo "chaos on $db: 0 violations" ;;
      1) echo "chaos on $db: VIOLATIONS found (see $out/chaos-$db.txt)"; status=1 ;;
      *) echo "chaos on $db: the harness failed (exit $rc); log: $out/chaos-$db.log"; tail -20 "$out/chaos-$db.log"; status=1 ;;
    esac
  done
fi

if [ "$dtm" = 1 ]; then
  step "chaos, DTM scenario: $dtmduration of storm per mode, a SIGKILL of the order service every ~$killevery (report in $out)"
  [ -x "$out/idemchaos" ] || go build -o "$out/idemchaos" ./cmd/idemchaos
  limit=$(( 2 * $(seconds "$dtmduration") + 1800 )) # two modes, then builds, settling and checking
  set +e
  timeout --signal=INT --kill-after=60 "$limit" "$out/idemchaos" -dtm both -duration "$dtmduration" -kill-every "$killevery" \
    -json "$out/chaos-dtm.json" > "$out/chaos-dtm.txt" 2> "$out/chaos-dtm.log"
  rc=$?
  set -e
  grep -v '^  VIOLATION ' "$out/chaos-dtm.txt" || true
  echo "exact command: $out/idemchaos -dtm both -duration $dtmduration -kill-every $killevery -json $out/chaos-dtm.json"
  case $rc in
    0) echo "chaos dtm: 0 violations" ;;
    1) echo "chaos dtm: VIOLATIONS found (see $out/chaos-dtm.txt)"; status=1 ;;
    *) echo "chaos dtm: the harness failed (exit $rc); log: $out/chaos-dtm.log"; tail -20 "$out/chaos-dtm.log"; status=1 ;;
  esac
fi

# msgrun NAME ARGS...: one message-consumer chaos run, reported in $out/NAME.{txt,json,log}.
msgrun() {
  local name=$1; shift
  set +e
  timeout --signal=INT --kill-after=60 3600 "$out/idemchaos" msg "$@" -json "$out/$name.json" > "$out/$name.txt" 2> "$out/$name.log"
  rc=$?
  set -e
  cat "$out/$name.txt"
  echo "exact command: $out/idemchaos msg $* -json $out/$name.json"
  case $rc in
    0) echo "$name: 0 violations" ;;
    1) echo "$name: VIOLATIONS found (see $out/$name.txt)"; status=1 ;;
    *) echo "$name: the harness failed (exit $rc); log: $out/$name.log"; tail -20 "$out/$name.log"; status=1 ;;
  esac
}

if [ "$msg" = 1 ]; then
  step "message-consumer chaos: $msgs messages per broker, NATS and RabbitMQ (report in $out)"
  [ -x "$out/idemchaos" ] || go build -o "$out/idemchaos" ./cmd/idemchaos
  batches=$(( msgs / 50 > 10 ? msgs / 50 : 10 ))
  msgrun msg-chaos -messages "$msgs" -batches "$batches" -kills 30
  step "message-consumer chaos, the last JetStream delivery: $(( msgs / 10 )) messages, MaxDeliver 2 (report in $out)"
  msgrun msg-chaos-last -brokers nats -nats-max-deliver 2 -messages $(( msgs / 10 )) -kills 10
fi

if [ "$fuzz" = 1 ]; then
  step "fuzzing: every target for $fuzztime"
  # `go test -list` prints a package's test names, then "ok <package> <time>".
  targets=$(go test -list '^Fuzz' ./... 2>"$out/fuzz-list.log" | awk '
    /^Fuzz/ { names = names " " $1; next }
    /^ok / { n = split(names, a, " "); for (i = 1; i <= n; i++) print $2, a[i]; names = ""; next }
    { names = "" }') || true
  if grep -q 'build failed\|^FAIL' "$out/fuzz-list.log" 2>/dev/null; then
    echo "some packages did not build; see $out/fuzz-list.log"; status=1
  fi
  if [ -z "$targets" ]; then
    echo "no fuzz targets found"
  fi
  flimit=$(( $(seconds "$fuzztime") + 600 )) # fuzzing, plus building the instrumented test binary
  while read -r pkg name; do
    [ -n "$name" ] || continue
    log="$out/fuzz-$(echo "$pkg" | tr / _)-$name.log"
    corpus="$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$name"
    before=$(ls "$corpus" 2>/dev/null | sort || true)
    set +e
    timeout --signal=INT --kill-after=30 "$flimit" go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" > "$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    new=$(comm -13 <(echo "$before") <(ls "$corpus" 2>/dev/null | sort || true) | grep . || true)
    if [ $rc = 0 ]; then
      printf 'ok    %-45s %-32s %s execs\n' "$pkg" "$name" "${execs:-?}"
    elif [ -z "$new" ] && grep -q '^    context deadline exceeded$' "$log"; then
      # Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a failure, with no
      # failing input (golang/go#75804, fixed in Go 1.27): not a finding.
      printf 'ok    %-45s %-32s %s execs (deadline flake golang/go#75804, no failing input)\n' "$pkg" "$name" "${execs:-?}"
    else
      printf 'FAIL  %-45s %-32s (exit %d; failing input: %s; see %s)\n' "$pkg" "$name" "$rc" "${new:-none}" "$log"
      status=1
    fi
  done <<< "$targets"
fi

step "soak done (reports in $out)"
exit $status
