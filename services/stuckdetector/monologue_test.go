package stuckdetector

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestMonologue(t *testing.T) {
	claim := func(it int, s string) events.IterationRecord { return rec(it, "T1", text(s), claimedDone()) }
	work := rec(3, "T1", text("Adding retries."), files("retry.go"), calls(editFile("retry.go", "a", "b")))
	runTrajectories(t, Monologue{}, []trajectory{
		// Firing.
		{
			name: "paraphrased claims to a critic that keeps rejecting",
			records: []events.IterationRecord{
				work,
				claim(4, "I added retries with exponential backoff to the HTTP client in retry.go, and the client tests pass."),
				claim(5, "The HTTP client now retries failed requests with exponential backoff, implemented in retry.go; the client tests pass."),
				claim(6, "Retries with exponential backoff are implemented for the HTTP client in retry.go and the client tests pass, so the task is done."),
			},
			want: []int{6},
			wantDiag: `iterations 4-6 made no tool calls (3 completion claims in a row) and restated earlier text, at most 27% of their words new: ` +
				`"Retries with exponential backoff are implemented for the HTTP client in retry.go and the client test..."; ` +
				`evidence weak (3 turns without tool calls, threshold 3)`,
			wantEvid:     []int{4, 5, 6},
			wantAction:   events.ActionNudge,
			wantConf:     0.85,
			wantStrength: []events.Strength{events.StrengthWeak},
		},
		{
			name: "a fourth restatement after the nudge is strong evidence",
			records: []events.IterationRecord{
				work,
				claim(4, "I added retries with exponential backoff to the HTTP client in retry.go, and the client tests pass."),
				claim(5, "The HTTP client now retries failed requests with exponential backoff, implemented in retry.go; the client tests pass."),
				claim(6, "Retries with exponential backoff are implemented for the HTTP client in retry.go and the client tests pass, so the task is done."),
				claim(7, "As said, the HTTP client retries with exponential backoff (retry.go) and the client tests pass."),
			},
			want:         []int{6, 7},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			// Hand-written records leave claimed_done out; no tool calls is
			// what makes a claim.
			name: "without the claimed_done flag",
			records: []events.IterationRecord{
				rec(1, "T1", text("The endpoint returns 404 for unknown orders.")),
				rec(2, "T1", text("For unknown orders the endpoint returns 404.")),
				rec(3, "T1", text("Unknown orders: the endpoint returns 404, as said.")),
			},
			want: []int{3},
		},
		{
			name: "the first claim may be a genuine summary",
			records: []events.IterationRecord{
				rec(1, "T1", text("Reading."), calls(readFile("a.go", "A"))),
				claim(2, "Pagination plan: limit and cursor parameters, keyset condition on id, next_cursor in the body."),
				claim(3, "As planned: limit and cursor parameters, a keyset condition on id, and next_cursor in the body."),
				claim(4, "The plan stays: limit and cursor parameters with a keyset condition on id; next_cursor in the body."),
			},
			want:     []int{4},
			wantEvid: []int{2, 3, 4},
		},
		{
			name: "turns from config",
			cfg:  Config{MonologueTurns: 2},
			records: []events.IterationRecord{
				claim(1, "The migration is written and the store tests pass."),
				claim(2, "The store tests pass and the migration is written."),
			},
			want: []int{2},
		},
		// Healthy look-alikes.
		{
			name: "two claims, then work",
			records: []events.IterationRecord{
				claim(1, "Retries are in retry.go and the client tests pass."),
				claim(2, "Retries are implemented in retry.go; the client tests pass."),
				rec(3, "T1", text("Adding the retry cap."), files("retry.go"), calls(editFile("retry.go", "x", "y"))),
				claim(4, "Retries stop after five attempts; tests pass."),
			},
		},
		{
			name: "a writing task: each revision adds substance",
			records: []events.IterationRecord{
				claim(1, "Summary: the orders API slowed down because the connection pool was exhausted; a rollback fixed it."),
				claim(2, "Revised: at 10:02 p99 latency reached four seconds; release 2.14 held transactions open across HTTP retries, exhausting Postgres connections."),
				claim(3, "Impact and follow-ups: eighteen minutes of degraded checkout. Cap client retries, alert on pool saturation, forbid network calls inside transactions."),
			},
		},
		{
			name: "a tool call in between breaks the run",
			records: []events.IterationRecord{
				claim(1, "The export writes the currency column."),
				rec(2, "T1", text("Checking."), calls(runCmd("pytest -q", "14 passed", 0))),
				claim(3, "The export writes the currency column; tests pass."),
				claim(4, "The currency column is written by the export."),
			},
		},
		{
			name:    "a window of one holds no monologue",
			cfg:     Config{Window: 1},
			records: []events.IterationRecord{claim(1, "Done."), claim(2, "Done."), claim(3, "Done.")},
		},
		{
			name: "a turn without text is not talk",
			records: []events.IterationRecord{
				claim(1, "The export writes the currency column."),
				rec(2, "T1", claimedDone()),
				claim(3, "The export writes the currency column."),
			},
		},
	})
}

func TestContentWords(t *testing.T) {
	got := contentWords("I've implemented the retry; it's in retry.go, with 3 attempts and the backoff.")
	for _, w := range []string{"implemented", "retry", "attempts", "backoff"} {
		if !got[w] {
			t.Errorf("contentWords lacks %q: %v", w, got)
		}
	}
	for _, w := range []string{"the", "with", "and", "ve", "it", "0", "go"} {
		if got[w] {
			t.Errorf("contentWords keeps %q: %v", w, got)
		}
	}
}
