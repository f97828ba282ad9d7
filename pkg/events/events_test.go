package events_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

var (
	at       = time.Date(2025, 3, 4, 5, 6, 7, 890, time.FixedZone("CET", 3600))
	testTask = prd.Task{ID: "T1", Title: "Do it", AcceptanceCriteria: []string{"it is done"}}
	testPRD  = prd.PRD{Title: "p", Tasks: []prd.Task{testTask}}
	signal   = events.Signal{Iteration: 3, Pattern: "repeat", Confidence: 0.9, Action: events.ActionPrune, Evidence: []int{1, 2, 3}}
)

// minimalPayloads holds a small valid payload for every type.
var minimalPayloads = map[events.Type]any{
	events.SessionStarted:      events.SessionStartedData{PRD: testPRD, Workspace: "/work/ws"},
	events.TaskStarted:         events.TaskStartedData{Task: testTask},
	events.IterationRequested:  events.IterationRequestedData{Iteration: 1},
	events.IterationCompleted:  events.IterationRecord{Iteration: 1},
	events.IterationAnalyzed:   events.IterationAnalyzedData{Iteration: 1},
	events.CritiqueRequested:   events.CritiqueRequestedData{Task: testTask, Workspace: "/work/ws"},
	events.CritiqueCompleted:   events.CritiqueCompletedData{TaskID: "T1"},
	events.PruneRequested:      events.PruneRequestedData{TaskID: "T1", Signal: signal},
	events.PruneCompleted:      events.PruneCompletedData{TaskID: "T1"},
	events.DecomposeRequested:  events.DecomposeRequestedData{Task: testTask, Signal: signal},
	events.TaskDecomposed:      events.TaskDecomposedData{ParentID: "T1", Error: "not JSON"},
	events.CompactionRequested: events.CompactionRequestedData{TaskID: "T1", LimitTokens: 8000},
	events.CompactionCompleted: events.CompactionCompletedData{TaskID: "T1"},
	events.TaskCompleted:       events.TaskCompletedData{TaskID: "T1"},
	events.MemoryUpdated:       events.MemoryUpdatedData{TaskID: "T1"},
	events.SessionCompleted:    events.SessionCompletedData{},
	events.SessionFailed:       events.SessionFailedData{Reason: "budget"},
	events.SessionEscalated:    events.SessionEscalatedData{Reason: "stuck"},
	events.SessionResumed:      events.SessionResumedData{Message: "try the v2 API"},
	events.CancelRequested:     events.CancelRequestedData{},
	events.SessionCancelled:    events.SessionCancelledData{Reason: "cancelled by a person"},
}

// fullPayloads are richer payloads, to check every field survives the wire.
var fullPayloads = map[events.Type]any{
	events.SessionStarted: events.SessionStartedData{PRD: testPRD, Workspace: "/w",
		Limits: events.Limits{MaxTurnsPerTask: 5, MaxIterations: 50, MaxTotalTokens: 100000}},
	events.IterationCompleted: events.IterationRecord{
		Iteration: 4, TaskID: "T1", AssistantText: "ran tests <ok> & done",
		ToolCalls: []events.ToolCall{{ID: "c1", Name: "bash", Args: json.RawMessage(`{"cmd":"go test ./..."}`),
			Output: "FAIL", Error: "exit 1", ExitCode: 1}},
		FilesChanged: []string{"a.go"}, WorkspaceHash: "abc",
		Tests: &events.TestResult{Passed: 3, Failed: 1, Failing: []string{"TestX"}},
		Usage: events.Usage{InputTokens: 10, OutputTokens: 2}, ContextTokens: 99, Compacted: true, ClaimedDone: true,
	},
	events.IterationAnalyzed: events.IterationAnalyzedData{Iteration: 4, Signal: &signal, ClaimedDone: true},
	events.CritiqueCompleted: events.CritiqueCompletedData{TaskID: "T1", Attempt: 2,
		Verdict: events.Verdict{Approved: false, Feedback: "no", UnmetCriteria: []string{"it is done"}},
		Verify:  &events.VerifyResult{Command: "make", ExitCode: 2, Output: "err", TimedOut: true}},
	events.TaskDecomposed: events.TaskDecomposedData{ParentID: "T1", Subtasks: []prd.Task{
		{ID: "T1.1", Title: "half", AcceptanceCriteria: []string{"x"}, ParentID: "T1"}}},
	events.SessionEscalated: events.SessionEscalatedData{TaskID: "T1", Reason: "stuck", Diagnosis: "loops",
		Tried: []string{"prune", "decompose"}, Signal: &signal},
	events.MemoryUpdated: events.MemoryUpdatedData{TaskID: "T2", How: "llm", Notes: 3, Tokens: 700, MaxTokens: 1500, Tasks: 2,
		Resummarized: "extractive", LLMCalls: 2, ElapsedMS: 40},
}

