package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompactPlan(t *testing.T) {
	// At pressure the sample's plan waits (its ops are skipped: the target
	// needs the protected draft); at critical it compacts.
	for _, name := range []string{"release_notes", "release_notes_critical"} {
		t.Run(name, func(t *testing.T) { checkCompactPlan(t, name, name == "release_notes_critical") })
	}
}

func checkCompactPlan(t *testing.T, name string, wantOps bool) {
	doc := filepath.Join("..", "..", "pkg", "compaction", "testdata", name+".json")
	golden, err := os.ReadFile(filepath.Join("..", "..", "pkg", "compaction", "testdata", name+".golden"))
	if err != nil {
		t.Fatal(err)
	}
	first, code, err := ralph(t, "compact", "plan", doc)
	if code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	second, _, _ := ralph(t, "compact", "plan", doc)
	if first != second {
		t.Fatal("the same document gave two different plans")
	}
	if first != string(golden) {
		t.Fatalf("plan differs from the planner's golden file:\n%s", first)
	}
	var plan struct {
		Tier         string            `json:"tier"`
		TokensBefore int               `json:"tokens_before"`
		TargetTokens int               `json:"target_tokens"`
		TokensAfter  int               `json:"tokens_after"`
		Lanes        map[string]string `json:"lanes"`
		Ops          []struct {
			Unit        string  `json:"unit"`
			Op          string  `json:"op"`
			Lane        string  `json:"lane"`
			TokensSaved int     `json:"tokens_saved"`
			Harm        float64 `json:"harm"`
		} `json:"ops"`
		Skipped []struct {
			Unit   string `json:"unit"`
			Reason string `json:"reason"`
		} `json:"skipped"`
		TargetMet bool `json:"target_met"`
	}
	if err := json.Unmarshal([]byte(first), &plan); err != nil {
		t.Fatalf("plan is not JSON: %v", err)
	}
	if plan.Tier == "" || plan.TokensBefore == 0 || len(plan.Lanes) == 0 || (len(plan.Ops) == 0) == wantOps || len(plan.Skipped) == 0 {
		t.Fatalf("plan lacks the fields of docs/REFERENCE.md: %+v", plan)
	}
	saved := 0
	for _, op := range plan.Ops {
		saved += op.TokensSaved
	}
	if plan.TokensAfter != plan.TokensBefore-saved || plan.TargetMet != (plan.TokensAfter <= plan.TargetTokens) {
		t.Fatalf("tokens_after %d, target %d, met %v, saved %d: inconsistent", plan.TokensAfter, plan.TargetTokens, plan.TargetMet, saved)
	}
}

func TestCompactPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content, want string
	}{
		{"missing", "", "no such file"},
		{"bad.json", `{"limit_tokens": 100, "units": [`, "bad.json"},
		{"unknown.json", `{"limit_tokens": 100, "current_turn": 1, "task": {"goal": "g"}, "units": [{"id": "u1", "role": "user", "kind": "message", "content": "x", "colour": "red"}]}`, "colour"},
		{"kind.json", `{"limit_tokens": 100, "current_turn": 1, "task": {"goal": "g"}, "units": [{"id": "u1", "role": "user", "kind": "memo", "content": "x"}]}`, `units[0] (id "u1"): field kind`},
		{"limit.json", `{"limit_tokens": 0, "current_turn": 1, "task": {"goal": "g"}, "units": []}`, "limit_tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name)
			if c.content != "" {
				writeFile(t, dir, c.name, c.content)
			}
			out, code, err := ralph(t, "compact", "plan", path)
			if code != 2 || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("exit %d, err %v; want 2 naming %q\n%s", code, err, c.want, out)
			}
			if strings.Contains(out, "tokens_before") {
				t.Fatalf("printed a plan for bad input:\n%s", out)
			}
		})
	}
}

func TestBadCompactionKnobIsRefusedAtStart(t *testing.T) {
	t.Setenv("RALPH_COMPACTION_MIN_TARGET_SHARE", "2")
	if _, code, err := ralph(t, "config"); code != 2 || err.Error() != "RALPH_COMPACTION_MIN_TARGET_SHARE=2: must be between 0 and 1" {
		t.Fatalf("exit %d, err %v; want 2 naming the knob", code, err)
	}
}
