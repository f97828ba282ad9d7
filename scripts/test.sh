#!/usr/bin/env bash
# The project's one test command (README, .ci/run). It starts what the tests
# need and nothing is assumed to be running:
#   - Redis: the one on 127.0.0.1:6379 if it answers, else a redis-server it
#     starts (installing Debian's package first when missing and root);
#   - NATS JetStream: the tests embed nats-server from the Go module, then
#     run again against a separately started nats-server process (Debian's
#     /usr/sbin/nats-server when present, else one built from the module).
# Usage: bash scripts/test.sh          gofmt, vet, all tests on both servers
#        bash scripts/test.sh bench    the benchmarks, printed, on both servers
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

# start_nats starts a nats-server process with JetStream and sets nats_url.
# (Not run in a command substitution: the process must be this shell's child
# so the exit trap stops it.)
start_nats() {
  local bin=/usr/sbin/nats-server
  if [ ! -x "$bin" ]; then
    bin="$work/nats-server"
    say "NATS: building nats-server from the Go module"
    go build -o "$bin" github.com/nats-io/nats-server/v2
  fi
  local port
  port=$(free_port 14222)
  "$bin" -a 127.0.0.1 -p "$port" -js -sd "$work/js" >"$work/nats.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do port_open "$port" && break; sleep 0.1; done
  port_open "$port" || { cat "$work/nats.log" >&2; echo "nats-server did not start" >&2; exit 1; }
  say "NATS: started $("$bin" --version 2>&1 | head -n1) on 127.0.0.1:$port"
  nats_url="nats://127.0.0.1:$port"
}

ensure_redis
# Packages that talk to NATS, run a second time against the separate server.
nats_pkgs=(./pkg/bus/ ./internal/mesh/ ./cmd/ralph/)

if [ "$mode" = bench ]; then
  say "benchmarks, embedded nats-server"
  go test -run '^$' -bench . -benchtime 300x ./internal/mesh/
  start_nats
  say "benchmarks, separate nats-server at $nats_url"
  RALPH_TEST_NATS_URL=$nats_url go test -run '^$' -bench . -benchtime 300x ./internal/mesh/
  exit 0
fi

say "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
say "go vet"
go vet ./...
say "go test, embedded nats-server (race detector on)"
go test -race -count=1 ./...
start_nats
say "go test, separate nats-server process at $nats_url"
RALPH_TEST_NATS_URL=$nats_url go test -count=1 "${nats_pkgs[@]}"
say "ralph demo (the README's main command)"
go run ./cmd/ralph demo >"$work/demo.out" 2>&1 || { cat "$work/demo.out"; exit 1; }
grep -q "session completed" "$work/demo.out" || { cat "$work/demo.out"; echo "demo did not complete" >&2; exit 1; }
tail -n 12 "$work/demo.out" | head -n 5
say "all tests passed"
