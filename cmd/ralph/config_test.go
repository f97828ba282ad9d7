package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/internal/mesh"
)

// commandsThatLoad are one invocation of every command that reads the
// configuration, with arguments that get it that far.
func commandsThatLoad(t *testing.T) map[string][]string {
	dir := t.TempDir()
	prd := writeFile(t, dir, "prd.yaml", "project: p\ntasks:\n  - id: T1\n    title: do it\n")
	return map[string][]string{
		"up":       {"up"},
		"service":  {"service", "builder"},
		"run":      {"run", prd, "--workspace", dir},
		"config":   {"config"},
		"nats":     {"config", "nats"},
		"replay":   {"replay", "s-1"},
		"resume":   {"resume", "s-1", "--message", "go on"},
		"health":   {"health"},
		"sessions": {"sessions"},
		"status":   {"status", "s-1"},
		"cancel":   {"cancel", "s-1"},
		"watch":    {"watch"},
		"dlq":      {"dlq", "list"},
	}
}

// Every bad setting is bad input in every command, with the same message:
// it is validated once, when it is loaded.
func TestBadSettingsExitTwoInEveryCommand(t *testing.T) {
	for _, tc := range []struct{ env, value, want string }{
		{"RALPH_BUILDER_CONTEXT_WINDOW", "abc", "RALPH_BUILDER_CONTEXT_WINDOW=abc: not a whole number"},
		{"RALPH_STREAM_ACK_WAIT", "5x", "RALPH_STREAM_ACK_WAIT=5x: not a duration like 30s or 5m"},
		{"RALPH_COMPACTION_ADVISOR", "sure", "RALPH_COMPACTION_ADVISOR=sure: not true or false"},
		{"RALPH_LOG_LEVEL", "verbose", "RALPH_LOG_LEVEL=verbose: not one of debug, info, warn, error"},
		{"RALPH_TEAM", "a.b", "RALPH_TEAM=a.b: not a team name: 1-32 letters, digits, '_' or '-'"},
		{"RALPH_CONSOLE_ADDR", "nope", "RALPH_CONSOLE_ADDR=nope: not a host:port (127.0.0.1:0 picks a free port)"},
		{"RALPH_TEAMS_MAX_SESSIONS", "-1", "RALPH_TEAMS_MAX_SESSIONS=-1: must not be negative (0: no limit)"},
		{"RALPH_STUCK_WINDOW", "1", "RALPH_STUCK_WINDOW=1: must be at least 2 (one iteration holds no repeat)"},
		{"RALPH_NATS_URL", "http://tok@127.0.0.1:4222", "RALPH_NATS_URL=http://****@127.0.0.1:4222: not a nats:// URL (or a comma-separated list of them)"},
		{"RALPH_REDIS_URL", "127.0.0.1:6379", "RALPH_REDIS_URL=127.0.0.1:6379: not a Redis URL (redis://, rediss://, redis+cluster:// or redis+sentinel://): no scheme: write redis://HOST:PORT for one server, redis+cluster://HOST:PORT for a Redis Cluster, or redis+sentinel://HOST:PORT/MASTER for Sentinel"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			for name, args := range commandsThatLoad(t) {
				_, code, err := ralph(t, args...)
				if code != 2 || err == nil || err.Error() != tc.want {
					t.Errorf("%s: exit %d, err %v; want 2 and %q", name, code, err, tc.want)
				}
			}
		})
	}
}

// What `ralph config` accepts, up and service accept too: they get past
// the configuration and fail only on the unreachable servers (exit 1).
func TestConfigUpAndServiceAcceptTheSameValues(t *testing.T) {
	for env, value := range map[string]string{
		"RALPH_LOG_LEVEL":            "DEBUG",
		"RALPH_METRICS_ADDR":         "",
		"RALPH_STREAM_DRAIN_TIMEOUT": "0s",
		"RALPH_LLM_MAX_RETRIES":      "0",
		"RALPH_COMPACTION_MODE":      "off",
		"RALPH_STUCK_WINDOW":         "2",
		"RALPH_NATS_URL":             "nats://127.0.0.1:1",
		"RALPH_REDIS_URL":            "redis://127.0.0.1:1",
	} {
		t.Setenv(env, value)
	}
	if out, code, err := ralph(t, "config"); code != 0 {
		t.Fatalf("config: exit %d, err %v\n%s", code, err, out)
	}
	for _, args := range [][]string{{"up"}, {"service", "builder"}, {"service", "console"}} {
		if _, code, err := ralph(t, args...); code != 1 || err == nil || strings.Contains(err.Error(), "RALPH_") {
			t.Errorf("%v: exit %d, err %v; want 1 for the unreachable server, not a configuration error", args, code, err)
		}
	}
}

