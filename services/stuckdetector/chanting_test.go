package stuckdetector

import (
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestChanting(t *testing.T) {
	const line = "I need to make sure the refund never exceeds the captured amount."
	const closing = "I will keep verifying every assumption carefully before making any change."
	look := func(it int, say string, path string, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{text(say), calls(readFile(path, path))}, opts...)...)
	}
	runTrajectories(t, Chanting{}, []trajectory{
		// Firing.
		{
			name:       "one sentence over and over in one response",
			records:    []events.IterationRecord{look(7, "Checking the limit. "+line+" "+line+" "+line, "refund.go")},
			want:       []int{7},
			wantDiag:   `iteration 7 repeats "I need to make sure the refund never exceeds the captured amount." 3 times in one response`,
			wantEvid:   []int{7},
			wantAction: events.ActionPrune,
			wantConf:   0.9,
		},
		{
			name: "a cycle of sentences",
			records: []events.IterationRecord{look(2, strings.Repeat(
				"The test expects a 201 status for a valid refund. The handler returns 404 because the route is missing.\n", 3), "routes.go")},
			want:     []int{2},
			wantDiag: `iteration 2 repeats "The test expects a 201 status for a valid refund." 3 times in one response`,
		},
		{
			name: "the same closing chunk on responses that otherwise differ",
			records: []events.IterationRecord{
				look(4, "The expiry check fails. "+closing, "token.go", hash("h1")),
				look(5, "The token uses the wall clock. "+closing, "token_test.go", hash("h1")),
				look(6, "The test pins the time to 2025. "+closing, "clock.go", hash("h1")),
			},
			want:       []int{6},
			wantDiag:   `iterations 4-6 each end with "I will keep verifying every assumption carefully before making any change." while the workspace stays the same`,
			wantEvid:   []int{4, 5, 6},
			wantAction: events.ActionPrune,
			wantConf:   0.8,
		},
		{
			name:    "repeats and words from config",
			cfg:     Config{ChantRepeats: 2, ChantMinWords: 3},
			records: []events.IterationRecord{look(1, "Still failing here. Still failing here.", "a.go")},
			want:    []int{1},
		},
		// Healthy look-alikes.
		{
			name: "a template: the same sentence under different headings",
			records: []events.IterationRecord{look(1, "## billing\nThe old client is only an indirect dependency here.\n"+
				"## shipping\nThe old client is only an indirect dependency here.\n## search\nThe old client is only an indirect dependency here.", "go.mod")},
		},
		{
			name: "code, indented logs and quotes repeat lines legitimately",
			records: []events.IterationRecord{look(1, "The plan:\n```go\nif err != nil { return fmt.Errorf(\"begin refund transaction: %w\", err) }\n"+
				"if err != nil { return fmt.Errorf(\"begin refund transaction: %w\", err) }\nif err != nil { return fmt.Errorf(\"begin refund transaction: %w\", err) }\n```\n"+
				strings.Repeat("    retrying connection to postgres at localhost in two seconds\n", 3)+
				strings.Repeat("> retrying connection to postgres at localhost in two seconds\n", 3)+"So the database never came up.", "main_test.go")},
		},
		{
			name: "an enumeration is not a chant",
			records: []events.IterationRecord{look(1, "Case 1: a refund of the full captured amount must succeed.\n"+
				"Case 2: a refund of the full captured amount must succeed.\nCase 3: a refund of the full captured amount must succeed.", "refund_test.go")},
		},
		{
			name:    "short stock phrases are narration",
			records: []events.IterationRecord{look(1, "Running the tests. Running the tests. Running the tests.", "a.go")},
		},
		{
			name:    "twice is not a chant",
			records: []events.IterationRecord{look(1, line+" "+line, "a.go")},
		},
		{
			name: "a closing chunk while editing files is a verbal tic",
			records: []events.IterationRecord{
				rec(1, "T1", text("Renaming in the handler. "+closing), files("a.go"), calls(editFile("a.go", "Order(", "GetOrder("))),
				rec(2, "T1", text("Renaming in the list. "+closing), files("b.go"), calls(editFile("b.go", "Orders(", "ListOrders("))),
				rec(3, "T1", text("Renaming in the store. "+closing), files("c.go"), calls(editFile("c.go", "Order(", "GetOrder("))),
			},
		},
		{
			name: "the same whole response over different reads is a stock sentence",
			records: []events.IterationRecord{
				look(1, "Let me read the next file that handles the refund request end to end.", "a.go"),
				look(2, "Let me read the next file that handles the refund request end to end.", "b.go"),
				look(3, "Let me read the next file that handles the refund request end to end.", "c.go"),
			},
		},
		{
			name: "the chunk closes only some responses",
			records: []events.IterationRecord{
				look(1, "The expiry check fails. "+closing, "a.go"),
				look(2, closing+" The token uses the wall clock.", "b.go"),
				look(3, "The test pins the time. "+closing, "c.go"),
			},
		},
	})
}

func TestTextChunks(t *testing.T) {
	got := keysOf(textChunks("Read pkg/a.go and v1.2 first. Then test!\n```\nx. y.\n```\n\tindented. line\n> quoted. line\nLast one?"))
	want := []string{"read pkg a go and v1 2 first", "then test", "last one"}
	if !slices.Equal(got, want) {
		t.Errorf("textChunks = %q, want %q", got, want)
	}
}
