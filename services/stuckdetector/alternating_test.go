package stuckdetector

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestAlternating(t *testing.T) {
	up := func(it int, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{text("Raising the timeout."), files("config.go"),
			calls(editFile("config.go", "30", "60"), runCmd("go test", "--- FAIL: TestProxy", 1))}, opts...)...)
	}
	down := func(it int, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{text("Lowering it again."), files("config.go"),
			calls(editFile("config.go", "60", "30"), runCmd("go test", "--- FAIL: TestDefaults", 1))}, opts...)...)
	}
	readA := func(it int, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{calls(readFile("a.go", "A"))}, opts...)...)
	}
	readB := func(it int, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{calls(readFile("b.go", "B"))}, opts...)...)
	}
	poll := func(it int, job, status string) events.IterationRecord {
		return rec(it, "T1", calls(runCmd("gh run view --job "+job, status, 0)))
	}
	runTrajectories(t, Alternating{}, []trajectory{
		// Firing.
		{
			name: "edit and revert with the workspace flipping",
			records: []events.IterationRecord{
				up(3, hash("sha256:aaaaaaaaaaaaaaaa")), down(4, hash("sha256:bbbbbbbbbbbbbbbb")),
				up(5, hash("sha256:aaaaaaaaaaaaaaaa")), down(6, hash("sha256:bbbbbbbbbbbbbbbb")),
			},
			want: []int{6},
			wantDiag: `iterations 3-6 ping-pong between A (edit_file {"new":"60","old":"30","path":"config.go"}, run {"command":"go test"}) ` +
				`and B (edit_file {"new":"30","old":"60","path":"config.go"}, run {"command":"go test"}); the workspace flips between aaaaaaaaaaaa and bbbbbbbbbbbb; evidence weak (4 steps of ping-pong, threshold 4)`,
			wantEvid:   []int{3, 4, 5, 6},
			wantAction: events.ActionNudge,
			wantConf:   0.85,
		},
		{
			name:       "two reads in turn, nothing changing",
			records:    []events.IterationRecord{readA(1), readB(2), readA(3), readB(4)},
			want:       []int{4},
			wantDiag:   `iterations 1-4 ping-pong between A (read_file {"path":"a.go"}) and B (read_file {"path":"b.go"}) with the same results each time; evidence weak (4 steps of ping-pong, threshold 4)`,
			wantEvid:   []int{1, 2, 3, 4},
			wantAction: events.ActionNudge,
			wantConf:   0.8,
		},
		{
			name:         "the ping-pong goes on after the nudge",
			records:      []events.IterationRecord{readA(1), readB(2), readA(3), readB(4), readA(5)},
			want:         []int{4, 5},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			name: "a claim and the same failing test in turn",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("pytest", "1 failed in 0.41s", 1))),
				rec(2, "T1", text("The tests pass; done."), claimedDone()),
				rec(3, "T1", calls(runCmd("pytest", "1 failed in 0.39s", 1))),
				rec(4, "T1", text("The tests pass; done."), claimedDone()),
			},
			want:     []int{4},
			wantDiag: `iterations 1-4 ping-pong between A (run {"command":"pytest"}) and B (no tool calls: "The tests pass; done.") with the same results each time; evidence weak (4 steps of ping-pong, threshold 4)`,
		},
		{
			name: "only the alternating tail is evidence",
			records: []events.IterationRecord{
				rec(1, "T1", calls(listDirCall("."))), readA(2), readB(3), readA(4), readB(5),
			},
			want:     []int{5},
			wantEvid: []int{2, 3, 4, 5},
		},
		{
			name: "a flipping workspace is enough whatever the calls",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h-on"), files("flags.yaml"), calls(editFile("flags.yaml", "off", "on"))),
				rec(2, "T1", hash("h-off"), calls(runCmd("git checkout flags.yaml", "", 0))),
				rec(3, "T1", hash("h-on"), files("flags.yaml"), calls(call("write_file", `{"path":"flags.yaml","content":"beta: on"}`, "wrote 8 bytes"))),
				rec(4, "T1", hash("h-off"), calls(runCmd("git stash", "Saved working directory", 0))),
			},
			want:     []int{4},
			wantConf: 0.85,
		},
		{
			name: "a flipping workspace across a compaction still counts",
			records: []events.IterationRecord{
				up(1, hash("h1")), down(2, hash("h2")), up(3, hash("h1"), wasCompacted()), down(4, hash("h2")),
			},
			want: []int{4},
		},
		{
			name:    "steps from config",
			cfg:     Config{AlternatingSteps: 6},
			records: []events.IterationRecord{readA(1), readB(2), readA(3), readB(4), readA(5), readB(6)},
			want:    []int{6},
		},
		// Healthy look-alikes.
		{
			name: "a change tried once and reverted",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h1"), calls(runCmd("go test", "--- FAIL: TestDefaults", 1))),
				up(2, hash("h2")),
				down(3, hash("h1")),
				rec(4, "T1", hash("h1"), calls(readFile("config_test.go", "..."))),
				rec(5, "T1", hash("h3"), files("config_test.go"), calls(editFile("config_test.go", "60", "30"))),
			},
		},
		{
			name:    "A, B, A, then something else",
			records: []events.IterationRecord{readA(1), readB(2), readA(3), rec(4, "T1", calls(readFile("c.go", "C")))},
		},
		{
			name:    "three steps are a re-check",
			records: []events.IterationRecord{readA(1), readB(2), readA(3)},
		},
		{
			name:    "the same step over and over is circular_tools'",
			records: []events.IterationRecord{readA(1), readA(2), readA(3), readA(4)},
		},
		{
			name: "polling two jobs whose status changes",
			records: []events.IterationRecord{
				poll(1, "test", "queued"), poll(2, "lint", "in_progress"), poll(3, "test", "in_progress"), poll(4, "lint", "completed"),
			},
		},
		{
			name:    "re-reading a pair after a compaction",
			records: []events.IterationRecord{readA(1), readB(2), readA(3, wasCompacted()), readB(4)},
		},
		{
			name: "a normal edit-test cycle",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h1"), files("a.go"), calls(editFile("a.go", "1", "2"))),
				rec(2, "T1", hash("h1"), calls(runCmd("go test", "FAIL: TestA", 1))),
				rec(3, "T1", hash("h2"), files("a.go"), calls(editFile("a.go", "2", "3"))),
				rec(4, "T1", hash("h2"), calls(runCmd("go test", "FAIL: TestB", 1))),
			},
		},
		{
			name:    "a window too small for two cycles",
			cfg:     Config{Window: 3},
			records: []events.IterationRecord{readA(1), readB(2), readA(3), readB(4), readA(5)},
		},
		{
			name:    "empty records match nothing",
			records: []events.IterationRecord{rec(1, "T1"), rec(2, "T1"), rec(3, "T1"), rec(4, "T1")},
		},
	})
}

func listDirCall(path string) events.ToolCall {
	return call("list_dir", `{"path":"`+path+`"}`, "a.go\nb.go")
}

func TestAlternationRun(t *testing.T) {
	tests := []struct {
		keys []string
		want int
	}{
		{nil, 0},
		{[]string{"a"}, 0},
		{[]string{"a", "a"}, 0},
		{[]string{"a", "b"}, 2},
		{[]string{"c", "a", "b", "a", "b"}, 4},
		{[]string{"b", "a", "b", "a", "b"}, 5},
		{[]string{"a", "b", ""}, 0},
		{[]string{"", "b", "a", "b"}, 3},
	}
	for _, tc := range tests {
		if got := alternationRun(tc.keys); got != tc.want {
			t.Errorf("alternationRun(%q) = %d, want %d", tc.keys, got, tc.want)
		}
	}
}