func TestCatalogue(t *testing.T) {
	if len(events.AllTypes) != 21 {
		t.Errorf("AllTypes has %d types, want 21", len(events.AllTypes))
	}
	seen := map[events.Type]bool{}
	for _, typ := range events.AllTypes {
		if seen[typ] {
			t.Errorf("%s listed twice", typ)
		}
		seen[typ] = true
		if !typ.Known() {
			t.Errorf("%s is not Known", typ)
		}
		pt := events.PayloadType(typ)
		if pt == nil {
			t.Errorf("%s has no payload type in the registry", typ)
			continue
		}
		p, ok := minimalPayloads[typ]
		if !ok {
			t.Errorf("the test has no payload for %s", typ)
		} else if got := reflect.TypeOf(p); got != pt {
			t.Errorf("the test's payload for %s is %v, the registry's %v", typ, got, pt)
		}
	}
	if events.PayloadType("nope") != nil {
		t.Error("an unknown type has a payload type")
	}
	for _, typ := range []events.Type{"", "session", "session.started ", "SESSION.STARTED", "task.*", "nope"} {
		if typ.Known() {
			t.Errorf("%q is Known", typ)
		}
	}
}

func TestTerminal(t *testing.T) {
	terminal := map[events.Type]bool{events.SessionCompleted: true, events.SessionFailed: true, events.SessionEscalated: true,
		events.SessionCancelled: true}
	for _, typ := range events.AllTypes {
		if got := typ.Terminal(); got != terminal[typ] {
			t.Errorf("%s.Terminal() = %v, want %v", typ, got, terminal[typ])
		}
	}
	if events.Type("session.unknown").Terminal() {
		t.Error("an unknown type is Terminal")
	}
}

func TestActionKnown(t *testing.T) {
	for _, a := range []events.Action{events.ActionPrune, events.ActionDecompose, events.ActionNudge, events.ActionEscalate} {
		if !a.Known() {
			t.Errorf("%s not Known", a)
		}
	}
	for _, a := range []events.Action{"", "prune", "restart"} {
		if a.Known() {
			t.Errorf("%q Known", a)
		}
	}
}

func TestStrengthKnown(t *testing.T) {
	for _, s := range []events.Strength{events.StrengthWeak, events.StrengthStrong} {
		if !s.Known() {
			t.Errorf("%s not Known", s)
		}
	}
	for _, s := range []events.Strength{"", "medium", "Strong"} {
		if s.Known() {
			t.Errorf("%q Known", s)
		}
	}
	// A signal from a producer that does not grade stays valid.
	if err := (events.Signal{Pattern: "p", Confidence: 0.5, Action: events.ActionNudge}).Validate(); err != nil {
		t.Errorf("ungraded signal: %v", err)
	}
}

// roundTrip sends payload through New, Marshal, Decode and Envelope.Decode
// and checks that everything arrives unchanged.
func roundTrip(t *testing.T, typ events.Type, payload any) {
	t.Helper()
	env, err := events.New(typ, "sess-1", "T1", 7, at, payload)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	wire := env.Marshal()
	got, err := events.Decode(wire)
	if err != nil {
		t.Fatalf("Decode(%s): %v", wire, err)
	}
	if got.ID != env.ID || got.Type != typ || got.Schema != events.SchemaVersion ||
		got.Session != "sess-1" || got.Task != "T1" || got.Step != 7 {
		t.Errorf("envelope changed on the wire:\n got %+v\nwant %+v", got, env)
	}
	if !got.Time.Equal(at) || got.Time.Location() != time.UTC {
		t.Errorf("time = %v, want %v in UTC", got.Time, at)
	}
	p, err := got.Payload()
	if err != nil {
		t.Fatalf("Payload: %v", err)
	}
	if !reflect.DeepEqual(p, payload) {
		t.Errorf("payload changed on the wire:\n got %T %+v\nwant %T %+v", p, p, payload, payload)
	}
}

