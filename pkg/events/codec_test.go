package events_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// benchRecord is an iteration's record as a step with two tool calls
// publishes it.
var benchRecord = events.IterationRecord{
	Iteration: 7, TaskID: "T1", AssistantText: "I will run the tests and then fix what fails.",
	ToolCalls: []events.ToolCall{
		{ID: "c1", Name: "run", Args: json.RawMessage(`{"command":"go test ./..."}`), Output: "ok  \tgithub.com/x/y\t0.12s\n", ExitCode: 0},
		{ID: "c2", Name: "write_file", Args: json.RawMessage(`{"path":"a.go","content":"package a\n"}`), Output: "wrote a.go"},
	},
	FilesChanged: []string{"a.go"}, WorkspaceHash: "0123456789abcdef0123456789abcdef", ContextTokens: 5210,
	Usage: events.Usage{InputTokens: 5000, OutputTokens: 210},
}

// BenchmarkEncode is what a service does to publish an event: build the
// envelope (New), validate it again (the bus's Publish) and marshal it.
func BenchmarkEncode(b *testing.B) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		env, err := events.New(events.IterationCompleted, "s-1", "T1", 7, at, benchRecord)
		if err != nil {
			b.Fatal(err)
		}
		if err := env.Validate(); err != nil {
			b.Fatal(err)
		}
		_ = env.Marshal()
	}
}

// BenchmarkDecode is what a service does with an event it is delivered:
// decode and validate the envelope (the bus), then its payload (the
// handler).
func BenchmarkDecode(b *testing.B) {
	raw := events.Must(events.IterationCompleted, "s-1", "T1", 7, time.Now(), benchRecord).Marshal()
	b.ReportAllocs()
	for b.Loop() {
		env, err := events.Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := events.DecodeAs[events.IterationRecord](env); err != nil {
			b.Fatal(err)
		}
	}
}

// The payload a delivered event was validated with is handed to its
// handler without a second decode, but never to two callers: a second
// DecodeAs gets its own copy. An envelope whose Data is replaced is
// validated afresh.
func TestCheckedPayloadIsNotShared(t *testing.T) {
	env, err := events.Decode(events.Must(events.IterationCompleted, "s-1", "T1", 7, time.Now(), benchRecord).Marshal())
	if err != nil {
		t.Fatal(err)
	}
	first, err := events.DecodeAs[events.IterationRecord](env)
	if err != nil {
		t.Fatal(err)
	}
	first.ToolCalls[0].Output = "changed"
	second, err := events.DecodeAs[events.IterationRecord](env)
	if err != nil {
		t.Fatal(err)
	}
	if second.ToolCalls[0].Output != benchRecord.ToolCalls[0].Output {
		t.Fatalf("the second caller sees the first's change: %q", second.ToolCalls[0].Output)
	}
	env.Data = json.RawMessage(`{"iteration": -1}`)
	if err := env.Validate(); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("replaced invalid payload: %v", err)
	}
	if _, err := events.DecodeAs[events.IterationRecord](env); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("DecodeAs of a replaced invalid payload: %v", err)
	}
}
