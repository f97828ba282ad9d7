package events_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// FuzzDecode: Decode never panics, and what it accepts survives a second
// trip over the wire unchanged.
func FuzzDecode(f *testing.F) {
	for _, typ := range []events.Type{events.SessionStarted, events.IterationCompleted, events.IterationAnalyzed} {
		full, ok := fullPayloads[typ]
		if !ok {
			full = minimalPayloads[typ]
		}
		f.Add(events.Must(typ, "s1", "T1", 3, time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), full).Marshal())
	}
	f.Add([]byte(`{"id":"x","type":"session.resumed","schema":1,"session":"s1","step":0,"time":"2025-01-02T03:04:05+05:30","data":{ "message" : "<b>&amp;</b>" }}`))
	f.Add([]byte(`{"id":"x","type":"session.resumed","schema":1,"session":"s1","step":0,"time":"0000-01-01T00:00:00-23:59","data":[1, 2.50, "\u2028"]}`))
	f.Add([]byte(`{"id":"x","type":"task.completed","schema":1,"session":"a.b","data":{}}`))
	f.Add([]byte(`{"id":"x","type":"task.completed","schema":1,"session":"s","data":null}`))
	f.Add([]byte(`{"id":"\ud800","type":"task.completed","schema":1,"session":"s","data":"\xff"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`not json`))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, raw []byte) {
		env, err := events.Decode(raw)
		if err != nil {
			return
		}
		if err := env.Validate(); err != nil {
			t.Fatalf("Decode accepted an envelope Validate rejects: %v", err)
		}
		wire := env.Marshal()
		again, err := events.Decode(wire)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", wire, err)
		}
		if again.ID != env.ID || again.Type != env.Type || again.Schema != env.Schema ||
			again.Session != env.Session || again.Task != env.Task || again.Step != env.Step {
			t.Fatalf("envelope changed:\n first %+v\nsecond %+v", env, again)
		}
		if !again.Time.Equal(env.Time) {
			t.Fatalf("time changed: %v then %v", env.Time, again.Time)
		}
		// Marshal normalises the payload (compact, HTML-escaped), so the
		// second encoding must be byte for byte the first.
		if second := again.Marshal(); !bytes.Equal(second, wire) {
			t.Fatalf("encoding not stable:\n first %s\nsecond %s", wire, second)
		}
	})
}

// FuzzIterationRecord: an iteration.completed payload of any bytes never
// panics the decoder; what DecodeAs accepts is a valid record that survives
// publishing again unchanged.
func FuzzIterationRecord(f *testing.F) {
	f.Add([]byte(`{"iteration": 7, "task_id": "T2", "assistant_text": "again", "tool_calls": [{"name": "read_file", "args": {"path": "a"}, "output": "x", "exit_code": 0}], "files_changed": ["a"], "tests": {"passed": 1, "failed": 1, "failing": ["TestX"]}, "usage": {"input_tokens": 5, "output_tokens": 3}, "context_tokens": 9, "compacted": true}`))
	f.Add([]byte(`{"iteration": 0}`))
	f.Add([]byte(`{"iteration": 1, "tool_calls": [{"name": ""}]}`))
	f.Add([]byte(`{"iteration": 1, "tool_calls": [{"name": "run", "args": "not an object"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		env := events.Envelope{ID: "s1/1/iteration.completed/T1", Type: events.IterationCompleted, Schema: events.SchemaVersion,
			Session: "s1", Task: "T1", Step: 1, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Data: data}
		rec, err := events.DecodeAs[events.IterationRecord](env)
		if err != nil {
			return
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("DecodeAs accepted a record Validate refuses: %v", err)
		}
		again, err := events.New(events.IterationCompleted, "s1", "T1", 1, env.Time, rec)
		if err != nil {
			t.Fatalf("an accepted record cannot be published again: %v", err)
		}
		back, err := events.DecodeAs[events.IterationRecord](again)
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if back.Iteration != rec.Iteration || len(back.ToolCalls) != len(rec.ToolCalls) || back.AssistantText != rec.AssistantText {
			t.Fatalf("round trip changed the record: %+v then %+v", rec, back)
		}
	})
}
