package config

import (
	"errors"
	"strings"
	"testing"
)

// A value envconfig cannot parse is named with its variable and what was
// expected, not strconv's text.
func TestParseErrorsSayWhatWasExpected(t *testing.T) {
	for _, tc := range []struct{ env, value, want string }{
		{"RALPH_BUILDER_CONTEXT_WINDOW", "abc", "RALPH_BUILDER_CONTEXT_WINDOW=abc: not a whole number"},
		{"RALPH_STREAM_MAX_DELIVER", "2.5", "RALPH_STREAM_MAX_DELIVER=2.5: not a whole number"},
		{"RALPH_STREAM_ACK_WAIT", "5x", "RALPH_STREAM_ACK_WAIT=5x: not a duration like 30s or 5m"},
		{"RALPH_REDIS_TTL", "7d", "RALPH_REDIS_TTL=7d: not a duration like 30s or 5m"},
		{"RALPH_COMPACTION_ADVISOR", "yes please", "RALPH_COMPACTION_ADVISOR=yes please: not true or false"},
		{"RALPH_STUCK_SIMILARITY_THRESHOLD", "high", "RALPH_STUCK_SIMILARITY_THRESHOLD=high: not a number"},
		{"RALPH_UP_NATS_PORT", "", "RALPH_UP_NATS_PORT=: not a whole number"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, err := Load()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Var != tc.env {
				t.Fatalf("err %v is not a *config.Error for %s", err, tc.env)
			}
		})
	}
}