func TestRoundTripEveryType(t *testing.T) {
	for _, typ := range events.AllTypes {
		t.Run(string(typ), func(t *testing.T) {
			roundTrip(t, typ, minimalPayloads[typ])
			if full, ok := fullPayloads[typ]; ok {
				roundTrip(t, typ, full)
			}
		})
	}
}

func TestNewFields(t *testing.T) {
	env, err := events.New(events.TaskStarted, "s_1", "T1", 3, at, events.TaskStartedData{Task: testTask})
	if err != nil {
		t.Fatal(err)
	}
	if env.ID != "s_1/3/task.started/T1" || env.Type != events.TaskStarted || env.Schema != events.SchemaVersion ||
		env.Session != "s_1" || env.Task != "T1" || env.Step != 3 {
		t.Errorf("New = %+v", env)
	}
	if env.Time.Location() != time.UTC || !env.Time.Equal(at) {
		t.Errorf("time %v is not %v in UTC", env.Time, at)
	}
	if err := env.Validate(); err != nil {
		t.Errorf("Validate of a built envelope: %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(env.Marshal(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "type", "schema", "session", "task", "step", "time", "data"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("wire form has no %q: %v", k, raw)
		}
	}
	// task is omitted for session-level events.
	env, err = events.New(events.SessionCompleted, "s_1", "", 0, at, events.SessionCompletedData{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env.Marshal()), `"task"`) {
		t.Errorf("empty task is on the wire: %s", env.Marshal())
	}
}

func TestNewRejects(t *testing.T) {
	var nilSignal *events.Signal
	cases := []struct {
		name    string
		typ     events.Type
		session string
		step    int
		when    time.Time
		payload any
		want    string
	}{
		{"relative workspace", events.SessionStarted, "s1", 0, at, events.SessionStartedData{PRD: testPRD, Workspace: "ws"}, "workspace"},
		{"empty workspace", events.SessionStarted, "s1", 0, at, events.SessionStartedData{PRD: testPRD}, "workspace"},
		{"negative limit", events.SessionStarted, "s1", 0, at,
			events.SessionStartedData{PRD: testPRD, Workspace: "/w", Limits: events.Limits{MaxIterations: -1}}, "limits"},
		{"invalid PRD", events.SessionStarted, "s1", 0, at, events.SessionStartedData{Workspace: "/w"}, "tasks"},
		{"pointer to invalid payload", events.SessionStarted, "s1", 0, at, &events.SessionStartedData{PRD: testPRD, Workspace: "rel"}, "workspace"},
		{"invalid task", events.TaskStarted, "s1", 0, at, events.TaskStartedData{}, "field id"},
		{"iteration 0", events.IterationCompleted, "s1", 1, at, events.IterationRecord{}, "iteration"},
		{"tool call without name", events.IterationCompleted, "s1", 1, at,
			events.IterationRecord{Iteration: 1, ToolCalls: []events.ToolCall{{ID: "c"}}}, "tool_calls[0].name"},
		{"bad signal", events.IterationAnalyzed, "s1", 1, at,
			events.IterationAnalyzedData{Iteration: 1, Signal: &events.Signal{Pattern: "p", Confidence: 2, Action: events.ActionNudge}}, "confidence"},
		{"unknown strength", events.IterationAnalyzed, "s1", 1, at,
			events.IterationAnalyzedData{Iteration: 1, Signal: &events.Signal{Pattern: "p", Confidence: 0.5, Action: events.ActionNudge, Strength: "medium"}}, `field strength: must be "weak" or "strong", got "medium"`},
		{"critique without workspace", events.CritiqueRequested, "s1", 1, at, events.CritiqueRequestedData{Task: testTask}, "workspace"},
		{"memory without task", events.MemoryUpdated, "s1", 1, at, events.MemoryUpdatedData{Tokens: 3}, "task_id"},
		{"memory of negative size", events.MemoryUpdated, "s1", 1, at, events.MemoryUpdatedData{TaskID: "T1", Tokens: -1}, "negative"},
		{"critique result without task", events.CritiqueCompleted, "s1", 1, at, events.CritiqueCompletedData{}, "task_id"},
		{"failure without reason", events.SessionFailed, "s1", 1, at, events.SessionFailedData{}, "reason"},
		{"escalation without reason", events.SessionEscalated, "s1", 1, at, events.SessionEscalatedData{}, "reason"},
		{"unknown type", "task.exploded", "s1", 0, at, events.SessionResumedData{}, "unknown event type"},
		{"session with dot", events.SessionResumed, "a.b", 0, at, events.SessionResumedData{Message: "m"}, "session id"},
		{"session with wildcard", events.SessionResumed, "*", 0, at, events.SessionResumedData{Message: "m"}, "session id"},
		{"empty session", events.SessionResumed, "", 0, at, events.SessionResumedData{Message: "m"}, "session id"},
		{"negative step", events.SessionResumed, "s1", -1, at, events.SessionResumedData{Message: "m"}, "step"},
		{"nil payload", events.SessionResumed, "s1", 0, at, nil, "payload"},
		{"nil pointer payload", events.IterationAnalyzed, "s1", 0, at, nilSignal, "payload"},
		{"payload of another type", events.TaskDecomposed, "s1", 0, at, []prd.Task(nil), "task.decomposed payload is []prd.Task, want events.TaskDecomposedData"},
		{"pointer to another type", events.SessionFailed, "s1", 0, at, &events.SessionEscalatedData{Reason: "r"}, "session.failed payload is *events.SessionEscalatedData, want events.SessionFailedData"},
		{"payload of the type next to it", events.CritiqueRequested, "s1", 0, at, events.CritiqueCompletedData{TaskID: "T1"}, "want events.CritiqueRequestedData"},
		{"unencodable time", events.SessionResumed, "s1", 0, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), events.SessionResumedData{Message: "m"}, "time"},
		{"resume without guidance", events.SessionResumed, "s1", 0, at, events.SessionResumedData{Message: " "}, "field message"},
		{"decomposition without subtasks or error", events.TaskDecomposed, "s1", 0, at, events.TaskDecomposedData{ParentID: "T1"}, "field subtasks"},
		{"decomposition with a bad subtask", events.TaskDecomposed, "s1", 0, at, events.TaskDecomposedData{ParentID: "T1", Subtasks: []prd.Task{{ID: "T1.1"}}}, "field subtasks[0]"},
		{"compaction without a limit", events.CompactionRequested, "s1", 0, at, events.CompactionRequestedData{TaskID: "T1"}, "field limit_tokens"},
		{"prune result without task", events.PruneCompleted, "s1", 0, at, events.PruneCompletedData{}, "task_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, err := events.New(c.typ, c.session, "T1", c.step, c.when, c.payload)
			if err == nil {
				t.Fatalf("New accepted it: %+v", env)
			}
			if !errors.Is(err, events.ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if !reflect.DeepEqual(env, events.Envelope{}) {
				t.Errorf("New built an envelope with the error: %+v", env)
			}
		})
	}
}

