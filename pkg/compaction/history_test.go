package compaction

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestHistoryRecordOutcome(t *testing.T) {
	o := DefaultOptions()
	op := Op{Unit: "tool-3-0", Op: OpCompactToolOutput, Label: "compact_tool_output:run", Tokens: 1000, OutputTokens: 250, LLMCall: true}
	var h History
	h.StartIteration(1)
	h.RecordOutcome(op, 260, o) // within 10%: on target
	if got := h.Ratios[op.Label]; len(got) != 1 || got[0] != 0.26 {
		t.Errorf("ratios %v", got)
	}
	if h.Overshoots[op.Label] != 0 || h.Compressed["tool-3-0"] != 1 {
		t.Errorf("history %+v", h)
	}
	h.RecordOutcome(op, 400, o)
	if h.Overshoots[op.Label] != 1 || h.CooldownUntil[op.Label] != 0 {
		t.Errorf("one overshoot: %+v", h)
	}
	h.RecordOutcome(op, 240, o) // back on target: the streak ends
	if h.Overshoots[op.Label] != 0 {
		t.Errorf("streak not reset: %+v", h)
	}
	h.RecordOutcome(op, 400, o)
	h.RecordOutcome(op, 400, o)
	if h.CooldownUntil[op.Label] != 1+o.CooldownIterations+1 || h.Overshoots[op.Label] != 0 {
		t.Errorf("two overshoots in a row: %+v", h)
	}
	for k := 0; k < 30; k++ {
		h.RecordOutcome(op, 250, o)
	}
	if n := len(h.Ratios[op.Label]); n != maxRatioSamples {
		t.Errorf("%d samples kept, want %d", n, maxRatioSamples)
	}
	// A pointer's size is no realised compaction ratio.
	h.RecordOutcome(Op{Unit: "tool-4-0", Op: OpReplaceWithPointer, Label: "replace_with_pointer:run", Tokens: 900, OutputTokens: 60}, 60, o)
	if _, ok := h.Ratios["replace_with_pointer:run"]; ok {
		t.Errorf("pointer recorded as a ratio")
	}
}

func TestHistoryIterations(t *testing.T) {
	h := History{Iteration: 3, CallsThisIteration: 2, CooldownUntil: map[string]int{"a": 4, "b": 9}}
	h.Commit(Result{LLMCalls: 2, Advisor: AdvisorReport{Called: true}})
	if h.CallsThisIteration != 4 || h.AdvisorUsedIteration != 3 {
		t.Errorf("commit: %+v", h)
	}
	h.StartIteration(3)
	if h.CallsThisIteration != 4 {
		t.Errorf("same iteration reset the calls")
	}
	h.StartIteration(4)
	if h.CallsThisIteration != 0 || h.Iteration != 4 {
		t.Errorf("new iteration: %+v", h)
	}
	if _, ok := h.CooldownUntil["a"]; ok {
		t.Errorf("expired cooldown kept: %v", h.CooldownUntil)
	}
	if h.CooldownUntil["b"] != 9 {
		t.Errorf("running cooldown dropped: %v", h.CooldownUntil)
	}
	// History round-trips through JSON, as the Summarizer keeps it in Redis.
	h.Ratios = map[string][]float64{"checkpoint_merge": {0.2, 0.25}}
	h.Cached = map[string]bool{"k": true}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var back History
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, h) {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, h)
	}
}

func TestHistoryRealisedRatios(t *testing.T) {
	h := History{Ratios: map[string][]float64{
		"compact_tool_output:run": {0.2, 0.4},
		"compact_tool_output":     {0.5},
	}}
	if mean, best, ok := h.realised("compact_tool_output:run", OpCompactToolOutput); !ok || mean < 0.2999 || mean > 0.3001 || best != 0.2 {
		t.Errorf("label samples: %v %v %v", mean, best, ok)
	}
	if mean, _, ok := h.realised("compact_tool_output:search", OpCompactToolOutput); !ok || mean != 0.5 {
		t.Errorf("op-wide fallback: %v %v", mean, ok)
	}
	if _, _, ok := h.realised("compact_historical:historical_chat", OpCompactHistorical); ok {
		t.Errorf("samples out of nowhere")
	}
}