// Values that parse but cannot mean anything are refused at load, each
// named by its variable, all of them on one line.
func TestOutOfRangeValuesNameTheirVariable(t *testing.T) {
	for _, tc := range []struct{ env, value, want string }{
		{"RALPH_LOG_LEVEL", "verbose", "RALPH_LOG_LEVEL=verbose: not one of debug, info, warn, error"},
		{"RALPH_LOG_FORMAT", "logfmt", "RALPH_LOG_FORMAT=logfmt: not console or json"},
		{"RALPH_PREFIX", "a.b", "RALPH_PREFIX=a.b: must be a non-empty word without dots, spaces, wildcards, ':' or braces"},
		{"RALPH_STUCK_WINDOW", "1", "RALPH_STUCK_WINDOW=1: must be at least 2 (one iteration holds no repeat)"},
		{"RALPH_STREAM_MAX_DELIVER", "0", "RALPH_STREAM_MAX_DELIVER=0: must be at least 1"},
		{"RALPH_STREAM_BACKOFF_MAX", "100ms", "RALPH_STREAM_BACKOFF_MAX=100ms: must be at least the backoff base (500ms)"},
		{"RALPH_BUILDER_MAX_ITERATIONS", "0", "RALPH_BUILDER_MAX_ITERATIONS=0: must be at least 1"},
		{"RALPH_BUILDER_SHELL_TIMEOUT", "0s", "RALPH_BUILDER_SHELL_TIMEOUT=0s: must be positive"},
		{"RALPH_CRITIC_MAX_FILE_BYTES", "0", "RALPH_CRITIC_MAX_FILE_BYTES=0: must be at least 1"},
		{"RALPH_DECOMPOSER_MAX_TOKENS", "-1", "RALPH_DECOMPOSER_MAX_TOKENS=-1: must be at least 1"},
		{"RALPH_COMPACTION_MIN_TARGET_SHARE", "2", "RALPH_COMPACTION_MIN_TARGET_SHARE=2: must be between 0 and 1"},
		{"RALPH_COMPACTION_CACHE_TTL", "0s", "RALPH_COMPACTION_CACHE_TTL=0s: must be positive"},
		{"RALPH_LLM_TIMEOUT", "-1s", "RALPH_LLM_TIMEOUT=-1s: must be positive"},
		{"RALPH_LLM_BASE_URL", "localhost:8080", "RALPH_LLM_BASE_URL=localhost:8080: not an absolute http(s) URL"},
		{"RALPH_CRITIC_MODEL", "", "RALPH_CRITIC_MODEL=: must not be empty"},
		{"RALPH_REDIS_TTL", "0s", "RALPH_REDIS_TTL=0s: must be positive"},
		{"RALPH_METRICS_ADDR", "127.0.0.1:http", "RALPH_METRICS_ADDR=127.0.0.1:http: not a host or host:port"},
		{"RALPH_UP_REDIS_ADDR", "6380", "RALPH_UP_REDIS_ADDR=6380: not a host:port"},
		{"RALPH_RUN_TIMEOUT", "0s", "RALPH_RUN_TIMEOUT=0s: must be positive"},
		{"RALPH_STREAM_OUTAGE_BUDGET", "-1s", "RALPH_STREAM_OUTAGE_BUDGET=-1s: must not be negative (0 turns waiting out outages off)"},
		{"RALPH_BUILDER_WATCHDOG_IDLE", "0s", "RALPH_BUILDER_WATCHDOG_IDLE=0s: must be positive"},
		{"RALPH_MEMORY", "yes", "RALPH_MEMORY=yes: not on or off"},
		{"RALPH_MEMORY_MAX_TOKENS", "50", "RALPH_MEMORY_MAX_TOKENS=50: must be at least 100"},
		{"RALPH_MEMORY_MAX_TOKENS", "40000", "RALPH_MEMORY_MAX_TOKENS=40000: must be at most a quarter of RALPH_BUILDER_CONTEXT_WINDOW (128000): every task's first request holds the memory"},
		{"RALPH_MEMORY_TIMEOUT", "0s", "RALPH_MEMORY_TIMEOUT=0s: must be positive"},
		{"RALPH_MEMORY_WAIT", "-1s", "RALPH_MEMORY_WAIT=-1s: must not be negative"},
		{"RALPH_BUILDER_WATCHDOG_IDLE", "3h", "RALPH_BUILDER_WATCHDOG_IDLE=3h0m0s: must be shorter than RALPH_RUN_TIMEOUT (2h0m0s), or `ralph run` gives up on a silent session before the watchdog ends it"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			if _, err := Load(); err == nil || err.Error() != tc.want {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("several", func(t *testing.T) {
		t.Setenv("RALPH_STUCK_WINDOW", "1")
		t.Setenv("RALPH_LOG_LEVEL", "loud")
		_, err := Load()
		want := "RALPH_LOG_LEVEL=loud: not one of debug, info, warn, error; RALPH_STUCK_WINDOW=1: must be at least 2 (one iteration holds no repeat)"
		if err == nil || err.Error() != want {
			t.Fatalf("err %v, want %q", err, want)
		}
	})
}

// Unparseable URLs are refused at load, with the credentials masked.
func TestBadURLsAreRefusedWithoutTheirSecrets(t *testing.T) {
	for _, tc := range []struct{ env, value, want string }{
		{"RALPH_REDIS_URL", "http://user:hunter2@127.0.0.1:6379", "RALPH_REDIS_URL=http://user:****@127.0.0.1:6379: not a Redis URL (redis://, rediss://, redis+cluster:// or redis+sentinel://): invalid URL scheme: http"},
		{"RALPH_REDIS_URL", "redis://user:hun ter2@127.0.0.1:6379", "RALPH_REDIS_URL=redis://user:****@127.0.0.1:6379: not a Redis URL (redis://, rediss://, redis+cluster:// or redis+sentinel://): net/url: invalid userinfo"},
		{"RALPH_REDIS_URL", "redis+sentinel://:hunter2@s1:26379", "RALPH_REDIS_URL=redis+sentinel://:****@s1:26379: not a Redis URL (redis://, rediss://, redis+cluster:// or redis+sentinel://): no master name: write redis+sentinel://HOST:PORT/MASTER"},
		{"RALPH_NATS_URL", "http://s3cr3t@127.0.0.1:4222", "RALPH_NATS_URL=http://****@127.0.0.1:4222: not a nats:// URL (or a comma-separated list of them)"},
		{"RALPH_NATS_URL", "nats://127.0.0.1:4222,nats://tok en@:4223", "RALPH_NATS_URL=nats://127.0.0.1:4222,nats://****@:4223: not a nats:// URL (or a comma-separated list of them)"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, err := Load()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	t.Setenv("RALPH_NATS_URL", "nats://a:4222, tls://b:4222,127.0.0.1:4223")
	for _, good := range []string{
		"rediss://user:pw@127.0.0.1:6379/2",
		"redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000",
		"10.0.0.1:7000,10.0.0.2:7000",
		"rediss+sentinel://:pw@s1:26379,s2:26379/mymaster/1",
	} {
		t.Setenv("RALPH_REDIS_URL", good)
		if _, err := Load(); err != nil {
			t.Errorf("good URL %s refused: %v", good, err)
		}
	}
}

func TestUnknownVariablesAreNamedWithTheClosestSetting(t *testing.T) {
	got := Unknown([]string{
		"RALPH_BUILDER_MODLE=gpt", "RALPH_BUILDER_MODEL=ok", "RALPH_TEST_NATS_URL=nats://x", "HOME=/root",
		"RALPH_STREAM_ACKWAIT=5s", "RALPH=1",
	})
	want := []string{
		"RALPH_BUILDER_MODLE: no such setting; did you mean RALPH_BUILDER_MODEL?",
		"RALPH_STREAM_ACKWAIT: no such setting; did you mean RALPH_STREAM_ACK_WAIT?",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Unknown =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Every setting has a meaning in `ralph config`, and the tags carry no
// envconfig name (which would make envconfig read the unprefixed variable).
func TestEverySettingIsDescribed(t *testing.T) {
	names := Names()
	if len(names) < len(todaysSettings) {
		t.Fatalf("%d settings, fewer than the %d of before", len(names), len(todaysSettings))
	}
	c, _ := Defaults()
	vars := variables(EnvPrefix, &c)
	if len(vars) == 0 {
		t.Fatal("no variables")
	}
	var b strings.Builder
	if err := Print(&b, c); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n")[1:] {
		if f := strings.Fields(line); len(f) < 4 {
			t.Errorf("setting without a meaning: %q", line)
		}
	}
}

// The settings that were code-only are settings now.
func TestFormerlyCodeOnlyKnobsAreSettings(t *testing.T) {
	got := printedDefaults(t)
	for name, def := range map[string]string{
		"RALPH_CRITIC_MAX_FILE_BYTES":   "32768",
		"RALPH_DECOMPOSER_MAX_TOKENS":   "2000",
		"RALPH_STREAM_BACKOFF_BASE":     "500ms",
		"RALPH_STREAM_BACKOFF_MAX":      "30s",
		"RALPH_STREAM_DUPLICATE_WINDOW": "2m",
		"RALPH_LLM_MAX_BACKOFF":         "30s",
	} {
		if got[name] != def {
			t.Errorf("%s: default %q, want %q", name, got[name], def)
		}
	}
	t.Setenv("RALPH_CRITIC_MAX_FILE_BYTES", "1000")
	t.Setenv("RALPH_DECOMPOSER_MAX_TOKENS", "77")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Critic.MaxFileBytes != 1000 || c.Decomposer.MaxTokens != 77 {
		t.Fatalf("not read: critic %d, decomposer %d", c.Critic.MaxFileBytes, c.Decomposer.MaxTokens)
	}
}

func TestMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		port int
		want string
	}{
		{"127.0.0.1", 9465, "127.0.0.1:9465"},
		{"127.0.0.1:9000", 9465, "127.0.0.1:9000"},
		{":9464", 9465, ":9464"},
		{"::1", 9466, "[::1]:9466"},
		{"[::1]", 9466, "[::1]:9466"},
		{"localhost", 9464, "localhost:9464"},
	} {
		if got, err := MetricsAddr(tc.addr, tc.port); err != nil || got != tc.want {
			t.Errorf("MetricsAddr(%q, %d) = %q, %v; want %q", tc.addr, tc.port, got, err, tc.want)
		}
	}
	if _, err := MetricsAddr("127.0.0.1:99999", 1); err == nil {
		t.Error("port 99999 accepted")
	}
}