func TestNewEncodeError(t *testing.T) {
	rec := events.IterationRecord{Iteration: 1, ToolCalls: []events.ToolCall{{Name: "run", Args: json.RawMessage(`{"cmd":`)}}}
	env, err := events.New(events.IterationCompleted, "s1", "", 0, at, rec)
	if err == nil || !strings.Contains(err.Error(), "encode iteration.completed payload") {
		t.Fatalf("New with an unencodable payload: %+v, err %v", env, err)
	}
}

func TestNewRefusesAnotherTypesPayload(t *testing.T) {
	_, err := events.New(events.SessionFailed, "s1", "", 0, at, events.SessionEscalatedData{Reason: "r"})
	if !errors.Is(err, events.ErrPayloadType) || !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("err %v, want ErrPayloadType and ErrInvalid", err)
	}
}

func TestMust(t *testing.T) {
	env := events.Must(events.SessionFailed, "s1", "", 2, at, events.SessionFailedData{Reason: "x"})
	if env.ID != "s1/2/session.failed/" {
		t.Errorf("Must = %+v", env)
	}
	defer func() {
		if recover() == nil {
			t.Error("Must with an invalid payload did not panic")
		}
	}()
	events.Must(events.SessionFailed, "s1", "", 2, at, events.SessionFailedData{})
}

