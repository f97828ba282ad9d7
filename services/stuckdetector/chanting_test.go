package stuckdetector

import (
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestChanting(t *testing.T) {
	const line = "I need to make sure the refund never exceeds the captured amount."
	const closing = "I will keep verifying every assumption carefully before making any change."
	// A passage of about 150 characters with no full stop in it: the
	// sentence rule of old never saw where one repeat ends.
	const passage = "checking whether the refund amount can exceed the captured amount when the order was partially captured and then partially refunded by support "
	look := func(it int, say string, path string, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{text(say), calls(readFile(path, path))}, opts...)...)
	}
	runTrajectories(t, Chanting{}, []trajectory{
		// Firing.
		{
			name:    "one sentence three times in one response is weak evidence",
			records: []events.IterationRecord{look(7, "Checking the limit. "+line+" "+line+" "+line, "refund.go")},
			want:    []int{7},
			wantDiag: `iteration 7 repeats "I need to make sure the refund never exceeds the captured amount." 3 times back to back in one response; ` +
				`evidence weak (3 repeats, threshold 3): a nudge first, prune_context if it goes on`,
			wantEvid:     []int{7},
			wantAction:   events.ActionNudge,
			wantConf:     0.9,
			wantStrength: []events.Strength{events.StrengthWeak},
		},
		{
			name:         "Thinking... Done. thirty times is strong evidence",
			records:      []events.IterationRecord{look(3, strings.Repeat("Thinking... Done. ", 30), "a.go")},
			want:         []int{3},
			wantDiag:     `iteration 3 repeats "Thinking... Done." 30 times back to back in one response; evidence strong (30 repeats, threshold 3)`,
			wantAction:   events.ActionPrune,
			wantStrength: []events.Strength{events.StrengthStrong},
		},
		{
			name:     "a five-word thought repeated",
			records:  []events.IterationRecord{look(2, "Let me think about this.\nLet me think about this.\nLet me think about this.\nLet me think about this.", "a.go")},
			want:     []int{2},
			wantDiag: `iteration 2 repeats "Let me think about this." 4 times back to back in one response; evidence strong (4 repeats, threshold 3)`,
		},
		{
			name:    "a long passage without a sentence break repeated",
			records: []events.IterationRecord{look(4, "Still "+strings.Repeat(passage, 3)+"and nothing else", "refund.go")},
			want:    []int{4},
			wantDiag: `iteration 4 repeats "checking whether the refund amount can exceed the captured amount when the order was partially captu..." 3 times back to back in one response; ` +
				`evidence weak (3 repeats, threshold 3): a nudge first, prune_context if it goes on`,
		},
		{
			name: "a cycle of sentences is one chunk",
			records: []events.IterationRecord{look(2, "Looking at the failure. "+strings.Repeat(
				"The test expects a 201 status for a valid refund. The handler returns 404 because the route is missing.\n", 3), "routes.go")},
			want: []int{2},
			wantDiag: `iteration 2 repeats "The test expects a 201 status for a valid refund. The handler returns 404 because the route is missi..." 3 times back to back in one response; ` +
				`evidence weak (3 repeats, threshold 3): a nudge first, prune_context if it goes on`,
		},
		{
			name: "the same closing passage on responses that otherwise differ",
			records: []events.IterationRecord{
				look(4, "The expiry check fails. "+closing, "token.go", hash("h1")),
				look(5, "The token uses the wall clock. "+closing, "token_test.go", hash("h1")),
				look(6, "The test pins the time to 2025. "+closing, "clock.go", hash("h1")),
			},
			want: []int{6},
			wantDiag: `iterations 4-6 each end with "I will keep verifying every assumption carefully before making any change." while the workspace stays the same; ` +
				`evidence weak (3 responses, threshold 3): a nudge first, prune_context if it goes on`,
			wantEvid:     []int{4, 5, 6},
			wantAction:   events.ActionNudge,
			wantConf:     0.8,
			wantStrength: []events.Strength{events.StrengthWeak},
		},
		{
			// The nudge after the weak signal changed nothing: the window
			// kept the evidence, and the fourth response makes it strong.
			name: "the closing passage goes on after the weak signal",
			records: []events.IterationRecord{
				look(4, "The expiry check fails. "+closing, "token.go", hash("h1")),
				look(5, "The token uses the wall clock. "+closing, "token_test.go", hash("h1")),
				look(6, "The test pins the time to 2025. "+closing, "clock.go", hash("h1")),
				look(7, "Noted the nudge. "+closing, "token.go", hash("h1")),
			},
			want:         []int{6, 7},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			name:    "repeats and chunk length from config",
			cfg:     Config{ChantRepeats: 2, ChantMinChars: 8},
			records: []events.IterationRecord{look(1, "Still failing. Still failing.", "a.go")},
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
			name: "a list whose items share a prefix",
			records: []events.IterationRecord{look(1, "Next steps:\n- Add the currency column to the export of orders\n"+
				"- Add the currency column to the export of refunds\n- Add the currency column to the export of invoices\n"+
				"- Add the currency column to the export of payouts", "export.py")},
		},
		{
			name: "a markdown table with dividers and repeated cells",
			records: []events.IterationRecord{look(1, "Status of the migration:\n\n| service | status | owner |\n|---|---|---|\n"+
				"| billing | not started yet | payments team |\n| shipping | not started yet | payments team |\n"+
				"| search | not started yet | payments team |\n|---|---|---|\n| total | 3 | |\n\n---\n\n===", "go.mod")},
		},
		{
			name: "the same sentence far apart in a long answer",
			records: []events.IterationRecord{look(1, line+" The handler reads the amount from the request body and passes it to the service. "+
				line+" The service loads the order and its captures from the store before it writes anything. "+line, "refund.go")},
		},
		{
			name:    "short repeats are ordinary text",
			records: []events.IterationRecord{look(1, "Ha ha ha ha ha. No, no, no, no. Done. Done. Done.", "a.go")},
		},
		{
			name:    "twice is not a chant",
			records: []events.IterationRecord{look(1, line+" "+line, "a.go")},
		},
		{
			name: "a closing passage while editing files is a verbal tic",
			records: []events.IterationRecord{
				rec(1, "T1", text("Renaming in the handler. "+closing), files("a.go"), calls(editFile("a.go", "Order(", "GetOrder("))),
				rec(2, "T1", text("Renaming in the list. "+closing), files("b.go"), calls(editFile("b.go", "Orders(", "ListOrders("))),
				rec(3, "T1", text("Renaming in the store. "+closing), files("c.go"), calls(editFile("c.go", "Order(", "GetOrder("))),
			},
		},
		{
			name: "a short stock closing over exploration is narration",
			records: []events.IterationRecord{
				look(1, "The store has the query. Let me look at the next file.", "a.go"),
				look(2, "The handler maps the errors. Let me look at the next file.", "b.go"),
				look(3, "The routes register the handler. Let me look at the next file.", "c.go"),
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
			name: "the passage closes only some responses",
			records: []events.IterationRecord{
				look(1, "The expiry check fails. "+closing, "a.go"),
				look(2, closing+" The token uses the wall clock.", "b.go"),
				look(3, "The test pins the time. "+closing, "c.go"),
			},
		},
		{
			name: "shared closing words that start inside different words",
			records: []events.IterationRecord{
				look(1, "It was then decided that every refund needs the approval of an administrator", "a.go"),
				look(2, "It was later concluded that every refund needs the approval of an administrator", "b.go"),
				look(3, "What I have excluded that every refund needs the approval of an administrator", "c.go"),
			},
			want: []int{3},
			wantDiag: `iterations 1-3 each end with "that every refund needs the approval of an administrator" while the workspace stays the same; ` +
				`evidence weak (3 responses, threshold 3): a nudge first, prune_context if it goes on`,
		},
	})
}

