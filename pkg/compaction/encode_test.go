package compaction

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden plans in testdata")

// TestGoldenPlans is `ralph compact plan FILE` for every sample context
// document: DecodeDocument, Plan with the defaults and no history or
// advisor, Encode.
func TestGoldenPlans(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no sample documents: %v", err)
	}
	for _, path := range docs {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			got := planFile(t, path)
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("plan of %s differs from %s (go test -update rewrites it)\n got:\n%s", path, golden, got)
			}
		})
	}
}

func planFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := DecodeDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Plan(doc, DefaultOptions(), History{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEncodeIsByteIdentical(t *testing.T) {
	doc := loadDoc(t, "testdata/release_notes.json")
	// The same history, its maps filled in opposite orders.
	labels := []string{"compact_tool_output:run", "compact_tool_output:search", "checkpoint_merge", "compact_historical:historical_chat", "replace_with_pointer:run"}
	hist := func(order []string) History {
		h := History{Iteration: 7, Ratios: map[string][]float64{}, Overshoots: map[string]int{}, CooldownUntil: map[string]int{},
			Cached: map[string]bool{}, Compressed: map[string]int{}}
		for k, l := range order {
			h.Ratios[l] = []float64{0.21, 0.27}
			h.Overshoots[l] = 1
			h.Cached[fmt.Sprintf("key-%s", l)] = true
			h.Compressed[[]string{"tool-44-1", "tool-45-0", "tool-46-0", "tool-47-0", "assistant-44"}[(k*7)%5]] = 1
		}
		return h
	}
	reversed := slices.Clone(labels)
	slices.Reverse(reversed)
	var outs [][]byte
	for _, order := range [][]string{labels, reversed, labels} {
		r := mustPlan(t, doc, DefaultOptions(), hist(order))
		b, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b)
	}
	for k := 1; k < len(outs); k++ {
		if !bytes.Equal(outs[0], outs[k]) {
			t.Errorf("run %d differs from run 0:\n%s\n---\n%s", k, outs[k], outs[0])
		}
	}
	if !bytes.HasSuffix(outs[0], []byte("\n")) {
		t.Errorf("output does not end with a newline")
	}
}

// TestEncodeContractFields checks the plan against the reference's field names
// (docs/REFERENCE.md, "Plan")
// and types.
func TestEncodeContractFields(t *testing.T) {
	for _, limit := range []int{100000, 6200, 4800} {
		doc := loadDoc(t, "testdata/release_notes.json")
		doc.LimitTokens = limit
		b, err := Encode(mustPlan(t, doc, DefaultOptions(), History{}))
		if err != nil {
			t.Fatal(err)
		}
		var plan map[string]json.RawMessage
		if err := json.Unmarshal(b, &plan); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"tier", "tokens_before", "target_tokens", "tokens_after", "lanes", "ops", "skipped"} {
			if _, ok := plan[f]; !ok {
				t.Errorf("limit %d: plan lacks %q", limit, f)
			}
		}
		var typed struct {
			Tier         string            `json:"tier"`
			TokensBefore int               `json:"tokens_before"`
			TargetTokens int               `json:"target_tokens"`
			TokensAfter  int               `json:"tokens_after"`
			Lanes        map[string]string `json:"lanes"`
			Ops          []map[string]any  `json:"ops"`
			Skipped      []map[string]any  `json:"skipped"`
		}
		if err := json.Unmarshal(b, &typed); err != nil {
			t.Fatalf("limit %d: contract types: %v", limit, err)
		}
		if typed.Ops == nil || typed.Skipped == nil {
			t.Errorf("limit %d: ops and skipped must be arrays, never null: %s", limit, plan["ops"])
		}
		if !slices.Contains([]string{"normal", "pressure", "critical"}, typed.Tier) {
			t.Errorf("tier %q", typed.Tier)
		}
		for id, l := range typed.Lanes {
			if !slices.Contains([]string{"instruction", "active_write", "source_evidence", "tool_trace", "historical_chat"}, l) {
				t.Errorf("lane of %s: %q", id, l)
			}
		}
		for _, op := range typed.Ops {
			for _, f := range []string{"unit", "op", "lane", "tokens_saved", "harm"} {
				if _, ok := op[f]; !ok {
					t.Errorf("op %v lacks %q", op, f)
				}
			}
			if _, ok := op["tokens_saved"].(float64); !ok {
				t.Errorf("tokens_saved not a number: %v", op)
			}
		}
		for _, s := range typed.Skipped {
			if !slices.Contains([]string{"unachievable_ratio", "budget_exhausted", "cooldown", "protected_lane", "no_gain"}, s["reason"].(string)) {
				t.Errorf("skip reason %v", s)
			}
			if _, ok := s["unit"].(string); !ok {
				t.Errorf("skip %v lacks its unit", s)
			}
		}
	}
}

func TestCacheKeysOfGoldenPlans(t *testing.T) {
	// Every LLM op's key is CacheKey over OpPayload, merges included, so an
	// executor recomputing it finds the cached result.
	for _, path := range []string{"testdata/release_notes.json", "testdata/release_notes_critical.json"} {
		doc := loadDoc(t, path)
		o := DefaultOptions()
		for _, mode := range []Mode{ModeLegacy, ModeTieredAdaptive} {
			o.Mode = mode
			r := mustPlan(t, doc, o, History{})
			for _, op := range r.Ops {
				if op.Op == OpReplaceWithPointer {
					if op.CacheKey != "" || op.LLMCall {
						t.Errorf("pointer op needs no call nor key: %+v", op)
					}
					continue
				}
				p, err := OpPayload(op, ExpandCalls(doc.Units))
				if err != nil {
					t.Fatal(err)
				}
				if k := CacheKey(p, op.OutputTokens, op.Label, o.Model, o.PromptVersion); k != op.CacheKey {
					t.Errorf("%s %s on %s: key %s, recomputed %s", mode, op.Op, op.Unit, op.CacheKey, k)
				}
			}
		}
	}
}

