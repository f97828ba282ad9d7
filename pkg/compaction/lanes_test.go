package compaction

import (
	"os"
	"testing"

	"github.com/ralphmesh/ralph/pkg/units"
)

func loadDoc(t *testing.T, path string) Document {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := DecodeDocument(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

// TestClassifyBuilderContext checks the lanes of a realistic builder
// context: the release-notes task after a reviewer's rejection.
func TestClassifyBuilderContext(t *testing.T) {
	lanes := Classify(loadDoc(t, "testdata/release_notes.json"))
	want := map[string]Lane{
		"system-T3":   LaneInstruction, // system prompt
		"task-T3":     LaneInstruction, // the task and its acceptance criteria
		"critique-52": LaneInstruction, // the latest critic instruction
		// The draft being written and its latest edit, with their results.
		"assistant-49#call_49a": LaneActiveWrite,
		"tool-49-0":             LaneActiveWrite,
		"assistant-54#call_54a": LaneActiveWrite,
		"tool-54-0":             LaneActiveWrite,
		// The latest read of the path being written.
		"assistant-53#call_53a": LaneActiveWrite,
		"tool-53-0":             LaneActiveWrite,
		// The draft copies the changelog's phrases and cites the migration guide.
		"tool-44-0":             LaneSourceEvidence,
		"assistant-44#call_44a": LaneSourceEvidence,
		"tool-48-0":             LaneSourceEvidence,
		// Reads and commands the draft does not depend on.
		"tool-44-1": LaneToolTrace,
		"tool-45-0": LaneToolTrace,
		"tool-46-0": LaneToolTrace,
		"tool-47-0": LaneToolTrace,
		"tool-50-0": LaneToolTrace, // ran after the draft was written
		// Narrative and the earlier checkpoint.
		"assistant-44":  LaneHistoricalChat,
		"assistant-51":  LaneHistoricalChat,
		"checkpoint-T3": LaneHistoricalChat,
	}
	for id, l := range want {
		if lanes[id] != l {
			t.Errorf("lane of %s = %q, want %q", id, lanes[id], l)
		}
	}
	if len(lanes) != 34 {
		t.Errorf("%d units classified, want all 34 of the planner view", len(lanes))
	}
}

func TestClassifyRules(t *testing.T) {
	draft := "# Notes\nThe loader now reads RALPH_NATS_URL and RALPH_REDIS_URL from the environment, see config/load.go."
	tests := []struct {
		name string
		doc  Document
		want map[string]Lane
	}{
		{
			name: "superseded write is a trace, edits after the last whole write are active",
			doc: newDoc(8000, 10, "write notes").
				tool("w1", 2, "write_file", writeArgs("notes.md", "v1"), 20, 5, "wrote").
				tool("w2", 4, "write_file", writeArgs("notes.md", "v2"), 20, 5, "wrote").
				tool("e1", 5, "edit_file", `{"path":"notes.md","old":"v2","new":"v3"}`, 20, 5, "edited").
				build(),
			want: map[string]Lane{"w1": LaneToolTrace, "c-w1": LaneToolTrace, "w2": LaneActiveWrite, "c-w2": LaneActiveWrite, "e1": LaneActiveWrite},
		},
		{
			name: "only the latest read of a written path is active",
			doc: newDoc(8000, 10, "write notes").
				tool("r1", 1, "read_file", pathArgs("notes.md"), 10, 50, "old notes").
				tool("r2", 3, "read_file", pathArgs("notes.md"), 10, 50, "old notes").
				tool("w", 4, "write_file", writeArgs("notes.md", draft), 40, 5, "wrote").
				build(),
			want: map[string]Lane{"r1": LaneToolTrace, "r2": LaneActiveWrite, "c-r2": LaneActiveWrite},
		},
		{
			name: "a read the draft cites is evidence, an unrelated one a trace, a later one a trace",
			doc: newDoc(8000, 10, "write notes").
				tool("src", 1, "read_file", pathArgs("config/load.go"), 10, 300, "package config\nfunc Load() {}").
				tool("other", 2, "run", runArgs("go vet ./..."), 10, 300, "ok").
				tool("w", 4, "write_file", writeArgs("notes.md", draft), 40, 5, "wrote").
				tool("after", 5, "read_file", pathArgs("config/load.go"), 10, 300, "package config").
				build(),
			want: map[string]Lane{"src": LaneSourceEvidence, "c-src": LaneSourceEvidence, "other": LaneToolTrace, "after": LaneToolTrace},
		},
		{
			name: "the latest user message is the instruction, older ones are history",
			doc: newDoc(8000, 10, "fix the build").
				msg("nudge-3", "user", 3, 40, "You appear to be stuck.").
				msg("assistant-4", "assistant", 4, 40, "Trying another way.").
				msg("critique-5", "user", 5, 40, "The reviewer did not accept task T1.").
				build(),
			want: map[string]Lane{"system": LaneInstruction, "task": LaneInstruction, "nudge-3": LaneHistoricalChat,
				"assistant-4": LaneHistoricalChat, "critique-5": LaneInstruction},
		},
		{
			name: "a result whose call is gone is classified on its own",
			doc: newDoc(8000, 10, "fix the build").
				add(units.Unit{ID: "orphan", Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: "gone", Content: "ok", Turn: 2, Tokens: 10}).
				build(),
			want: map[string]Lane{"orphan": LaneToolTrace},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lanes := Classify(tt.doc)
			for id, l := range tt.want {
				if lanes[id] != l {
					t.Errorf("lane of %s = %q, want %q (all: %v)", id, lanes[id], l, lanes)
				}
			}
		})
	}
}

func TestDetectPhase(t *testing.T) {
	write := func(turn int) func(*docBuilder) {
		return func(b *docBuilder) { b.tool("w", turn, "write_file", writeArgs("notes.md", "x"), 10, 5, "wrote") }
	}
	tests := []struct {
		name   string
		goal   string
		phase  Phase
		turn   int
		setup  []func(*docBuilder)
		expect Phase
	}{
		{"no writes: exploring", "fix the build", "", 10, nil, PhaseExploring},
		{"stated drafting is kept", "fix the build", PhaseDrafting, 10, nil, PhaseDrafting},
		{"stated finalizing is kept", "fix the build", PhaseFinalizing, 10, nil, PhaseFinalizing},
		{"recent write overrides a stated exploring", "fix the build", PhaseExploring, 10, []func(*docBuilder){write(9)}, PhaseDrafting},
		{"recent write with no stated phase", "fix the build", "", 10, []func(*docBuilder){write(8)}, PhaseDrafting},
		{"old write, goal is not writing", "fix the build", "", 10, []func(*docBuilder){write(2)}, PhaseExploring},
		{"old write, goal is writing", "Write the release notes", "", 10, []func(*docBuilder){write(2)}, PhaseDrafting},
		{"write then review feedback", "fix the build", "", 10, []func(*docBuilder){write(2), func(b *docBuilder) {
			b.msg("critique-6", "user", 6, 40, "The reviewer did not accept task T1 (attempt 1).")
		}}, PhaseFinalizing},
		{"goal says finalize", "Finalize the migration guide", "", 10, []func(*docBuilder){write(9)}, PhaseFinalizing},
		{"review feedback without any write", "fix the build", "", 10, []func(*docBuilder){func(b *docBuilder) {
			b.msg("critique-6", "user", 6, 40, "The reviewer did not accept task T1.")
		}}, PhaseExploring},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newDoc(8000, tt.turn, tt.goal)
			b.doc.Task.Phase = tt.phase
			for _, f := range tt.setup {
				f(b)
			}
			if got := DetectPhase(b.build()); got != tt.expect {
				t.Errorf("DetectPhase = %q, want %q", got, tt.expect)
			}
		})
	}
	if got := DetectPhase(loadDoc(t, "testdata/release_notes.json")); got != PhaseFinalizing {
		t.Errorf("release notes after a rejection: phase %q, want finalizing", got)
	}
}

