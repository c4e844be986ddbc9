#!/usr/bin/env bash
# The whole check, as CI runs it: bring up the services, refuse unformatted or vetted-bad code, build
# the DTM server if needed, run every test with the race detector against the real services, then run
# the example end to end. Works on a fresh machine (it installs what is missing with apt-get).
#
#   ./scripts/test.sh            everything
#   ./scripts/test.sh ./httpx/...  only these packages (still with the checks)
#   ./scripts/test.sh --help       this text
set -euo pipefail

case "${1:-}" in # before anything is brought up, installed or built
-h | --help | help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "services"
./scripts/services.sh

step "gofmt"
unformatted=$(gofmt -l .) # every .go file under here, in a git checkout or not
if [ -n "$unformatted" ]; then
  echo "gofmt would change these files:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "docker-compose.yml (validated with compose-go: no Docker engine needed)"
(cd tools/composecheck && go run . && go vet ./... && go test -count=1 ./...)

step "tool modules (go vet)"
(cd tools/benchchart && go vet ./...)

step "DTM server (built once, then cached)"
go run ./internal/dtmserver/cmd/dtmbuild

step "go test -race"
export IDEMKIT_REQUIRE_SERVICES=1
pkgs=("${@:-./...}")
go test -race -count=1 -timeout 20m "${pkgs[@]}"

if [ $# -eq 0 ]; then
  step "example, end to end on embedded defaults"
  go run ./examples/order-pay-inventory
fi
echo; echo "all checks passed"