func TestMsgID(t *testing.T) {
	id := events.MsgID("s1", 4, events.IterationCompleted, "T1")
	if id != "s1/4/iteration.completed/T1" {
		t.Errorf("MsgID = %q", id)
	}
	if again := events.MsgID("s1", 4, events.IterationCompleted, "T1"); again != id {
		t.Errorf("MsgID not deterministic: %q then %q", id, again)
	}
	// New's id does not depend on the time or the payload, so a redelivered
	// step that publishes again is deduplicated.
	a := events.Must(events.IterationCompleted, "s1", "T1", 4, at, events.IterationRecord{Iteration: 4})
	b := events.Must(events.IterationCompleted, "s1", "T1", 4, at.Add(time.Hour), events.IterationRecord{Iteration: 4, AssistantText: "other"})
	if a.ID != id || b.ID != id {
		t.Errorf("New ids %q %q, want %q", a.ID, b.ID, id)
	}
	distinct := map[string]bool{
		id: true,
		events.MsgID("s2", 4, events.IterationCompleted, "T1"): true,
		events.MsgID("s1", 5, events.IterationCompleted, "T1"): true,
		events.MsgID("s1", 4, events.IterationAnalyzed, "T1"):  true,
		events.MsgID("s1", 4, events.IterationCompleted, "T2"): true,
		events.MsgID("s1", 4, events.IterationCompleted, ""):   true,
	}
	if len(distinct) != 6 {
		t.Errorf("MsgID collides: %v", distinct)
	}
}

