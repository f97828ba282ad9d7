package config

import (
	"bytes"
	"strings"
	"testing"
)

func TestLoadReadsPrefixedVariablesOnly(t *testing.T) {
	// envconfig falls back to the bare tag name (USER, TOKEN, URL) when a
	// field has an envconfig tag; the settings must not pick those up.
	t.Setenv("USER", "root")
	t.Setenv("TOKEN", "leaked")
	t.Setenv("URL", "nats://wrong:4222")
	t.Setenv("RALPH_BUILDER_MODEL", "my-model")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.User != "" || c.NATS.Token != "" || c.NATS.URL != "" {
		t.Fatalf("unprefixed variables leaked into the config: %+v", c.NATS)
	}
	if c.Builder.Model != "my-model" {
		t.Fatalf("RALPH_BUILDER_MODEL not read: %q", c.Builder.Model)
	}
}

func TestOpenAIFallbacks(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-openai")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	base, key, _ := c.Endpoint(c.Critic.Role)
	if base != "http://127.0.0.1:1/v1" || key != "sk-openai" {
		t.Fatalf("fallback not applied: %q %q", base, key)
	}
	t.Setenv("RALPH_LLM_BASE_URL", "http://127.0.0.1:2/v1")
	t.Setenv("RALPH_CRITIC_BASE_URL", "http://127.0.0.1:3/v1")
	c, _ = Load()
	if base, _, _ := c.Endpoint(c.Critic.Role); base != "http://127.0.0.1:3/v1" {
		t.Fatalf("role base URL should win, got %q", base)
	}
	if base, _, _ := c.Endpoint(c.Builder.Role); base != "http://127.0.0.1:2/v1" {
		t.Fatalf("RALPH_LLM_BASE_URL should win over OPENAI_BASE_URL, got %q", base)
	}
}

func TestBadValuesNameTheVariable(t *testing.T) {
	for k, v := range map[string]string{
		"RALPH_STREAM_ACK_WAIT":    "soon",
		"RALPH_STUCK_WINDOW":       "1",
		"RALPH_PREFIX":             "a.b",
		"RALPH_STREAM_MAX_DELIVER": "0",
	} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			_, err := Load()
			if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(k, "RALPH_")) {
				t.Fatalf("error %v does not name %s", err, k)
			}
		})
	}
}

func TestPrintMasksSecrets(t *testing.T) {
	t.Setenv("RALPH_LLM_API_KEY", "sk-secret")
	t.Setenv("RALPH_REDIS_URL", "redis://user:hunter2@127.0.0.1:6379/0")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Print(&b, c); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "sk-secret") || strings.Contains(out, "hunter2") {
		t.Fatalf("secret printed:\n%s", out)
	}
	for _, want := range []string{"RALPH_NATS_URL", "RALPH_BUILDER_MODEL", "RALPH_CRITIC_MODEL", "RALPH_SUMMARIZER_MODEL",
		"RALPH_PRUNER_MODEL", "RALPH_DECOMPOSER_MODEL", "RALPH_LLM_BASE_URL", "RALPH_REDIS_URL", "RALPH_STUCK_WINDOW"} {
		if !strings.Contains(out, want) {
			t.Errorf("config output lacks %s", want)
		}
	}
}

func TestDefaultsIgnoreEnvironment(t *testing.T) {
	t.Setenv("RALPH_BUILDER_MODEL", "my-model")
	c, err := Defaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Builder.Model != "gpt-4o-mini" || c.Stuck.Window != 8 || c.Compaction.Mode != "tiered_adaptive" || c.Decomposer.MaxSubtasks != 4 {
		t.Fatalf("defaults: %+v", c.Builder.Role)
	}
}

func TestCompactionAndDecompositionSettings(t *testing.T) {
	t.Setenv("RALPH_BUILDER_CONTEXT_WINDOW", "10000")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CompactAt(); got != 7000 {
		t.Fatalf("CompactAt = %d, want 70%% of 10000", got)
	}
	t.Setenv("RALPH_COMPACTION_MODE", "off")
	if c, _ = Load(); c.CompactAt() != 0 {
		t.Fatalf("CompactAt with compaction off = %d", c.CompactAt())
	}
	for env, want := range map[string]string{
		"RALPH_COMPACTION_MODE":           "RALPH_COMPACTION_MODE",
		"RALPH_COMPACTION_TARGET_RATIO":   "RALPH_COMPACTION_*_RATIO",
		"RALPH_DECOMPOSER_MAX_SUBTASKS":   "RALPH_DECOMPOSER_MAX_SUBTASKS",
		"RALPH_PRUNER_MAX_PRUNED_TOKENS":  "RALPH_PRUNER_",
		"RALPH_COMPACTION_PRESSURE_RATIO": "RALPH_COMPACTION_*_RATIO",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv("RALPH_COMPACTION_MODE", "tiered")
			bad := map[string]string{
				"RALPH_COMPACTION_MODE": "aggressive", "RALPH_COMPACTION_TARGET_RATIO": "0.8",
				"RALPH_DECOMPOSER_MAX_SUBTASKS": "1", "RALPH_PRUNER_MAX_PRUNED_TOKENS": "0", "RALPH_COMPACTION_PRESSURE_RATIO": "0.95",
			}[env]
			t.Setenv(env, bad)
			if _, err := Load(); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s=%s: err %v, want it to name %s", env, bad, err, want)
			}
		})
	}
}
