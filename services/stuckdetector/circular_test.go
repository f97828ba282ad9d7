package stuckdetector

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestCircularTools(t *testing.T) {
	const src = "package config\n\nfunc Load() {}\n"
	runTrajectories(t, CircularTools{}, []trajectory{
		// Firing.
		{
			name: "same file read three times",
			records: []events.IterationRecord{
				rec(4, "T1", text("Let me read the loader."), calls(readFile("a.go", src))),
				rec(5, "T1", text("Reading it once more."), calls(readFile("a.go", src))),
				rec(6, "T1", text("Checking the loader."), calls(readFile("a.go", src))),
			},
			want:     []int{6},
			wantDiag: `read_file {"path":"a.go"} called 3 times in iterations 4-6 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on`,
			wantEvid: []int{4, 5, 6},
		},
		{
			name: "key order, spacing and string-encoded args do not hide a repeat",
			records: []events.IterationRecord{
				rec(1, "T1", calls(call("read_file", `{"path":"a.go","limit":10}`, src))),
				rec(2, "T1", calls(call("read_file", `{ "limit": 10, "path": "a.go" }`, src))),
				rec(3, "T1", calls(call("read_file", `"{\"path\":\"a.go\",\"limit\":10}"`, src))),
			},
			want:     []int{3},
			wantDiag: `read_file {"limit":10,"path":"a.go"} called 3 times in iterations 1-3 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on`,
		},
		{
			name: "equal workspace hash and no files_changed",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h1"), calls(readFile("a.go", src))),
				rec(2, "T1", hash("h1"), calls(readFile("a.go", src))),
				rec(3, "T1", hash("h1"), calls(readFile("a.go", src))),
			},
			want: []int{3},
		},
		{
			name: "cycle of reads over two files",
			records: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", "A"))),
				rec(2, "T1", calls(readFile("b.go", "B"))),
				rec(3, "T1", calls(readFile("a.go", "A"))),
				rec(4, "T1", calls(readFile("b.go", "B"))),
				rec(5, "T1", calls(readFile("a.go", "A"))),
			},
			want:     []int{5},
			wantDiag: `cycling over read_file {"path":"a.go"}, read_file {"path":"b.go"}: 5 calls in iterations 1-5 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on`,
			wantEvid: []int{1, 2, 3, 4, 5},
		},
		{
			name: "cycle of reads over three files in batched iterations",
			records: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", "A"), readFile("b.go", "B"), readFile("c.go", "C"))),
				rec(2, "T1", calls(readFile("a.go", "A"), readFile("b.go", "B"), readFile("c.go", "C"))),
				rec(3, "T1", calls(readFile("c.go", "C"), readFile("a.go", "A"))),
			},
			want:     []int{3},
			wantDiag: `cycling over read_file {"path":"a.go"}, read_file {"path":"b.go"}, read_file {"path":"c.go"}: 8 calls in iterations 1-3 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on`,
		},
		{
			// Counted as calls, not iterations: three identical calls in one
			// turn are already the model asking for what it has.
			name:     "the same call three times in one iteration",
			records:  []events.IterationRecord{rec(7, "T1", calls(readFile("a.go", "A"), readFile("a.go", "A"), readFile("a.go", "A")))},
			want:     []int{7},
			wantDiag: `read_file {"path":"a.go"} called 3 times in iteration 7 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on`,
			wantEvid: []int{7},
		},
		{
			name: "same failing test run with no edit in between",
			records: []events.IterationRecord{
				rec(1, "T1", calls(goTest("--- FAIL: TestLoad", 1))),
				rec(2, "T1", calls(goTest("--- FAIL: TestLoad", 1))),
				rec(3, "T1", calls(goTest("--- FAIL: TestLoad", 1))),
			},
			want:     []int{3},
			wantDiag: `bash {"cmd":"go test ./..."} called 3 times in iterations 1-3 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on`,
		},
		{
			name: "a claimed completion in between does not hide the repeat",
			records: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", src))),
				rec(2, "T1", calls(readFile("a.go", src))),
				rec(3, "T1", text("Done."), claimedDone()),
				rec(4, "T1", calls(readFile("a.go", src))),
			},
			want:     []int{4},
			wantDiag: `read_file {"path":"a.go"} called 3 times in iterations 1, 2 and 4 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on`,
			wantEvid: []int{1, 2, 4},
		},
		{
			name: "a write restarts the count",
			records: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", "v1"))),
				rec(2, "T1", calls(readFile("a.go", "v1"))),
				rec(3, "T1", files("a.go"), calls(editFile("a.go", "x", "y"))),
				rec(4, "T1", calls(readFile("a.go", "v2"))),
				rec(5, "T1", calls(readFile("a.go", "v2"))),
				rec(6, "T1", calls(readFile("a.go", "v2"))),
			},
			want:     []int{6},
			wantEvid: []int{4, 5, 6},
		},
		{
			name:    "repeat threshold from config",
			cfg:     Config{RepeatThreshold: 2},
			records: []events.IterationRecord{rec(1, "T1", calls(readFile("a.go", src))), rec(2, "T1", calls(readFile("a.go", src)))},
			want:    []int{2},
		},
		// Healthy look-alikes.
		{
			name: "tests re-run after each edit",
			records: []events.IterationRecord{
				rec(1, "T1", files("a.go"), calls(editFile("a.go", "a", "b"), goTest("--- FAIL: TestLoad", 1))),
				rec(2, "T1", files("a.go"), calls(editFile("a.go", "b", "c"), goTest("--- FAIL: TestLoad", 1))),
				rec(3, "T1", files("a.go"), calls(editFile("a.go", "c", "d"), goTest("--- FAIL: TestLoad", 1))),
				rec(4, "T1", files("b.go"), calls(editFile("b.go", "d", "e"), goTest("ok", 0))),
			},
		},
		{
			name: "tests re-run after edits the record shows only by hash",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h1"), calls(goTest("--- FAIL: TestLoad", 1))),
				rec(2, "T1", hash("h2"), calls(goTest("--- FAIL: TestLoad", 1))),
				rec(3, "T1", hash("h3"), calls(goTest("--- FAIL: TestLoad", 1))),
				rec(4, "T1", hash("h4"), calls(goTest("--- FAIL: TestLoad", 1))),
			},
		},
		{
			name: "polling whose output changes",
			records: []events.IterationRecord{
				rec(1, "T1", calls(call("bash", `{"cmd":"kubectl rollout status deploy/api"}`, "1 of 3 updated"))),
				rec(2, "T1", calls(call("bash", `{"cmd":"kubectl rollout status deploy/api"}`, "2 of 3 updated"))),
				rec(3, "T1", calls(call("bash", `{"cmd":"kubectl rollout status deploy/api"}`, "3 of 3 updated"))),
				rec(4, "T1", calls(call("bash", `{"cmd":"kubectl rollout status deploy/api"}`, "rolled out"))),
			},
		},
		{
			name: "output that flips back is not the same result",
			records: []events.IterationRecord{
				rec(1, "T1", calls(call("bash", `{"cmd":"tail -1 app.log"}`, "a"))),
				rec(2, "T1", calls(call("bash", `{"cmd":"tail -1 app.log"}`, "b"))),
				rec(3, "T1", calls(call("bash", `{"cmd":"tail -1 app.log"}`, "a"))),
			},
		},
		{
			name: "same edit applied to different files, even unreported",
			records: []events.IterationRecord{
				rec(1, "T1", calls(editFile("a.go", "log", "logger"))),
				rec(2, "T1", calls(editFile("b.go", "log", "logger"))),
				rec(3, "T1", calls(editFile("c.go", "log", "logger"))),
				rec(4, "T1", calls(editFile("d.go", "log", "logger"))),
			},
		},
		{
			name: "productive work that writes files every iteration",
			records: []events.IterationRecord{
				rec(1, "T1", files("a.go"), hash("h1"), calls(readFile("a.go", "v1"), editFile("a.go", "1", "2"))),
				rec(2, "T1", files("a.go"), hash("h2"), calls(readFile("a.go", "v2"), editFile("a.go", "2", "3"))),
				rec(3, "T1", files("a.go"), hash("h3"), calls(readFile("a.go", "v3"), editFile("a.go", "3", "4"))),
				rec(4, "T1", files("a.go"), hash("h4"), calls(readFile("a.go", "v4"), editFile("a.go", "4", "5"))),
			},
		},
		{
			name: "the newest iteration read and then wrote",
			records: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", src))),
				rec(2, "T1", calls(readFile("a.go", src))),
				rec(3, "T1", files("b.go"), calls(readFile("a.go", src), editFile("b.go", "x", "y"))),
			},
		},
		{
			name: "two reads are a re-check, not a loop",
			records: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", src))),
				rec(2, "T1", calls(readFile("b.go", src))),
				rec(3, "T1", calls(readFile("a.go", src))),
			},
		},
		{
			name: "task switch resets",
			records: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", src))),
				rec(2, "T1", calls(readFile("a.go", src))),
				rec(3, "T2", calls(readFile("a.go", src))),
				rec(4, "T2", calls(readFile("a.go", src))),
				rec(5, "T2", calls(readFile("a.go", src))),
			},
			want:     []int{5},
			wantEvid: []int{3, 4, 5},
		},
	})
}