func TestValidSession(t *testing.T) {
	for _, ok := range []string{"a", "s1", "A-b_9", strings.Repeat("x", 64)} {
		if err := events.ValidSession(ok); err != nil {
			t.Errorf("ValidSession(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "*", ">", "a*", "a>", "a/b", "é", strings.Repeat("x", 65), "a\n"} {
		err := events.ValidSession(bad)
		if !errors.Is(err, events.ErrInvalid) {
			t.Errorf("ValidSession(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// wire is a valid envelope as a map, for tests to break one field.
func wire() map[string]any {
	return map[string]any{
		"id": "s1/1/task.completed/T1", "type": "task.completed", "schema": 1,
		"session": "s1", "task": "T1", "step": 1, "time": "2025-03-04T05:06:07Z",
		"data": map[string]any{"task_id": "T1"},
	}
}

func encode(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeValid(t *testing.T) {
	env, err := events.Decode(encode(t, wire()))
	if err != nil {
		t.Fatal(err)
	}
	if env.Type != events.TaskCompleted || env.Session != "s1" || env.Step != 1 {
		t.Errorf("Decode = %+v", env)
	}
	var d events.TaskCompletedData
	if err := env.Decode(&d); err != nil || d.TaskID != "T1" {
		t.Errorf("payload %+v, err %v", d, err)
	}
	// Unknown envelope fields are tolerated (a newer writer may add some).
	m := wire()
	m["trace"] = "x"
	if _, err := events.Decode(encode(t, m)); err != nil {
		t.Errorf("extra field: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	with := func(k string, v any) []byte {
		m := wire()
		m[k] = v
		return encode(t, m)
	}
	without := func(k string) []byte {
		m := wire()
		delete(m, k)
		return encode(t, m)
	}
	cases := []struct {
		name string
		raw  []byte
		want string
	}{
		{"not JSON", []byte("hello"), "not JSON"},
		{"empty input", nil, "not JSON"},
		{"truncated", encode(t, wire())[:20], "not JSON"},
		{"JSON array", []byte(`[1,2]`), "not JSON"},
		{"JSON null", []byte(`null`), "id"},
		{"empty object", []byte(`{}`), "id"},
		{"wrong field type", with("step", "one"), "not JSON"},
		{"missing id", without("id"), "field id"},
		{"unknown type", with("type", "task.exploded"), "unknown event type"},
		{"missing type", without("type"), "field type"},
		{"schema 0", with("schema", 0), "field schema"},
		{"schema 2", with("schema", 2), "field schema"},
		{"missing schema", without("schema"), "field schema"},
		{"negative step", with("step", -1), "field step"},
		{"missing session", without("session"), "session id"},
		{"session with dots", with("session", "a.b"), "session id"},
		{"session with space", with("session", "a b"), "session id"},
		{"session wildcard *", with("session", "*"), "session id"},
		{"session wildcard >", with("session", ">"), "session id"},
		{"session containing *", with("session", "s*"), "session id"},
		{"session too long", with("session", strings.Repeat("s", 65)), "session id"},
		{"missing data", without("data"), "field data"},
		{"null data", with("data", nil), "field data"},
		{"bad time", with("time", "yesterday"), "not JSON"},
		// The payload is checked as the type's registered payload.
		{"payload its type refuses", encode(t, map[string]any{
			"id": "s1/1/session.failed/", "type": "session.failed", "schema": 1, "session": "s1", "step": 1,
			"time": "2025-03-04T05:06:07Z", "data": map[string]any{"iterations": 3}}), "session.failed payload: field reason: required"},
		{"payload of the wrong shape", with("data", "text"), "task.completed payload"},
		{"payload field of the wrong type", with("data", map[string]any{"task_id": 7}), "task.completed payload"},
		{"nested payload field invalid", encode(t, map[string]any{
			"id": "s1/1/iteration.analyzed/T1", "type": "iteration.analyzed", "schema": 1, "session": "s1", "step": 1,
			"time": "2025-03-04T05:06:07Z", "data": map[string]any{"iteration": 1,
				"signal": map[string]any{"pattern": "p", "confidence": 0.5, "action": "reboot"}}}), "iteration.analyzed payload: field action"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, err := events.Decode(c.raw)
			if err == nil {
				t.Fatalf("Decode accepted %s: %+v", c.raw, env)
			}
			if !errors.Is(err, events.ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if !reflect.DeepEqual(env, events.Envelope{}) {
				t.Errorf("Decode returned an envelope with the error: %+v", env)
			}
		})
	}
}

func TestEnvelopeDecodeValidatesPayload(t *testing.T) {
	env := func(typ events.Type, data string) events.Envelope {
		return events.Envelope{ID: "x", Type: typ, Schema: 1, Session: "s1", Data: json.RawMessage(data)}
	}
	cases := []struct {
		name string
		env  events.Envelope
		into any
		want string
	}{
		{"iteration 0", env(events.IterationCompleted, `{"iteration":0}`), &events.IterationRecord{}, "iteration"},
		{"iteration missing", env(events.IterationCompleted, `{}`), &events.IterationRecord{}, "iteration"},
		{"tool call without name", env(events.IterationCompleted, `{"iteration":1,"tool_calls":[{"id":"c"}]}`), &events.IterationRecord{}, "tool_calls[0].name"},
		{"signal unknown action", env(events.IterationAnalyzed, `{"iteration":1,"signal":{"pattern":"p","confidence":0.5,"action":"reboot"}}`),
			&events.IterationAnalyzedData{}, "action"},
		{"signal confidence 1.5", env(events.IterationAnalyzed, `{"iteration":1,"signal":{"pattern":"p","confidence":1.5,"action":"nudge"}}`),
			&events.IterationAnalyzedData{}, "confidence"},
		{"signal negative confidence", env(events.IterationAnalyzed, `{"iteration":1,"signal":{"pattern":"p","confidence":-0.1,"action":"nudge"}}`),
			&events.IterationAnalyzedData{}, "confidence"},
		{"signal without pattern", env(events.IterationAnalyzed, `{"iteration":1,"signal":{"confidence":0.5,"action":"nudge"}}`),
			&events.IterationAnalyzedData{}, "pattern"},
		{"bare signal", env(events.PruneRequested, `{"pattern":"p","confidence":1.5,"action":"nudge"}`), &events.Signal{}, "confidence"},
		{"relative workspace", env(events.SessionStarted, `{"workspace":"ws","prd":{"tasks":[{"id":"A","title":"t","acceptance_criteria":["c"]}]}}`),
			&events.SessionStartedData{}, "workspace"},
		{"invalid PRD in session.started", env(events.SessionStarted, `{"workspace":"/ws","prd":{"tasks":[]}}`),
			&events.SessionStartedData{}, "tasks"},
		{"payload of the wrong shape", env(events.IterationCompleted, `"text"`), &events.IterationRecord{}, "iteration.completed payload"},
		{"payload not JSON", env(events.IterationCompleted, `{`), &events.IterationRecord{}, "payload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.env.Decode(c.into)
			if err == nil {
				t.Fatalf("Envelope.Decode accepted %s into %T", c.env.Data, c.into)
			}
			if !errors.Is(err, events.ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}

	// Valid payloads, including a healthy iteration without a signal.
	var a events.IterationAnalyzedData
	if err := env(events.IterationAnalyzed, `{"iteration":2}`).Decode(&a); err != nil || a.Signal != nil || a.Iteration != 2 {
		t.Errorf("healthy analysis: %+v %v", a, err)
	}
	var m map[string]any
	if err := env(events.IterationAnalyzed, `{"x":1}`).Decode(&m); err != nil {
		t.Errorf("decode into a map: %v", err)
	}
}

func TestSubjects(t *testing.T) {
	cases := []struct{ got, want string }{
		{events.Subject("ralph", "web", "s1", events.TaskStarted), "ralph.s.web.s1.task.started"},
		{events.Subject("t1a2", events.DefaultTeam, "sess_9", events.SessionStarted), "t1a2.s.default.sess_9.session.started"},
		{events.SessionFilter("ralph", "web", "s1"), "ralph.s.web.s1.>"},
		{events.SessionFilter("ralph", events.AnyTeam, "s1"), "ralph.s.*.s1.>"},
		{events.LegacySessionFilter("ralph", "s1"), "ralph.s.s1.*.*"},
		{events.TeamFilter("ralph", "web"), "ralph.s.web.>"},
		{events.AllSessions("ralph"), "ralph.s.>"},
		{events.TypeFilter("ralph", events.IterationCompleted), "ralph.s.*.*.iteration.completed"},
		{events.StreamName("ralph"), "RALPH"},
		{events.StreamName("t1a2b3c4"), "T1A2B3C4"},
		{events.StreamName("ralph.dev-eu"), "RALPH_DEV_EU"},
		{events.DeadLetterStream("ralph"), "RALPH_DLQ"},
		{events.DeadLetterStream("a.b-c"), "A_B_C_DLQ"},
		{events.DeadLetterSubject("ralph", "builder"), "ralph.dlq.builder"},
		{events.DeadLetters("ralph"), "ralph.dlq.>"},
		{events.NoticeSubject("ralph", "web", "s1"), "ralph.notice.web.s1"},
		{events.NoticeFilter("ralph", "web", "*"), "ralph.notice.web.*"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// Every subject of a session is matched by its session filter, its
	// team's filter, any team's filter for the session, and its type's
	// filter; never by another session's or team's, nor by the filters of
	// the layout before teams.
	for _, typ := range events.AllTypes {
		subj := events.Subject("p", "web", "s1", typ)
		for _, f := range []string{events.SessionFilter("p", "web", "s1"), events.SessionFilter("p", events.AnyTeam, "s1"),
			events.TeamFilter("p", "web"), events.AllSessions("p"), events.TypeFilter("p", typ)} {
			if !subjectMatches(f, subj) {
				t.Errorf("%s not matched by %s", subj, f)
			}
		}
		for _, f := range []string{events.SessionFilter("p", "web", "s2"), events.SessionFilter("p", "ops", "s1"),
			events.TeamFilter("p", "ops"), events.TeamFilter("p", "s1"), events.LegacySessionFilter("p", "web"), events.LegacySessionFilter("p", "s1")} {
			if subjectMatches(f, subj) {
				t.Errorf("%s matched by %s", subj, f)
			}
		}
		for _, other := range events.AllTypes {
			if other != typ && subjectMatches(events.TypeFilter("p", other), subj) {
				t.Errorf("%s matched by the filter of %s", subj, other)
			}
		}
		// The layout before teams: its legacy filter and the stream's
		// subject match, the filters of the new layout do not.
		legacy := "p.s.s1." + string(typ)
		if !subjectMatches(events.LegacySessionFilter("p", "s1"), legacy) || !subjectMatches(events.AllSessions("p"), legacy) {
			t.Errorf("%s not matched by the legacy filters", legacy)
		}
		if subjectMatches(events.TypeFilter("p", typ), legacy) || subjectMatches(events.SessionFilter("p", events.AnyTeam, "s1"), legacy) {
			t.Errorf("%s matched by a filter of the team layout", legacy)
		}
	}
}

func TestParseSubject(t *testing.T) {
	cases := []struct {
		subject, team, session string
		typ                    events.Type
		ok                     bool
	}{
		{"p.s.web.s1.task.started", "web", "s1", events.TaskStarted, true},
		{"p.s.s1.task.started", events.DefaultTeam, "s1", events.TaskStarted, true},
		// Three tokens are the layout before teams, whatever they say.
		{"p.s.web.s1.task", events.DefaultTeam, "web", "s1.task", true},
		{"p.s.s1.task", "", "", "", false},
		{"p.s.web.s1.a.b.c", "", "", "", false},
		{"q.s.web.s1.task.started", "", "", "", false},
		{"p.dlq.builder", "", "", "", false},
		{"p.s.w*b.s1.task.started", "", "", "", false},
	}
	for _, c := range cases {
		team, session, typ, ok := events.ParseSubject("p", c.subject)
		if team != c.team || session != c.session || typ != c.typ || ok != c.ok {
			t.Errorf("ParseSubject(%q) = %q %q %q %v, want %q %q %q %v", c.subject, team, session, typ, ok, c.team, c.session, c.typ, c.ok)
		}
	}
}

func TestTeam(t *testing.T) {
	for _, ok := range []string{"default", "web", "team_2", "A-b"} {
		if err := events.ValidTeam(ok); err != nil {
			t.Errorf("ValidTeam(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "*", ">", "a b", strings.Repeat("x", 33)} {
		if err := events.ValidTeam(bad); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("ValidTeam(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	env := events.Must(events.SessionResumed, "s1", "", 1, at, events.SessionResumedData{Message: "m"})
	if env.Team != "" || env.TeamOrDefault() != events.DefaultTeam {
		t.Errorf("a new envelope has team %q (%q)", env.Team, env.TeamOrDefault())
	}
	web := env.For("web")
	if web.Team != "web" || web.TeamOrDefault() != "web" || env.Team != "" {
		t.Errorf("For: %q, the original %q", web.Team, env.Team)
	}
	back, err := events.Decode(web.Marshal())
	if err != nil || back.Team != "web" {
		t.Errorf("the team does not survive the wire: %+v %v", back, err)
	}
	if err := env.For("a.b").Validate(); !errors.Is(err, events.ErrInvalid) || !strings.Contains(err.Error(), "field team") {
		t.Errorf("an invalid team validates: %v", err)
	}
	// An envelope of before teams has no team field at all.
	if strings.Contains(string(env.Marshal()), `"team"`) {
		t.Errorf("an envelope without a team writes one: %s", env.Marshal())
	}
}

// subjectMatches is NATS subject matching: '*' one token, '>' the rest.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

func TestValidateChecksThePayload(t *testing.T) {
	env := events.Must(events.SessionFailed, "s1", "", 1, at, events.SessionFailedData{Reason: "budget"})
	env.Data = json.RawMessage(`{"reason":""}`)
	if err := env.Validate(); !errors.Is(err, events.ErrInvalid) || !strings.Contains(err.Error(), "session.failed payload: field reason") {
		t.Fatalf("Validate of an envelope whose payload its type refuses: %v", err)
	}
}

func TestDecodeAs(t *testing.T) {
	env := events.Must(events.CritiqueCompleted, "s1", "T1", 4, at, fullPayloads[events.CritiqueCompleted])
	d, err := events.DecodeAs[events.CritiqueCompletedData](env)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, fullPayloads[events.CritiqueCompleted]) {
		t.Fatalf("DecodeAs = %+v", d)
	}

	// Asking for another type than the registered one is refused, even
	// when the JSON would fit it.
	other, err := events.DecodeAs[events.TaskCompletedData](env)
	if !errors.Is(err, events.ErrPayloadType) || !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("DecodeAs with the wrong type: %+v, %v; want ErrPayloadType and ErrInvalid", other, err)
	}
	if want := "decode critique.completed payload as events.TaskCompletedData: its payload is events.CritiqueCompletedData"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
	if _, err := events.DecodeAs[*events.CritiqueCompletedData](env); !errors.Is(err, events.ErrPayloadType) {
		t.Fatalf("DecodeAs with a pointer type: %v, want ErrPayloadType", err)
	}

	// A payload its type refuses: the error names the type and the field,
	// and no half-decoded value comes back.
	bad := env
	bad.Data = json.RawMessage(`{"attempt":2}`)
	got, err := events.DecodeAs[events.CritiqueCompletedData](bad)
	if !errors.Is(err, events.ErrInvalid) || !strings.Contains(err.Error(), "critique.completed payload: field task_id: required") {
		t.Fatalf("DecodeAs of an invalid payload: %v", err)
	}
	if !reflect.DeepEqual(got, events.CritiqueCompletedData{}) {
		t.Fatalf("DecodeAs returned %+v with its error", got)
	}

	unknown := env
	unknown.Type = "task.exploded"
	if _, err := events.DecodeAs[events.CritiqueCompletedData](unknown); !errors.Is(err, events.ErrInvalid) || !strings.Contains(err.Error(), `unknown event type "task.exploded"`) {
		t.Fatalf("DecodeAs of an unknown type: %v", err)
	}
}
