#!/usr/bin/env bash
# The project's one test command (README, .ci/run). It starts what the tests
# need and nothing is assumed to be running:
#   - Redis: the one on 127.0.0.1:6379 if it answers, else a redis-server it
#     starts (installing Debian's package first when missing and root); the
#     Redis Cluster and Sentinel tests start their own redis-server processes;
#   - NATS JetStream: the tests embed nats-server from the Go module, then
#     run again against a separately started nats-server process built from
#     the same module (2.10 or newer is needed: multi-filter consumers);
#   - bubblewrap, which runs the agent's commands: Debian's bubblewrap
#     package, installed when missing and root. In CI (CI=true) the tests
#     that need it fail without it; elsewhere they skip with one line;
#   - headless Chromium, which the web console's tests drive: Debian's
#     chromium package, installed the same way, with the same rule;
#   - Docker: the container tests (internal/deploytest: docker-compose.yaml
#     brought up for real, the multi-host test on a NATS cluster) run with
#     the images scripts/images.sh makes; without Docker they are skipped
#     with one line, except in CI (CI=true), where that fails.
# Usage: bash scripts/test.sh          gofmt, vet, staticcheck, all tests on both servers,
#                                      every fuzz target for a few seconds, the chart, the containers
#        bash scripts/test.sh bench    the benchmarks, printed, on both servers, and a small
#                                      `ralph bench mesh` (docs/performance.md has the full one)
#        bash scripts/test.sh fuzz     only the fuzz targets, each for FUZZTIME (default 2m)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-test}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '== %s\n' "$*"; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p=$1
  while port_open "$p"; do p=$((p + 1)); done
  echo "$p"
}

ensure_redis() {
  if [ -n "${RALPH_TEST_REDIS_URL:-}" ]; then
    say "Redis: $RALPH_TEST_REDIS_URL (from RALPH_TEST_REDIS_URL)"
    return
  fi
  if port_open 6379 && { ! command -v redis-cli >/dev/null || redis-cli -p 6379 ping >/dev/null 2>&1; }; then
    export RALPH_TEST_REDIS_URL=redis://127.0.0.1:6379/0
    say "Redis: using the server on 127.0.0.1:6379"
    return
  fi
  if ! command -v redis-server >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "Redis: installing Debian's redis-server"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    else
      echo "redis-server is not installed and this is not a root Debian shell: install Redis 7 or set RALPH_TEST_REDIS_URL" >&2
      exit 1
    fi
  fi
  local port
  port=$(free_port 16379)
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do port_open "$port" && break; sleep 0.1; done
  export RALPH_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
  say "Redis: started redis-server on 127.0.0.1:$port"
}

ensure_bwrap() {
  if command -v bwrap >/dev/null; then
    say "bubblewrap: $(bwrap --version)"
    return
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "bubblewrap: installing Debian's bubblewrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
    say "bubblewrap: $(bwrap --version)"
  elif [ "${CI:-}" = true ]; then
    echo "bubblewrap is not installed and this is not a root Debian shell; CI needs it (the agent's commands run in it)" >&2
    exit 1
  else
    say "bubblewrap: not installed; the sandbox tests will skip (install Debian's bubblewrap package to run them)"
  fi
}

# ensure_chromium installs Debian's chromium when missing (as root): the web
# console's tests open its pages in it (services/console/web), and CI
# (CI=true) fails them without it.
ensure_chromium() {
  if command -v chromium >/dev/null; then
    say "Chromium: $(chromium --version 2>/dev/null | head -n1)"
    return
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "Chromium: installing Debian's chromium (the web console's tests drive it headless)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    say "Chromium: $(chromium --version 2>/dev/null | head -n1)"
  elif [ "${CI:-}" = true ]; then
    echo "chromium is not installed and this is not a root Debian shell; CI needs it (the web console's tests drive it)" >&2
    exit 1
  else
    say "Chromium: not installed; the web console's browser tests will skip (install Debian's chromium package to run them)"
  fi
}

# ensure_redis_binaries installs redis-server and redis-cli when missing (as
# root, from Debian's package): the tests start a three-master Redis Cluster
# and a Sentinel from them, and CI (CI=true) fails those tests without them.
ensure_redis_binaries() {
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
    return
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "Redis: installing Debian's redis-server (the Cluster and Sentinel tests start their own)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    say "Redis: redis-server or redis-cli is missing; the Redis Cluster and Sentinel tests will skip (fail in CI)"
  fi
}