func TestServiceNamesTheMissingURL(t *testing.T) {
	t.Setenv("RALPH_NATS_URL", "")
	t.Setenv("RALPH_REDIS_URL", "")
	if _, code, err := ralph(t, "service", "critic"); code != 2 || err.Error() != "ralph service critic needs RALPH_NATS_URL, which is not set (use `ralph up` for an all-in-one mesh)" {
		t.Errorf("no NATS: exit %d, err %v", code, err)
	}
	t.Setenv("RALPH_NATS_URL", "nats://127.0.0.1:1")
	if _, code, err := ralph(t, "service", "pruner"); code != 2 || err.Error() != "ralph service pruner needs RALPH_REDIS_URL, which is not set (use `ralph up` for an all-in-one mesh)" {
		t.Errorf("no Redis: exit %d, err %v", code, err)
	}
	// The console reads the bus only: no Redis needed, so it gets as far
	// as connecting.
	if _, code, err := ralph(t, "service", "console"); code != 1 || strings.Contains(err.Error(), "RALPH_REDIS_URL") {
		t.Errorf("console without Redis: exit %d, err %v", code, err)
	}
}

func TestUnknownVariablesAreWarnedAbout(t *testing.T) {
	var b bytes.Buffer
	warnUnknown(&b, []string{"RALPH_BUILDER_MODLE=x", "RALPH_BUILDER_MODEL=y", "RALPH_TEST_REDIS_URL=z"})
	if got, want := b.String(), "ralph: warning: RALPH_BUILDER_MODLE: no such setting; did you mean RALPH_BUILDER_MODEL?\n"; got != want {
		t.Fatalf("warnings %q, want %q", got, want)
	}
	// A warning, not an error.
	t.Setenv("RALPH_BUILDER_MODLE", "x")
	if _, code, err := ralph(t, "config"); code != 0 {
		t.Fatalf("config with a misspelt variable: exit %d, err %v", code, err)
	}
}

func TestEachServiceHasItsOwnMetricsPort(t *testing.T) {
	seen := map[int]string{}
	for _, n := range mesh.Services {
		p := mesh.MetricsPort(n)
		if other, dup := seen[p]; dup {
			t.Errorf("%s and %s share port %d", n, other, p)
		}
		seen[p] = n
	}
	if mesh.MetricsPort("") != 9464 || mesh.MetricsPort("builder") != 9464 || mesh.MetricsPort("critic") != 9465 || mesh.MetricsPort("console") != 9470 {
		t.Errorf("ports differ from those documented in RALPH_METRICS_ADDR: %v", seen)
	}
}

// `ralph config nats` prints the generated permissions for the configured
// prefix, ready for a nats-server configuration.
func TestConfigNATSPrintsThePermissionsOfThePrefix(t *testing.T) {
	t.Setenv("RALPH_PREFIX", "team")
	out, code, err := ralph(t, "config", "nats")
	if code != 0 || err != nil {
		t.Fatalf("exit %d: %v", code, err)
	}
	if out != mesh.PermissionsConfig("team") || !strings.Contains(out, `"team.s.*.*.critique.requested"`) {
		t.Errorf("printed:\n%s", out)
	}
	if _, code, _ := ralph(t, "config", "nats", "extra"); code != 2 {
		t.Errorf("an extra argument: exit %d, want 2", code)
	}
	out, code, err = ralph(t, "config", "nats", "--team", "web", "--team", "ops")
	if code != 0 || out != mesh.PermissionsConfig("team", "web", "ops") || !strings.Contains(out, `user: "team-web"`) ||
		!strings.Contains(out, "$RALPH_NATS_PASSWORD_TEAM_OPS") || !strings.Contains(out, `"team.s.web.*.session.started"`) {
		t.Errorf("with teams: exit %d %v\n%s", code, err, out)
	}
	if _, code, err := ralph(t, "config", "nats", "--team", "a.b"); code != 2 || !strings.Contains(err.Error(), "--team") {
		t.Errorf("a bad team: exit %d %v", code, err)
	}
}