// TestClassifyReferencedSources: while drafting, the results the goal or
// the latest assistant message names (path, file name, a directory of the
// path) or refers to (their distinctive words) are source evidence before
// any draft has used them.
func TestClassifyReferencedSources(t *testing.T) {
	read := func(b *docBuilder, id string, turn int, path, content string) *docBuilder {
		return b.tool(id, turn, "read_file", pathArgs(path), 10, 400, content)
	}
	// The example: documenting every endpoint of internal/http/,
	// the /orders section written, /users next.
	api := func(phase Phase, lastMessage string) Document {
		b := newDoc(8000, 10, "document every endpoint in internal/http/ in docs/API.md")
		read(b, "users", 2, "internal/http/users.go", "package http\n\nfunc (s *Server) listUsers(w http.ResponseWriter, r *http.Request) {}")
		read(b, "orders", 3, "internal/http/orders.go", "package http\n\nfunc (s *Server) listOrders(w http.ResponseWriter, r *http.Request) {}")
		read(b, "readme", 4, "README.md", "# Shop\n\nRun it with make run.")
		b.tool("test", 5, "run", runArgs("go test ./..."), 10, 300, "ok  \tshop/internal/http\t0.1s")
		if phase != PhaseExploring {
			b.tool("api", 8, "write_file", writeArgs("docs/API.md", "# API\n\n## /orders\n\nLists the orders."), 40, 5, "wrote")
		}
		b.msg("assistant-9", "assistant", 9, 20, lastMessage)
		return b.build()
	}
	// Speaker sources where every file shares the event's name.
	speakers := func(lastMessage string) Document {
		b := newDoc(8000, 10, "Write the speaker profiles for Northwind Summit")
		read(b, "ana", 2, "sources/ana.md", "# Ana Ferreira\n\nInterviewed for Northwind Summit. Ana builds payment systems.")
		read(b, "mateo", 3, "sources/mateo.md", "# Mateo Álvarez\n\nInterviewed for Northwind Summit. Mateo writes compilers.")
		read(b, "lin", 4, "sources/lin.md", "# Lin Zhao\n\nInterviewed for Northwind Summit. Lin runs site reliability.")
		b.tool("p1", 6, "write_file", writeArgs("profiles/p1.md", "# Ana Ferreira\n\nAna builds payment systems."), 40, 5, "wrote")
		b.msg("assistant-9", "assistant", 9, 20, lastMessage)
		return b.build()
	}
	tests := []struct {
		name string
		doc  Document
		want map[string]Lane
	}{
		{
			name: "the goal names the directory, the last message the file",
			doc:  api(PhaseDrafting, "Next, the /users section from internal/http/users.go."),
			want: map[string]Lane{"users": LaneSourceEvidence, "c-users": LaneSourceEvidence, "orders": LaneSourceEvidence,
				"readme": LaneToolTrace, "test": LaneToolTrace},
		},
		{
			name: "the last message names a file by its name",
			doc:  api(PhaseDrafting, "Now README.md's run instructions."),
			want: map[string]Lane{"readme": LaneSourceEvidence, "test": LaneToolTrace},
		},
		{
			name: "the last message refers to a result's content",
			doc:  speakers("Next: Mateo Álvarez's profile."),
			want: map[string]Lane{"mateo": LaneSourceEvidence, "lin": LaneToolTrace},
		},
		{
			name: "words every source shares refer to none of them",
			doc:  speakers("Back to the Northwind Summit profiles."),
			want: map[string]Lane{"mateo": LaneToolTrace, "lin": LaneToolTrace},
		},
		{
			name: "a file under a directory names no other file in it",
			doc:  speakers("Rereading sources/lin.md for the quote."),
			want: map[string]Lane{"lin": LaneSourceEvidence, "mateo": LaneToolTrace},
		},
		{
			name: "only while drafting",
			doc:  api(PhaseExploring, "Next, the /users section from internal/http/users.go."),
			want: map[string]Lane{"users": LaneToolTrace, "orders": LaneToolTrace},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lanes := Classify(tt.doc)
			for id, l := range tt.want {
				if lanes[id] != l {
					t.Errorf("lane of %s = %q, want %q (phase %s)", id, lanes[id], l, DetectPhase(tt.doc))
				}
			}
		})
	}
	// What that buys: at pressure, the reads about to be documented stay
	// raw while the trace gives way.
	doc := api(PhaseDrafting, "Next, the /users section from internal/http/users.go.")
	doc.LimitTokens = 2400
	r := mustPlan(t, doc, opts(func(o *Options) { o.Mode = ModeTiered }), History{})
	if s, ok := skipOf(r, "users"); r.Tier != TierPressure || !ok || s.Reason != SkipProtectedLane {
		t.Errorf("tier %s, users %+v: want protected_lane", r.Tier, s)
	}
	if opIndex(r, "test") < 0 {
		t.Errorf("the trace is not compacted: %+v", r.Ops)
	}
}