# start_nats starts a nats-server process with JetStream and sets nats_url.
# (Not run in a command substitution: the process must be this shell's child
# so the exit trap stops it.)
build_nats() {
  # Built from the module go.mod pins: the services need multi-filter
  # consumers (nats-server 2.10 or newer), and Debian's package is 2.9.
  # Tests that restart a server run this binary (RALPH_TEST_NATS_SERVER).
  say "NATS: building nats-server from the Go module"
  go build -o "$work/nats-server" github.com/nats-io/nats-server/v2
  export RALPH_TEST_NATS_SERVER="$work/nats-server"
}
start_nats() {
  local bin="$RALPH_TEST_NATS_SERVER"
  local port
  port=$(free_port 14222)
  "$bin" -a 127.0.0.1 -p "$port" -js -sd "$work/js" >"$work/nats.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do port_open "$port" && break; sleep 0.1; done
  port_open "$port" || { cat "$work/nats.log" >&2; echo "nats-server did not start" >&2; exit 1; }
  say "NATS: started $("$bin" --version 2>&1 | head -n1) on 127.0.0.1:$port"
  nats_url="nats://127.0.0.1:$port"
}

# fuzz runs every fuzz target for $1 (go test -fuzz takes one target at a
# time). Minimising a new input is bounded too: unbounded, it can hold a
# worker for a minute with no executions counted.
fuzz_targets=(
  "FuzzParse ./pkg/prd/"
  "FuzzDecode ./pkg/events/"
  "FuzzIterationRecord ./pkg/events/"
  "FuzzParseVerdict ./services/critic/"
  "FuzzParse ./services/decomposer/"
)
fuzz() {
  local time=$1 target pkg
  for t in "${fuzz_targets[@]}"; do
    read -r target pkg <<<"$t"
    say "fuzz $target in $pkg for $time"
    go test -run '^$' -fuzz "^$target\$" -fuzztime "$time" -fuzzminimizetime 5s "$pkg" | tail -n 1
  done
}
if [ "$mode" = fuzz ]; then
  fuzz "${FUZZTIME:-2m}"
  exit 0
fi

ensure_redis
ensure_bwrap
ensure_redis_binaries
ensure_chromium
build_nats
# Packages that talk to NATS, run a second time against the separate server.
nats_pkgs=(./pkg/bus/ ./internal/mesh/ ./cmd/ralph/)

if [ "$mode" = bench ]; then
  say "benchmarks, embedded nats-server"
  go test -run '^$' -bench . -benchtime 300x ./internal/mesh/
  start_nats
  say "benchmarks, separate nats-server at $nats_url"
  RALPH_TEST_NATS_URL=$nats_url go test -run '^$' -bench . -benchtime 300x ./internal/mesh/
  say "benchmarks: the compaction planner on 2,000 units, the stuck detector's analysis of one iteration"
  go test -run '^$' -bench 'BenchmarkPlan2000Units|BenchmarkAnalyzeIteration' ./pkg/compaction/ ./services/stuckdetector/
  say "ralph bench mesh (small): the whole mesh on a nats-server process it starts and the test Redis"
  RALPH_REDIS_URL=$RALPH_TEST_REDIS_URL go run ./cmd/ralph bench mesh --sessions 1,10 --steps 50 --nats-server "$RALPH_TEST_NATS_SERVER"
  exit 0
fi

say "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
say "go vet"
go vet ./...
say "staticcheck (pinned in go.mod as a tool)"
go tool staticcheck ./...
say "go test, embedded nats-server (race detector on)"
go test -race -count=1 ./...
fuzz "${FUZZTIME:-8s}"
start_nats
say "go test, separate nats-server process at $nats_url"
RALPH_TEST_NATS_URL=$nats_url go test -count=1 "${nats_pkgs[@]}"
say "helm lint --strict and helm template (helm pinned in go.mod), default and production values"
(cd deploy/helm/ralph &&
  go tool helm lint --strict . >/dev/null &&
  go tool helm lint --strict . -f ci/production-values.yaml >/dev/null &&
  go tool helm template ralph . --kube-version 1.33.0 >/dev/null &&
  go tool helm template ralph . --kube-version 1.33.0 -f ci/production-values.yaml >/dev/null)
say "container tests (Docker)"
if docker info >/dev/null 2>&1; then
  start=$SECONDS
  image=$(bash scripts/images.sh)
  say "images ready in $((SECONDS - start))s: $image"
  RALPH_DEPLOY_TEST=1 RALPH_DEPLOY_IMAGE=$image go test -count=1 -timeout 20m -v -run 'TestCompose|TestMultiHost' ./internal/deploytest/ 2>&1 |
    tee "$work/deploy.out" | grep -E '^(=== RUN|--- |PASS|FAIL|ok|compose:|multihost:)|recovered|panic' || true
  grep -q '^ok' "$work/deploy.out" || { cat "$work/deploy.out"; echo "container tests failed" >&2; exit 1; }
  say "container tests passed in $((SECONDS - start))s"
elif [ "${CI:-}" = true ]; then
  echo "container tests: Docker does not answer (docker info), and CI needs them" >&2
  exit 1
else
  say "container tests skipped: Docker does not answer (docker info)"
fi
say "ralph demo (the README's main command)"
go run ./cmd/ralph demo >"$work/demo.out" 2>&1 || { cat "$work/demo.out"; exit 1; }
grep -q "session completed" "$work/demo.out" || { cat "$work/demo.out"; echo "demo did not complete" >&2; exit 1; }
tail -n 12 "$work/demo.out" | head -n 5
say "all tests passed"