func TestCacheKey(t *testing.T) {
	base := CacheKey("payload", 100, "compact_tool_output:run", "gpt-4o-mini", "v1")
	if base != CacheKey("payload", 100, "compact_tool_output:run", "gpt-4o-mini", "v1") {
		t.Errorf("not deterministic")
	}
	if len(base) != 64 {
		t.Errorf("key %q is not a hex sha256", base)
	}
	for _, other := range []string{
		CacheKey("payload!", 100, "compact_tool_output:run", "gpt-4o-mini", "v1"),
		CacheKey("payload", 101, "compact_tool_output:run", "gpt-4o-mini", "v1"),
		CacheKey("payload", 100, "compact_tool_output:search", "gpt-4o-mini", "v1"),
		CacheKey("payload", 100, "compact_tool_output:run", "gpt-4o", "v1"),
		CacheKey("payload", 100, "compact_tool_output:run", "gpt-4o-mini", "v2"),
		// Shifting text between parts is another key.
		CacheKey("payload1", 0, "0compact_tool_output:run", "gpt-4o-mini", "v1"),
		CacheKey("payload", 100, "compact_tool_output:rungpt-4o-mini", "", "v1"),
	} {
		if other == base {
			t.Errorf("distinct inputs share the key %s", base)
		}
	}
}

func TestOpPayloadUnknownUnit(t *testing.T) {
	if _, err := OpPayload(Op{Unit: "nope", Op: OpCompactHistorical}, nil); err == nil {
		t.Errorf("payload of a unit that is not in view")
	}
}

// TestContractShapedDocument plans a document written the way docs/REFERENCE.md
// shows it: explicit tool_call and tool_result units, some tokens absent.
func TestContractShapedDocument(t *testing.T) {
	in := `{"limit_tokens": 2000, "current_turn": 14,
	 "task": {"goal": "Write the release notes for v2", "phase": "exploring"},
	 "units": [
	  {"id": "u1", "role": "system", "kind": "message", "content": "You are the Builder.", "turn": 0, "tokens": 120},
	  {"id": "u2", "role": "user", "kind": "message", "content": "Write the release notes for v2.", "turn": 0, "tokens": 200},
	  {"id": "u3", "role": "assistant", "kind": "tool_call", "tool": "read_file", "call_id": "c1", "args": {"path": "docs/x.md"}, "content": "", "turn": 3},
	  {"id": "u4", "role": "tool", "kind": "tool_result", "tool": "read_file", "call_id": "c1", "args": {"path": "docs/x.md"}, "content": "...", "turn": 3, "tokens": 420},
	  {"id": "u5", "role": "assistant", "kind": "tool_call", "tool": "run", "call_id": "c2", "args": {"command": "git log"}, "turn": 5, "tokens": 12},
	  {"id": "u6", "role": "tool", "kind": "tool_result", "tool": "run", "call_id": "c2", "content": "...", "turn": 5, "tokens": 700},
	  {"id": "u7", "role": "assistant", "kind": "message", "content": "Drafting now.", "turn": 13, "tokens": 8},
	  {"id": "u8", "role": "assistant", "kind": "tool_call", "tool": "write_file", "call_id": "c3", "args": {"path": "docs/release-notes/v2.md", "content": "# v2\nSee docs/x.md."}, "turn": 14, "tokens": 250},
	  {"id": "u9", "role": "tool", "kind": "tool_result", "tool": "write_file", "call_id": "c3", "content": "wrote 20 bytes", "turn": 14, "tokens": 6}
	 ]}`
	doc, err := DecodeDocument([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	r := mustPlan(t, doc, DefaultOptions(), History{})
	want := map[string]Lane{"u1": LaneInstruction, "u2": LaneInstruction, "u3": LaneSourceEvidence, "u4": LaneSourceEvidence,
		"u5": LaneToolTrace, "u6": LaneToolTrace, "u7": LaneHistoricalChat, "u8": LaneActiveWrite, "u9": LaneActiveWrite}
	for id, l := range want {
		if r.Lanes[id] != l {
			t.Errorf("lane of %s = %q, want %q", id, r.Lanes[id], l)
		}
	}
	if r.Tier != TierPressure || r.Phase != PhaseDrafting || r.TargetTokens != 700 {
		t.Errorf("tier %s phase %s target %d", r.Tier, r.Phase, r.TargetTokens)
	}
	if s, ok := skipOf(r, "u4"); !ok || s.Reason != SkipProtectedLane {
		t.Errorf("u4 is what the draft cites, and the task is drafting: %+v", s)
	}
	// The trace alone cannot reach the target, but one more step like the
	// git log (712 tokens) would not fit the limit: no time to wait for the
	// critical tier, so the trace goes into the checkpoint now.
	if len(r.Ops) != 1 || r.Ops[0].Op != OpCheckpointMerge || !slices.Equal(r.Ops[0].Units, []string{"u5", "u6"}) || r.TargetMet {
		t.Errorf("ops %+v: want the git log merged, short of the target", r.Ops)
	}
	if _, err := Encode(r); err != nil {
		t.Fatal(err)
	}
	// Tiered compacts what it may: the git log output goes first.
	r = mustPlan(t, doc, opts(func(o *Options) { o.Mode = ModeTiered }), History{})
	if len(r.Ops) == 0 || r.Ops[0].Unit != "u6" {
		t.Errorf("tiered: ops %+v: the git log output goes first", r.Ops)
	}
}
