package scriptllm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseScriptYAML(t *testing.T) {
	src := `
rules:
  - name: plan
    model: m1
    when:
      turn: 1
      first_user_contains: build
      last_role: user
    times: 2
    delay: 150ms
    reply:
      content: hi
      tool_calls:
        - name: read_file
          arguments: {path: README.md, lines: [1, 2]}
        - name: raw
          arguments: '{"broken": '
      finish_reason: tool_calls
  - error: {status: 429, message: slow down, retry_after: 3}
`
	s, err := ParseScript([]byte(src), ".yaml")
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	if len(s.Rules) != 2 {
		t.Fatalf("got %d rules, want 2", len(s.Rules))
	}
	r := s.Rules[0]
	if r.Name != "plan" || r.Model != "m1" || r.When.Turn != 1 || r.When.FirstUserContains != "build" ||
		r.When.LastRole != "user" || r.Times != 2 || r.Delay.Std() != 150*time.Millisecond {
		t.Errorf("rule 0 decoded wrongly: %+v", r)
	}
	rules, err := compile(s)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	if got, want := rules[0].arguments[0], `{"lines":[1,2],"path":"README.md"}`; got != want {
		t.Errorf("object arguments = %s, want %s", got, want)
	}
	if got, want := rules[0].arguments[1], `{"broken": `; got != want {
		t.Errorf("string arguments = %q, want verbatim %q", got, want)
	}
	if e := s.Rules[1].Error; e == nil || e.Status != 429 || e.Message != "slow down" || e.RetryAfter != 3 {
		t.Errorf("rule 1 error decoded wrongly: %+v", e)
	}
}

func TestParseScriptJSON(t *testing.T) {
	src := `{"rules": [{"name": "a", "delay": "1s", "reply": {"tool_calls": [{"name": "f", "arguments": {"n": 12345678901234567890}}]}}]}`
	s, err := ParseScript([]byte(src), "json")
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	if s.Rules[0].Delay.Std() != time.Second {
		t.Errorf("delay = %s, want 1s", s.Rules[0].Delay)
	}
	rules, err := compile(s)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	// Large numbers must survive exactly, not be rounded through float64.
	if got, want := rules[0].arguments[0], `{"n":12345678901234567890}`; got != want {
		t.Errorf("arguments = %s, want %s", got, want)
	}
}

func TestParseScriptErrors(t *testing.T) {
	tests := []struct {
		name, ext, src string
		want           []string // substrings of the error
	}{
		{"unknown yaml field", ".yaml", "rules:\n  - reply: {content: x}\n    whne: {turn: 1}\n", []string{"whne"}},
		{"unknown nested yaml field", ".yml", "rules:\n  - reply: {content: x, tool_call: []}\n", []string{"tool_call"}},
		{"unknown json field", ".json", `{"rules": [{"reply": {"content": "x"}, "tmies": 2}]}`, []string{`"tmies"`}},
		{"both reply and error", ".yaml", "rules:\n  - reply: {content: x}\n  - reply: {content: y}\n    error: {status: 500}\n", []string{"rule 1", "field error", "only one of reply, error or raw"}},
		{"neither reply nor error", ".yaml", "rules:\n  - reply: {content: x}\n  - reply: {content: y}\n  - reply: {content: z}\n  - name: empty\n", []string{"rule 3: field reply: one of reply, error or raw is required"}},
		{"bad duration", ".yaml", "rules:\n  - delay: 5\n    reply: {content: x}\n", []string{"duration", `"5"`}},
		{"bad json duration", ".json", `{"rules": [{"delay": 5, "reply": {"content": "x"}}]}`, []string{"duration"}},
		{"negative times", ".yaml", "rules:\n  - times: -1\n    reply: {content: x}\n", []string{"rule 0", "field times"}},
		{"bad status", ".yaml", "rules:\n  - error: {status: 200}\n", []string{"rule 0", "field error.status"}},
		{"bad raw status", ".yaml", "rules:\n  - raw: {status: 101, body: x}\n", []string{"rule 0", "field raw.status"}},
		{"raw and reply", ".yaml", "rules:\n  - raw: {body: x}\n    reply: {content: y}\n", []string{"rule 0", "only one of reply, error or raw"}},
		{"tool call without name", ".yaml", "rules:\n  - reply: {tool_calls: [{arguments: {}}]}\n", []string{"rule 0", "reply.tool_calls[0].name"}},
		{"unencodable arguments", ".yaml", "rules:\n  - reply: {tool_calls: [{name: f, arguments: {1: x}}]}\n", []string{"rule 0", "reply.tool_calls[0].arguments"}},
		{"bad last_role", ".yaml", "rules:\n  - when: {last_role: usr}\n    reply: {content: x}\n", []string{"when.last_role", "usr"}},
		{"bad finish_reason", ".yaml", "rules:\n  - reply: {content: x, finish_reason: done}\n", []string{"reply.finish_reason"}},
		{"no rules", ".yaml", "rules: []\n", []string{"at least one rule"}},
		{"empty file", ".yaml", "", []string{"empty"}},
		{"two documents", ".yaml", "rules:\n  - reply: {content: x}\n---\nrules: []\n", []string{"more than one"}},
		{"trailing json", ".json", `{"rules": [{"reply": {"content": "x"}}]} {}`, []string{"trailing"}},
		{"unknown extension", ".toml", "", []string{`".toml"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseScript([]byte(tt.src), tt.ext)
			if err == nil {
				t.Fatal("ParseScript succeeded, want error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadScript(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"rules": [{"reply": {"content": "ok"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadScript(good)
	if err != nil {
		t.Fatalf("LoadScript: %v", err)
	}
	if s.Rules[0].Reply.Content != "ok" {
		t.Errorf("content = %q, want ok", s.Rules[0].Reply.Content)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - reply: {content: x}\n    bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadScript(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("LoadScript(bad) error = %v, want it to name the file and the field", err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	if _, err := LoadScript(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadScript(missing) error = %v, want it to name the file", err)
	}
}

func TestDurationRoundTrip(t *testing.T) {
	d := Duration(1500 * time.Millisecond)
	b, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Duration
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if back != d {
		t.Errorf("round trip = %s, want %s", back, d)
	}
}
