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
	ep := c.LLM.Endpoint(c.Critic.Role)
	if ep.BaseURL != "http://127.0.0.1:1/v1" || ep.APIKey != "sk-openai" {
		t.Fatalf("fallback not applied: %q %q", ep.BaseURL, ep.APIKey)
	}
	t.Setenv("RALPH_LLM_BASE_URL", "http://127.0.0.1:2/v1")
	t.Setenv("RALPH_CRITIC_BASE_URL", "http://127.0.0.1:3/v1")
	c, _ = Load()
	if base := c.LLM.Endpoint(c.Critic.Role).BaseURL; base != "http://127.0.0.1:3/v1" {
		t.Fatalf("role base URL should win, got %q", base)
	}
	if base := c.LLM.Endpoint(c.Builder.Role).BaseURL; base != "http://127.0.0.1:2/v1" {
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
	t.Setenv("RALPH_NATS_URL", "nats://ralph:n4tspw@127.0.0.1:4222,nats://t0ken@127.0.0.1:4223")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Print(&b, c); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "sk-secret") || strings.Contains(out, "hunter2") || strings.Contains(out, "n4tspw") || strings.Contains(out, "t0ken") {
		t.Fatalf("secret printed:\n%s", out)
	}
	for _, want := range []string{"redis://user:****@127.0.0.1:6379/0", "nats://ralph:****@127.0.0.1:4222,nats://****@127.0.0.1:4223"} {
		if !strings.Contains(out, want) {
			t.Errorf("config output lacks the masked URL %s", want)
		}
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
	for _, tc := range []struct{ env, bad, want string }{
		{"RALPH_COMPACTION_MODE", "aggressive", "RALPH_COMPACTION_MODE=aggressive: not one of off, legacy, tiered, tiered_adaptive"},
		{"RALPH_COMPACTION_TARGET_RATIO", "0.8", "RALPH_COMPACTION_TARGET_RATIO=0.8: must be above 0 and below the pressure ratio (0.7)"},
		{"RALPH_DECOMPOSER_MAX_SUBTASKS", "1", "RALPH_DECOMPOSER_MAX_SUBTASKS=1: must be at least 2 (one subtask is the task again)"},
		{"RALPH_PRUNER_MAX_PRUNED_TOKENS", "0", "RALPH_PRUNER_MAX_PRUNED_TOKENS=0: must be at least 1"},
		// Pressure above critical: the rule that breaks is critical's.
		{"RALPH_COMPACTION_PRESSURE_RATIO", "0.95", "RALPH_COMPACTION_CRITICAL_RATIO=0.9: must be at least the pressure ratio (0.95) and at most 1"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("RALPH_COMPACTION_MODE", "tiered")
			t.Setenv(tc.env, tc.bad)
			if _, err := Load(); err == nil || err.Error() != tc.want {
				t.Fatalf("%s=%s: err %v, want %s", tc.env, tc.bad, err, tc.want)
			}
		})
	}
}

func TestSandboxSettings(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox.Mode != "bwrap" || c.Sandbox.Network != "on" {
		t.Fatalf("sandbox defaults: %+v", c.Sandbox)
	}
	for _, tc := range []struct{ env, bad, want string }{
		{"RALPH_SANDBOX_MODE", "docker", "RALPH_SANDBOX_MODE=docker: not bwrap or none"},
		{"RALPH_SANDBOX_NETWORK", "yes", "RALPH_SANDBOX_NETWORK=yes: not on or off"},
		{"RALPH_SANDBOX_HIDE", "secrets.env", "RALPH_SANDBOX_HIDE=secrets.env: not an absolute path"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.bad)
			if _, err := Load(); err == nil || err.Error() != tc.want {
				t.Fatalf("%s=%s: err %v, want %s", tc.env, tc.bad, err, tc.want)
			}
		})
	}
	t.Setenv("RALPH_SANDBOX_MODE", "none")
	t.Setenv("RALPH_SANDBOX_NETWORK", "off")
	t.Setenv("RALPH_SANDBOX_HIDE", "/srv/a,/srv/b")
	if c, err = Load(); err != nil || c.Sandbox.Mode != "none" || c.Sandbox.Network != "off" || len(c.Sandbox.Hide) != 2 {
		t.Fatalf("%+v %v", c.Sandbox, err)
	}
}

func TestSecretFiles(t *testing.T) {
	var c Config
	c.NATS.Creds, c.NATS.TLSKey, c.NATS.TLSCert = "/etc/ralph/nats.creds", "/etc/ralph/client.key", "/etc/ralph/client.crt"
	if got := c.SecretFiles(); len(got) != 2 || got[0] != "/etc/ralph/nats.creds" || got[1] != "/etc/ralph/client.key" {
		t.Fatalf("SecretFiles() = %v", got)
	}
}