func TestBackToBack(t *testing.T) {
	tests := []struct {
		name      string
		text      string
		minChunk  int
		wantChunk string
		wantTimes int
	}{
		{"a chunk three times", "x abc def. abc def. abc def. y", 8, "abc def.", 3},
		{"the most repeats win", "Done thinking. Done thinking. aaaa bbbb cccc dddd aaaa bbbb cccc dddd Done thinking. Done thinking. Done thinking.", 8, "Done thinking.", 3},
		{"rotated to start at a word", "Now. Go on. Go on. Go on. Go on.", 4, "Go on.", 4},
		{"unicode text", "ça ne va pas. ça ne va pas. ça ne va pas.", 8, "ça ne va pas.", 3},
		{"chunk shorter than the minimum", "ab ab ab ab ab ab", 4, "", 0},
		{"no letters", "-- -- -- -- -- -- -- --", 2, "", 0},
		{"not back to back", "abc def. x abc def. y abc def.", 8, "", 0},
		{"empty", "", 8, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := backToBack(tc.text+" ", tc.minChunk, 3)
			if tc.wantTimes == 0 {
				if ok {
					t.Errorf("backToBack = %+v, want none", got)
				}
				return
			}
			if !ok || got.chunk != tc.wantChunk || got.times != tc.wantTimes {
				t.Errorf("backToBack = %+v, %v; want %q %d times", got, ok, tc.wantChunk, tc.wantTimes)
			}
		})
	}
}

func TestProse(t *testing.T) {
	got := prose("Read pkg/a.go first.  Then test!\n```\nx. y.\n```\n\tindented line\n> quoted line\n| a | b |\n|---|---|\n----\n\nLast one?")
	if want := "Read pkg/a.go first. Then test! Last one?"; got != want {
		t.Errorf("prose = %q, want %q", got, want)
	}
}
