package config

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// todaysSettings is every setting `ralph config` printed before the
// settings moved to their packages, with its default ("" for none). Each
// must keep its name and default: an operator's environment keeps meaning
// what it meant. New settings may be added; none may go or change here
// unless what it configured is gone (removedSettings).
var todaysSettings = []struct{ name, def string }{
	{"RALPH_PREFIX", "ralph"},
	{"RALPH_LOG_LEVEL", "info"},
	// The one change: no port by default, so that each command picks its
	// own and several services on one host do not collide (up keeps 9464).
	{"RALPH_METRICS_ADDR", "127.0.0.1"},
	{"RALPH_NATS_URL", ""},
	{"RALPH_NATS_USER", ""},
	{"RALPH_NATS_PASSWORD", ""},
	{"RALPH_NATS_TOKEN", ""},
	{"RALPH_NATS_CREDS", ""},
	{"RALPH_NATS_NKEY", ""},
	{"RALPH_NATS_TLS_CERT", ""},
	{"RALPH_NATS_TLS_KEY", ""},
	{"RALPH_NATS_CA_FILE", ""},
	{"RALPH_STREAM_MAX_AGE", "168h"},
	{"RALPH_STREAM_REPLICAS", "1"},
	{"RALPH_STREAM_ACK_WAIT", "30s"},
	{"RALPH_STREAM_MAX_DELIVER", "5"},
	{"RALPH_STREAM_CONCURRENCY", "16"},
	{"RALPH_STREAM_DRAIN_TIMEOUT", "20s"},
	{"RALPH_REDIS_URL", ""},
	{"RALPH_REDIS_TTL", "168h"},
	{"RALPH_LLM_BASE_URL", ""},
	{"RALPH_LLM_API_KEY", ""},
	{"RALPH_LLM_TIMEOUT", "120s"},
	{"RALPH_LLM_MAX_RETRIES", "3"},
	{"RALPH_BUILDER_MODEL", "gpt-4o-mini"},
	{"RALPH_BUILDER_BASE_URL", ""},
	{"RALPH_BUILDER_API_KEY", ""},
	{"RALPH_BUILDER_MAX_TURNS_PER_TASK", "30"},
	{"RALPH_BUILDER_MAX_ITERATIONS", "200"},
	{"RALPH_BUILDER_MAX_TOTAL_TOKENS", "2000000"},
	{"RALPH_BUILDER_SHELL_TIMEOUT", "120s"},
	{"RALPH_BUILDER_OUTPUT_CAP", "262144"},
	{"RALPH_BUILDER_INLINE_OUTPUT_BYTES", "16384"},
	{"RALPH_BUILDER_CONTEXT_WINDOW", "128000"},
	{"RALPH_BUILDER_MAX_TOKENS", "4096"},
	{"RALPH_CRITIC_MODEL", "gpt-4o-mini"},
	{"RALPH_CRITIC_BASE_URL", ""},
	{"RALPH_CRITIC_API_KEY", ""},
	{"RALPH_CRITIC_VERIFY_TIMEOUT", "300s"},
	{"RALPH_STUCK_WINDOW", "8"},
	{"RALPH_STUCK_REPEAT_THRESHOLD", "3"},
	{"RALPH_STUCK_SIMILARITY_THRESHOLD", "0.9"},
	{"RALPH_STUCK_NO_PROGRESS_SPAN", "5"},
	{"RALPH_STUCK_ALTERNATING_STEPS", "4"},
	{"RALPH_STUCK_MONOLOGUE_TURNS", "3"},
	{"RALPH_STUCK_MONOLOGUE_NOVELTY", "0.34"},
	{"RALPH_STUCK_CHANT_REPEATS", "3"},
	{"RALPH_STUCK_COMPACTION_REPEATS", "2"},
	{"RALPH_SUMMARIZER_MODEL", "gpt-4o-mini"},
	{"RALPH_SUMMARIZER_BASE_URL", ""},
	{"RALPH_SUMMARIZER_API_KEY", ""},
	{"RALPH_COMPACTION_MODE", "tiered_adaptive"},
	{"RALPH_COMPACTION_PRESSURE_RATIO", "0.70"},
	{"RALPH_COMPACTION_CRITICAL_RATIO", "0.90"},
	// 0.50 until issue 11: half the trigger, so that compaction is deep
	// and seldom and the provider's prompt cache stays warm.
	{"RALPH_COMPACTION_TARGET_RATIO", "0.35"},
	{"RALPH_COMPACTION_RECENT_TURNS", "2"},
	{"RALPH_COMPACTION_MAX_CALLS_PER_ITERATION", "4"},
	{"RALPH_COMPACTION_MIN_GAIN_TOKENS", "150"},
	{"RALPH_COMPACTION_COOLDOWN_ITERATIONS", "3"},
	{"RALPH_COMPACTION_MAX_SUMMARY_TOKENS", "2000"},
	{"RALPH_COMPACTION_CACHE_TTL", "24h"},
	{"RALPH_COMPACTION_ADVISOR", "false"},
	{"RALPH_COMPACTION_ADVISOR_TIMEOUT", "5s"},
	{"RALPH_COMPACTION_ADVISOR_EPSILON", "0.05"},
	{"RALPH_COMPACTION_ADVISOR_TOP_K", "4"},
	{"RALPH_COMPACTION_OVERSHOOT_LIMIT", "2"},
	{"RALPH_COMPACTION_MIN_FEASIBLE_RATIO", "0.05"},
	{"RALPH_COMPACTION_MAX_USEFUL_RATIO", "0.80"},
	{"RALPH_COMPACTION_MIN_TARGET_SHARE", "0.25"},
	{"RALPH_COMPACTION_MAX_OUTPUT_TOKENS", "1024"},
	{"RALPH_COMPACTION_POINTER_TOKENS", "60"},
	{"RALPH_COMPACTION_CHECKPOINT_OVERHEAD", "120"},
	{"RALPH_COMPACTION_SUMMARY_PROMPT", ""},
	{"RALPH_PRUNER_MODEL", "gpt-4o-mini"},
	{"RALPH_PRUNER_BASE_URL", ""},
	{"RALPH_PRUNER_API_KEY", ""},
	{"RALPH_PRUNER_MAX_PRUNED_TOKENS", "8000"},
	{"RALPH_PRUNER_CHUNK_TOKENS", "6000"},
	{"RALPH_PRUNER_NOTE_TOKENS", "600"},
	{"RALPH_DECOMPOSER_MODEL", "gpt-4o-mini"},
	{"RALPH_DECOMPOSER_BASE_URL", ""},
	{"RALPH_DECOMPOSER_API_KEY", ""},
	{"RALPH_DECOMPOSER_MAX_SUBTASKS", "4"},
	{"RALPH_DECOMPOSER_MAX_DEPTH", "2"},
	{"RALPH_UP_NATS_PORT", "4222"},
	{"RALPH_UP_REDIS_ADDR", "127.0.0.1:6380"},
	{"RALPH_UP_STORE_DIR", ""},
	{"RALPH_RUN_TIMEOUT", "2h"},
	// Issue 12: the log format for collectors, the sentinels' password.
	{"RALPH_LOG_FORMAT", "console"},
	{"RALPH_REDIS_SENTINEL_PASSWORD", ""},
	// Issue 15: the work product (commits) and the critic's diff.
	{"RALPH_GIT_AUTHOR_NAME", "ralph"},
	{"RALPH_GIT_AUTHOR_EMAIL", "ralph@localhost"},
	{"RALPH_GIT_TIMEOUT", "300s"},
	{"RALPH_CRITIC_MAX_DIFF_BYTES", "65536"},
	// Issue 15: memory across tasks.
	{"RALPH_MEMORY", "on"},
	{"RALPH_MEMORY_MAX_TOKENS", "1500"},
	{"RALPH_MEMORY_INPUT_TOKENS", "6000"},
	{"RALPH_MEMORY_TIMEOUT", "20s"},
	{"RALPH_MEMORY_WAIT", "30s"},
}

