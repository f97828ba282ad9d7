package stuckdetector

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestCompactionLoop(t *testing.T) {
	const big = "package store\n// ... 4000 lines\n"
	readStore := func(it int, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{text("Reading the store."), hash("h1"), calls(readFile("store.go", big))}, opts...)...)
	}
	readHandler := func(it int, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{text("Reading the handler."), hash("h1"), calls(readFile("handler.go", big))}, opts...)...)
	}
	runTrajectories(t, CompactionLoop{}, []trajectory{
		// Firing.
		{
			name: "compacted twice, re-reading what was summarised away",
			records: []events.IterationRecord{
				readStore(1), readHandler(2),
				readStore(3, wasCompacted(), contextTokens(9800)),
				readHandler(4, wasCompacted(), contextTokens(9900)),
			},
			want: []int{4},
			wantDiag: "compacted in iterations 3-4 with no progress since the first: no files changed, the workspace hash stayed h1, " +
				"2 of 2 calls repeated earlier ones (read_file x2); context at each compaction: 9800, 9900 tokens; " +
				"evidence weak (2 compactions without progress, threshold 2): a nudge first, decompose_task if it goes on",
			wantEvid:     []int{3, 4},
			wantAction:   events.ActionNudge,
			wantConf:     0.88,
			wantStrength: []events.Strength{events.StrengthWeak},
		},
		{
			// The weak signal leaves the evidence in the window: a third
			// compaction with still nothing gained makes it strong.
			name: "a third compaction after the nudge is strong evidence",
			records: []events.IterationRecord{
				readStore(1), readHandler(2),
				readStore(3, wasCompacted(), contextTokens(9800)),
				readHandler(4, wasCompacted(), contextTokens(9900)),
				readStore(5),
				readHandler(6, wasCompacted(), contextTokens(9950)),
			},
			want:         []int{4, 6},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			name: "a cycle of two iterations with the same failing test",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("go test", "--- FAIL: TestTotals", 1)), testRun(11, 1, "TestTotals")),
				readStore(2),
				readStore(3, wasCompacted()),
				rec(4, "T1", calls(runCmd("go test", "--- FAIL: TestTotals", 1)), testRun(11, 1, "TestTotals")),
				readStore(5, wasCompacted()),
			},
			want:     []int{5},
			wantEvid: []int{3, 4, 5},
		},
		{
			name: "compacting while only talking",
			records: []events.IterationRecord{
				readStore(1),
				rec(2, "T1", text("Thinking about the store."), wasCompacted()),
				rec(3, "T1", text("Still thinking."), wasCompacted()),
			},
			want: []int{3},
		},
		{
			name: "repeats from config",
			cfg:  Config{CompactionRepeats: 3},
			records: []events.IterationRecord{
				readStore(1), readStore(2, wasCompacted()), readHandler(3), readHandler(4, wasCompacted()), readStore(5, wasCompacted()),
			},
			want: []int{5},
		},
		// Healthy look-alikes.
		{
			name: "edits between the compactions",
			records: []events.IterationRecord{
				readStore(1), readHandler(2),
				rec(3, "T1", hash("h2"), files("store.go"), wasCompacted(), calls(readFile("store.go", big), editFile("store.go", "a", "b"))),
				readHandler(4, hash("h2")),
				rec(5, "T1", hash("h3"), files("handler.go"), wasCompacted(), calls(readFile("store.go", big), editFile("handler.go", "c", "d"))),
			},
		},
		{
			name: "exploring files not read before",
			records: []events.IterationRecord{
				readStore(1),
				rec(2, "T1", hash("h1"), wasCompacted(), calls(readFile("invoice.go", big))),
				rec(3, "T1", hash("h1"), calls(readFile("tax.go", big))),
				rec(4, "T1", hash("h1"), wasCompacted(), calls(readFile("fx.go", big), readFile("rates.go", big))),
			},
		},
		{
			name: "test results moved between the compactions",
			records: []events.IterationRecord{
				readStore(1),
				rec(2, "T1", wasCompacted(), calls(runCmd("go test", "--- FAIL: TestA", 1)), testRun(10, 2, "TestA", "TestB")),
				rec(3, "T1", wasCompacted(), calls(runCmd("go test", "--- FAIL: TestA", 1)), testRun(11, 1, "TestA")),
			},
		},
		{
			name:    "one compaction is the orchestrator working",
			records: []events.IterationRecord{readStore(1), readHandler(2), readStore(3, wasCompacted()), readHandler(4)},
		},
		{
			name: "a claim between the compactions",
			records: []events.IterationRecord{
				readStore(1), readStore(2, wasCompacted()), rec(3, "T1", text("Done."), claimedDone()), readStore(4, wasCompacted()),
			},
		},
		{
			name: "the compactions belong to different tasks",
			records: []events.IterationRecord{
				readStore(1), readStore(2, wasCompacted()),
				rec(3, "T2", hash("h1"), calls(readFile("store.go", big))), rec(4, "T2", hash("h1"), wasCompacted(), calls(readFile("store.go", big))),
			},
		},
	})
}