func TestStableHead(t *testing.T) {
	sys := units.Unit{ID: "system", Role: "system", Kind: units.KindMessage}
	task := units.Unit{ID: "task", Role: "user", Kind: units.KindMessage}
	memory := units.Unit{ID: "memory", Role: "user", Kind: units.KindMessage}
	assistant := units.Unit{ID: "assistant-1", Role: "assistant", Kind: units.KindMessage, Turn: 1}
	nudge := units.Unit{ID: "nudge-3", Role: "user", Kind: units.KindMessage, Turn: 3}
	checkpoint := unitSummary("checkpoint-T1", 4, 100)
	tests := []struct {
		name string
		us   []units.Unit
		want int
	}{
		{"empty", nil, 0},
		{"system prompt and task", []units.Unit{sys, task, assistant}, 2},
		{"with a memory message before the first step", []units.Unit{sys, task, memory, assistant}, 3},
		{"a later user message is not head", []units.Unit{sys, task, nudge, assistant}, 2},
		{"the checkpoint is not head", []units.Unit{sys, task, checkpoint, assistant}, 2},
		{"nothing before a step", []units.Unit{assistant, sys}, 0},
	}
	for _, tt := range tests {
		if got := StableHead(tt.us); got != tt.want {
			t.Errorf("%s: StableHead = %d, want %d", tt.name, got, tt.want)
		}
	}
}