// removedSettings were printed once and are gone because what they
// configured is: `ralph config` must not show them, and setting one now
// draws the unknown-variable warning.
var removedSettings = []string{
	// Chanting is found by character windows, not sentences of a minimum
	// word count (issue 11); RALPH_STUCK_CHANT_MIN_CHARS and
	// RALPH_STUCK_CHANT_CARRY_CHARS took its place.
	"RALPH_STUCK_CHANT_MIN_WORDS",
}

// printedDefaults runs Print over the defaults and returns setting -> default.
func printedDefaults(t *testing.T) map[string]string {
	t.Helper()
	c, err := Defaults()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Print(&b, c); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(&b)
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			t.Fatalf("short line %q", sc.Text())
		}
		def := f[1]
		if def == "-" {
			def = ""
		}
		if _, dup := got[f[0]]; dup {
			t.Errorf("%s printed twice", f[0])
		}
		got[f[0]] = def
	}
	return got
}

func TestEveryExistingSettingKeepsItsNameAndDefault(t *testing.T) {
	got := printedDefaults(t)
	for _, name := range removedSettings {
		if _, ok := got[name]; ok {
			t.Errorf("%s is printed, but what it configured is gone", name)
		}
	}
	for name, def := range map[string]string{"RALPH_STUCK_CHANT_MIN_CHARS": "12", "RALPH_STUCK_CHANT_CARRY_CHARS": "40"} {
		if got[name] != def {
			t.Errorf("%s: default %q, want %q", name, got[name], def)
		}
	}
	for _, s := range todaysSettings {
		def, ok := got[s.name]
		switch {
		case !ok:
			t.Errorf("%s is gone", s.name)
		case def != s.def:
			t.Errorf("%s: default %q, was %q", s.name, def, s.def)
		}
	}
}
