package stuckdetector

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Trajectory builders: a record is its iteration, its task and what
// happened in it.

type recOpt func(*events.IterationRecord)

func rec(iteration int, task string, opts ...recOpt) events.IterationRecord {
	r := events.IterationRecord{Iteration: iteration, TaskID: task}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func text(s string) recOpt { return func(r *events.IterationRecord) { r.AssistantText = s } }

func calls(cs ...events.ToolCall) recOpt {
	return func(r *events.IterationRecord) { r.ToolCalls = append(r.ToolCalls, cs...) }
}

func files(fs ...string) recOpt {
	return func(r *events.IterationRecord) { r.FilesChanged = append(r.FilesChanged, fs...) }
}

func hash(h string) recOpt { return func(r *events.IterationRecord) { r.WorkspaceHash = h } }

func claimedDone() recOpt { return func(r *events.IterationRecord) { r.ClaimedDone = true } }

func failing(names ...string) recOpt {
	return func(r *events.IterationRecord) {
		r.Tests = &events.TestResult{Failed: len(names), Failing: names}
	}
}

func wasCompacted() recOpt { return func(r *events.IterationRecord) { r.Compacted = true } }

func contextTokens(n int) recOpt { return func(r *events.IterationRecord) { r.ContextTokens = n } }

func testRun(passed, failed int, names ...string) recOpt {
	return func(r *events.IterationRecord) {
		r.Tests = &events.TestResult{Passed: passed, Failed: failed, Failing: names}
	}
}

// runCmd is a call of the run tool.
func runCmd(command, output string, exit int) events.ToolCall {
	return failedCall("run", `{"command":"`+command+`"}`, output, exit)
}

// toolError is a call the tool refused.
func toolError(name, args, msg string) events.ToolCall {
	return events.ToolCall{Name: name, Args: json.RawMessage(args), Error: msg}
}

// call is a successful tool call; args is JSON as the model wrote it.
func call(name, args, output string) events.ToolCall {
	return events.ToolCall{Name: name, Args: json.RawMessage(args), Output: output}
}

func failedCall(name, args, output string, exit int) events.ToolCall {
	c := call(name, args, output)
	c.ExitCode = exit
	return c
}

func readFile(path, content string) events.ToolCall {
	return call("read_file", `{"path":"`+path+`"}`, content)
}

func goTest(output string, exit int) events.ToolCall {
	return failedCall("bash", `{"cmd":"go test ./..."}`, output, exit)
}

func editFile(path, old, new string) events.ToolCall {
	return call("edit_file", `{"path":"`+path+`","old":"`+old+`","new":"`+new+`"}`, "ok")
}

type trajectory struct {
	name       string
	cfg        Config // zero: defaults
	records    []events.IterationRecord
	want       []int         // iterations at which a signal fires
	wantDiag   string        // diagnosis of the first signal, when set
	wantEvid   []int         // evidence of the first signal, when set
	wantAction events.Action // action of the first signal, when set
	wantConf   float64       // confidence of the first signal, when set
}

// runTrajectories feeds each trajectory to a Detector running only p, the
// way the scanner does, and checks where p fires and what it says.
func runTrajectories(t *testing.T, p Pattern, cases []trajectory) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDetector(tc.cfg, []Pattern{p})
			var got []int
			var first *events.Signal
			for _, r := range tc.records {
				s := d.Observe(r)
				if s == nil {
					continue
				}
				checkSignal(t, s, r, p.Name())
				got = append(got, s.Iteration)
				if first == nil {
					first = s
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("fired at %v, want %v (first: %+v)", got, tc.want, first)
			}
			if tc.wantDiag != "" && first.Diagnosis != tc.wantDiag {
				t.Errorf("diagnosis\n got: %s\nwant: %s", first.Diagnosis, tc.wantDiag)
			}
			if tc.wantEvid != nil && !slices.Equal(first.Evidence, tc.wantEvid) {
				t.Errorf("evidence %v, want %v", first.Evidence, tc.wantEvid)
			}
			if tc.wantAction != "" && first.Action != tc.wantAction {
				t.Errorf("action %s, want %s", first.Action, tc.wantAction)
			}
			if tc.wantConf != 0 && first.Confidence != tc.wantConf {
				t.Errorf("confidence %v, want %v", first.Confidence, tc.wantConf)
			}
		})
	}
}

// checkSignal asserts what every signal promises whatever the pattern.
func checkSignal(t *testing.T, s *events.Signal, newest events.IterationRecord, pattern string) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Errorf("invalid signal %+v: %v", s, err)
	}
	if s.Pattern != pattern {
		t.Errorf("pattern %q, want %q", s.Pattern, pattern)
	}
	if s.Iteration != newest.Iteration {
		t.Errorf("signal iteration %d, want the newest %d", s.Iteration, newest.Iteration)
	}
	if !slices.IsSorted(s.Evidence) || !slices.Contains(s.Evidence, newest.Iteration) {
		t.Errorf("evidence %v must be ascending and include %d", s.Evidence, newest.Iteration)
	}
	if s.Diagnosis == "" || strings.Contains(s.Diagnosis, "\n") {
		t.Errorf("diagnosis %q must be one non-empty line", s.Diagnosis)
	}
}

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
			wantDiag: `read_file {"path":"a.go"} called 3 times in iterations 4-6 with no workspace change`,
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
			wantDiag: `read_file {"limit":10,"path":"a.go"} called 3 times in iterations 1-3 with no workspace change`,
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
			wantDiag: `cycling over read_file {"path":"a.go"}, read_file {"path":"b.go"}: 5 calls in iterations 1-5 with no workspace change`,
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
			wantDiag: `cycling over read_file {"path":"a.go"}, read_file {"path":"b.go"}, read_file {"path":"c.go"}: 8 calls in iterations 1-3 with no workspace change`,
		},
		{
			// Counted as calls, not iterations: three identical calls in one
			// turn are already the model asking for what it has.
			name:     "the same call three times in one iteration",
			records:  []events.IterationRecord{rec(7, "T1", calls(readFile("a.go", "A"), readFile("a.go", "A"), readFile("a.go", "A")))},
			want:     []int{7},
			wantDiag: `read_file {"path":"a.go"} called 3 times in iteration 7 with no workspace change`,
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
			wantDiag: `bash {"cmd":"go test ./..."} called 3 times in iterations 1-3 with no workspace change`,
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
			wantDiag: `read_file {"path":"a.go"} called 3 times in iterations 1, 2 and 4 with no workspace change`,
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

func TestRepetitiveOutput(t *testing.T) {
	const src = "package config\n"
	const again = "Let me look at the config loader again."
	// 24 words with the last: changing only the last keeps 21 of 23 shingles
	// (0.91). It is also longer than a diagnosis quotes.
	const long = "The failing assertion compares the parsed timeout with the default so I will check how " +
		"the loader applies defaults before it validates the"
	runTrajectories(t, RepetitiveOutput{}, []trajectory{
		// Firing.
		{
			name: "same text and same read",
			records: []events.IterationRecord{
				rec(4, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
				rec(5, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
				rec(6, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
			},
			want:     []int{6},
			wantDiag: `the same assistant text 3 times in iterations 4-6 ("Let me look at the config loader again.") with the same tool calls and results: read_file {"path":"pkg/config/load.go"}`,
			wantEvid: []int{4, 5, 6},
		},
		{
			name: "same text and no tool calls",
			records: []events.IterationRecord{
				rec(1, "T1", text("The task is complete."), claimedDone()),
				rec(2, "T1", text("The task is complete."), claimedDone()),
				rec(3, "T1", text("The task is complete."), claimedDone()),
			},
			want:     []int{3},
			wantDiag: `the same assistant text 3 times in iterations 1-3 ("The task is complete.") with no tool calls`,
		},
		{
			name: "case, whitespace, punctuation and numbers are normalized",
			records: []events.IterationRecord{
				rec(1, "T1", text("Attempt 3: running the tests again."), calls(goTest("FAIL", 1))),
				rec(2, "T1", text("attempt 4 -  Running the tests  again"), calls(goTest("FAIL", 1))),
				rec(3, "T1", text("ATTEMPT 15:\nrunning the tests again!"), calls(goTest("FAIL", 1))),
			},
			want: []int{3},
		},
		{
			name: "near-identical long text",
			records: []events.IterationRecord{
				rec(1, "T1", text(long+" input")),
				rec(2, "T1", text(long+" value")),
				rec(3, "T1", text(long+" field")),
			},
			want:     []int{3},
			wantDiag: `near-identical (similarity 0.91) assistant text 3 times in iterations 1-3 ("` + long[:100] + `...") with no tool calls`,
		},
		{
			name: "parallel calls in another order are the same calls",
			records: []events.IterationRecord{
				rec(1, "T1", text(again), calls(readFile("a.go", "A"), readFile("b.go", "B"))),
				rec(2, "T1", text(again), calls(readFile("b.go", "B"), readFile("a.go", "A"))),
				rec(3, "T1", text(again), calls(readFile("a.go", "A"), readFile("b.go", "B"))),
			},
			want: []int{3},
		},
		// Healthy look-alikes.
		{
			name: "same text over edits to different files",
			records: []events.IterationRecord{
				rec(1, "T1", text("Editing file"), files("a.go"), calls(editFile("a.go", "log", "logger"))),
				rec(2, "T1", text("Editing file"), files("b.go"), calls(editFile("b.go", "log", "logger"))),
				rec(3, "T1", text("Editing file"), files("c.go"), calls(editFile("c.go", "log", "logger"))),
			},
		},
		{
			name: "polling with the same text and changing output",
			records: []events.IterationRecord{
				rec(1, "T1", text("Waiting for the rollout."), calls(call("bash", `{"cmd":"kubectl rollout status"}`, "1 of 3"))),
				rec(2, "T1", text("Waiting for the rollout."), calls(call("bash", `{"cmd":"kubectl rollout status"}`, "2 of 3"))),
				rec(3, "T1", text("Waiting for the rollout."), calls(call("bash", `{"cmd":"kubectl rollout status"}`, "3 of 3"))),
			},
		},
		{
			name: "tests re-run after edits with the same words",
			records: []events.IterationRecord{
				rec(1, "T1", text("Fixing and re-running the tests."), files("a.go"), calls(editFile("a.go", "a", "b"), goTest("FAIL", 1))),
				rec(2, "T1", text("Fixing and re-running the tests."), files("a.go"), calls(editFile("a.go", "b", "c"), goTest("FAIL", 1))),
				rec(3, "T1", text("Fixing and re-running the tests."), files("a.go"), calls(editFile("a.go", "c", "d"), goTest("FAIL", 1))),
			},
		},
		{
			name: "different texts with the same call",
			records: []events.IterationRecord{
				rec(1, "T1", text("Let me check the tests."), calls(goTest("FAIL", 1))),
				rec(2, "T1", text("Let me check the config."), calls(goTest("FAIL", 1))),
				rec(3, "T1", text("Let me check the tests."), calls(goTest("FAIL", 1))),
			},
		},
		{
			name: "an empty text breaks the run",
			records: []events.IterationRecord{
				rec(1, "T1", text(again), calls(readFile("a.go", src))),
				rec(2, "T1", calls(readFile("a.go", src))),
				rec(3, "T1", text(again), calls(readFile("a.go", src))),
			},
		},
		{
			name: "productive work with a stock phrase",
			records: []events.IterationRecord{
				rec(1, "T1", text("Implementing the next function."), files("a.go"), calls(call("write_file", `{"path":"a.go","content":"1"}`, "ok"))),
				rec(2, "T1", text("Implementing the next function."), files("b.go"), calls(call("write_file", `{"path":"b.go","content":"2"}`, "ok"))),
				rec(3, "T1", text("Implementing the next function."), files("c.go"), calls(call("write_file", `{"path":"c.go","content":"3"}`, "ok"))),
			},
		},
		{
			name: "task switch resets",
			records: []events.IterationRecord{
				rec(1, "T1", text(again)),
				rec(2, "T1", text(again)),
				rec(3, "T2", text(again)),
				rec(4, "T2", text(again)),
			},
		},
	})
}

func TestNoProgress(t *testing.T) {
	quiet := func(it int, task, path string, opts ...recOpt) events.IterationRecord {
		return rec(it, task, append([]recOpt{text("Reading " + path), calls(readFile(path, "x"))}, opts...)...)
	}
	runTrajectories(t, NoProgress{}, []trajectory{
		// Firing.
		{
			name: "five iterations that change nothing",
			records: []events.IterationRecord{
				quiet(1, "T1", "a.go"), quiet(2, "T1", "b.go"), quiet(3, "T1", "c.go"),
				quiet(4, "T1", "d.go"),
				rec(5, "T1", calls(goTest("FAIL", 1))),
			},
			want:     []int{5},
			wantDiag: `iterations 1-5 changed no files and reported no workspace hash; 5 tool calls (read_file x4, bash x1)`,
			wantEvid: []int{1, 2, 3, 4, 5},
		},
		{
			name: "same workspace hash where present, tests still failing",
			records: []events.IterationRecord{
				quiet(1, "T1", "a.go", hash("9f2c1a7e0b3d55aa")), quiet(2, "T1", "b.go"),
				quiet(3, "T1", "c.go", hash("9f2c1a7e0b3d55aa")), quiet(4, "T1", "d.go", hash("9f2c1a7e0b3d55aa")),
				rec(5, "T1", hash("9f2c1a7e0b3d55aa"), failing("TestLoad"), calls(goTest("FAIL", 1))),
			},
			want:     []int{5},
			wantDiag: `iterations 1-5 changed no files and the workspace hash stayed 9f2c1a7e0b3d; 5 tool calls (read_file x4, bash x1); tests still failing (1 failed: TestLoad)`,
		},
		{
			name:     "window from config",
			cfg:      Config{Window: 3},
			records:  []events.IterationRecord{rec(1, "T1"), rec(2, "T1"), rec(3, "T1")},
			want:     []int{3},
			wantDiag: `iterations 1-3 changed no files and reported no workspace hash; no tool calls`,
		},
		{
			name: "fires again only after a fresh full window",
			records: []events.IterationRecord{
				rec(1, "T1"), rec(2, "T1"), rec(3, "T1"), rec(4, "T1"), rec(5, "T1"),
				rec(6, "T1"), rec(7, "T1"), rec(8, "T1"), rec(9, "T1"), rec(10, "T1"),
			},
			want: []int{5, 10},
		},
		// Healthy look-alikes.
		{
			name: "four quiet iterations are not a full window",
			records: []events.IterationRecord{
				quiet(1, "T1", "a.go"), quiet(2, "T1", "b.go"), quiet(3, "T1", "c.go"), quiet(4, "T1", "d.go"),
			},
		},
		{
			name: "a file change in the window",
			records: []events.IterationRecord{
				quiet(1, "T1", "a.go"), quiet(2, "T1", "b.go"),
				rec(3, "T1", files("b.go"), calls(editFile("b.go", "x", "y"))),
				quiet(4, "T1", "c.go"), quiet(5, "T1", "d.go"),
			},
		},
		{
			name: "a hash change without files_changed",
			records: []events.IterationRecord{
				quiet(1, "T1", "a.go", hash("h1")), quiet(2, "T1", "b.go", hash("h1")),
				rec(3, "T1", hash("h2"), calls(call("bash", `{"cmd":"gofmt -w ."}`, ""))),
				quiet(4, "T1", "c.go", hash("h2")), quiet(5, "T1", "d.go", hash("h2")),
			},
		},
		{
			name: "a claimed completion in the window",
			records: []events.IterationRecord{
				quiet(1, "T1", "a.go"), quiet(2, "T1", "b.go"),
				rec(3, "T1", text("Done."), claimedDone()),
				quiet(4, "T1", "c.go"), quiet(5, "T1", "d.go"),
			},
		},
		{
			name: "productive work that writes files every iteration",
			records: []events.IterationRecord{
				rec(1, "T1", files("a.go"), calls(editFile("a.go", "1", "2"))),
				rec(2, "T1", files("b.go"), calls(editFile("b.go", "1", "2"))),
				rec(3, "T1", files("c.go"), calls(editFile("c.go", "1", "2"))),
				rec(4, "T1", files("d.go"), calls(editFile("d.go", "1", "2"))),
				rec(5, "T1", files("e.go"), calls(editFile("e.go", "1", "2"))),
			},
		},
		{
			name: "task switch resets",
			records: []events.IterationRecord{
				quiet(1, "T1", "a.go"), quiet(2, "T1", "b.go"), quiet(3, "T1", "c.go"),
				quiet(4, "T2", "a.go"), quiet(5, "T2", "b.go"), quiet(6, "T2", "c.go"), quiet(7, "T2", "d.go"),
				quiet(8, "T2", "e.go"),
			},
			want:     []int{8},
			wantEvid: []int{4, 5, 6, 7, 8},
		},
	})
}

// TestPatternsAlone checks the patterns when called directly with a raw
// window and a zero Config, as a caller composing its own list might.
func TestPatternsAlone(t *testing.T) {
	read := func(it int) events.IterationRecord { return rec(it, "T1", calls(readFile("a.go", "x"))) }
	window := []events.IterationRecord{read(1), read(2), read(3), read(4), read(5)}
	for _, p := range DefaultPatterns() {
		if s := p.Detect(nil, Config{}); s != nil {
			t.Errorf("%s fired on an empty window: %+v", p.Name(), s)
		}
	}
	if s := (CircularTools{}).Detect(window, Config{}); s == nil || s.Iteration != 5 {
		t.Errorf("circular_tools = %+v, want a signal at 5", s)
	}
	if s := (NoProgress{}).Detect(window, Config{}); s == nil || s.Iteration != 5 {
		t.Errorf("no_progress = %+v, want a signal at 5", s)
	}
}

func TestPatternNames(t *testing.T) {
	var names []string
	for _, p := range DefaultPatterns() {
		names = append(names, p.Name())
	}
	want := []string{
		"repetitive_output", "chanting", "compaction_loop", "monologue", "alternating",
		"circular_tools", "action_error_loop", "no_progress",
	}
	if !slices.Equal(names, want) {
		t.Errorf("DefaultPatterns names %v, want %v", names, want)
	}
}

func TestCallSignature(t *testing.T) {
	tests := []struct {
		name string
		call events.ToolCall
		want string
	}{
		{"no args", events.ToolCall{Name: "list_dir"}, "list_dir"},
		{"null args", call("list_dir", `null`, ""), "list_dir"},
		{"empty object", call("list_dir", ` {} `, ""), "list_dir"},
		{"sorted keys, nested", call("grep", `{"z":1,"a":{"y":true,"b":[2,1]}}`, ""), `grep {"a":{"b":[2,1],"y":true},"z":1}`},
		{"large integers kept", call("seek", `{"offset":12345678901234567890}`, ""), `seek {"offset":12345678901234567890}`},
		{"html not escaped", call("bash", `{"cmd":"a < b && c"}`, ""), `bash {"cmd":"a < b && c"}`},
		{"string-encoded object", call("read_file", `"{\"path\":\"a.go\"}"`, ""), `read_file {"path":"a.go"}`},
		{"plain string", call("bash", `"ls -la"`, ""), `bash "ls -la"`},
		{"not JSON kept as is", call("bash", `ls -la`, ""), `bash ls -la`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := callSignature(tc.call); got != tc.want {
				t.Errorf("callSignature = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSimilarity(t *testing.T) {
	tests := []struct {
		a, b string
		want float64
	}{
		{"Let me check.", "let  ME check", 1},
		{"Attempt 3 failed", "attempt 42 failed", 1},
		{"Let me check.", "Let me check again.", 0.5},
		{"Done", "Finished", 0},
		{"a b c d e", "a b c d f", 2.0 / 4},
	}
	for _, tc := range tests {
		got := jaccard(shingles(textTokens(tc.a)), shingles(textTokens(tc.b)))
		if got != tc.want {
			t.Errorf("similarity(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestFormatIterations(t *testing.T) {
	tests := []struct {
		its  []int
		want string
	}{
		{[]int{4}, "iteration 4"},
		{[]int{4, 5, 6}, "iterations 4-6"},
		{[]int{2, 4}, "iterations 2 and 4"},
		{[]int{2, 4, 7}, "iterations 2, 4 and 7"},
	}
	for _, tc := range tests {
		if got := formatIterations(tc.its); got != tc.want {
			t.Errorf("formatIterations(%v) = %q, want %q", tc.its, got, tc.want)
		}
	}
}

func TestDiagnosisTruncatesLongArgs(t *testing.T) {
	big := strings.Repeat("x", 5000)
	c := call("write_file", `{"path":"a.go","content":"`+big+`"}`, "ok")
	window := []events.IterationRecord{rec(1, "T1", calls(c)), rec(2, "T1", calls(c)), rec(3, "T1", calls(c))}
	s := (CircularTools{}).Detect(window, DefaultConfig())
	if s == nil {
		t.Fatal("no signal")
	}
	if len(s.Diagnosis) > 300 {
		t.Errorf("diagnosis is %d bytes, want it bounded: %s", len(s.Diagnosis), s.Diagnosis)
	}
}

// TestNoProgressByOutcome covers the rules that look at what the attempts
// achieved rather than at the workspace alone.
func TestNoProgressByOutcome(t *testing.T) {
	const parseFail = "--- FAIL: TestParse (0.00s)\n    parse_test.go:27: got 0s, want 1h30m0s\nFAIL\n"
	attempt := func(it int, old, new string) events.IterationRecord {
		return rec(it, "T1", text("Trying another parse."), files("parse.go"), hash(old+new),
			calls(editFile("parse.go", old, new), runCmd("go test ./config/", parseFail, 1)), testRun(8, 1, "TestParse"))
	}
	const undefined = "./store/pool.go:14:9: undefined: pgxpool.Connect"
	poll := func(it int, status string) events.IterationRecord {
		return rec(it, "T1", hash("h1"), calls(runCmd("pg_isready", status, 1)))
	}
	runTrajectories(t, NoProgress{}, []trajectory{
		// Firing.
		{
			name: "the same failing test after every edit",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h0"), calls(runCmd("go test ./config/", parseFail, 1)), testRun(8, 1, "TestParse")),
				attempt(2, "a", "b"), attempt(3, "b", "c"), attempt(4, "c", "d"), attempt(5, "d", "e"),
			},
			want:       []int{5},
			wantDiag:   `the same tests kept failing (1 failed: TestParse) in iterations 1-5 across 5 different calls and edits to parse.go in 4 iterations`,
			wantEvid:   []int{1, 2, 3, 4, 5},
			wantAction: events.ActionDecompose,
			wantConf:   0.8,
		},
		{
			name: "tests reported without their output",
			records: []events.IterationRecord{
				rec(1, "T1", testRun(3, 2, "TestB", "TestA")),
				rec(2, "T1", files("a.go"), calls(editFile("a.go", "1", "2"))),
				rec(3, "T1", files("a.go"), calls(editFile("a.go", "2", "3")), testRun(3, 2, "TestA", "TestB")),
				rec(4, "T1", files("a.go"), calls(editFile("a.go", "3", "4"))),
				rec(5, "T1", testRun(3, 2, "TestA", "TestB")),
			},
			want: []int{5},
		},
		{
			name: "the same error from different commands across edits",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h1"), calls(runCmd("go build ./...", "# acme/store\n"+undefined, 1))),
				rec(2, "T1", hash("h2"), files("go.mod"), calls(editFile("go.mod", "v5.5.0", "v5.6.0"), runCmd("go vet ./store/", "# acme/store\nvet: "+undefined, 1))),
				rec(3, "T1", hash("h2"), calls(runCmd("go test ./store/", "# acme/store\n"+undefined+"\nFAIL\tacme/store [build failed]", 1))),
				rec(4, "T1", hash("h3"), files("main.go"), calls(editFile("main.go", "Open(url)", "Open(ctx, url)"), runCmd("go build ./...", "# acme/store\n"+undefined, 1))),
				rec(5, "T1", hash("h3"), calls(runCmd("go clean -cache", "", 0), runCmd("go vet ./...", "# acme/store\nvet: "+undefined, 1))),
			},
			want: []int{5},
			wantDiag: `iterations 1-5 kept reporting the same error (in 5 of them) across 7 different calls and edits to go.mod, main.go in 2 iterations: ` +
				`"vet: ./store/pool.go:14:9: undefined: pgxpool.Connect"`,
		},
		// Healthy look-alikes.
		{
			name: "the failing set shrinks",
			records: []events.IterationRecord{
				rec(1, "T1", testRun(9, 3, "TestA", "TestB", "TestC")),
				rec(2, "T1", files("v.go"), calls(editFile("v.go", "1", "2")), testRun(10, 2, "TestB", "TestC")),
				rec(3, "T1", files("v.go"), calls(editFile("v.go", "2", "3")), testRun(11, 1, "TestC")),
				rec(4, "T1", calls(readFile("c.go", "C"))),
				rec(5, "T1", files("v.go"), calls(editFile("v.go", "3", "4")), testRun(11, 1, "TestC")),
			},
		},
		{
			name: "the same test fails for a different reason each time",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("pytest", "E   AssertionError: assert '12.5' == '12.50'", 1)), testRun(13, 1, "test_amounts")),
				rec(2, "T1", files("export.py"), calls(editFile("export.py", "a", "b"), runCmd("pytest", "E   TypeError: unsupported format string passed to NoneType", 1)), testRun(13, 1, "test_amounts")),
				rec(3, "T1", files("export.py"), calls(editFile("export.py", "b", "c"), runCmd("pytest", "E   NameError: name 'fmt_amount' is not defined", 1)), testRun(13, 1, "test_amounts")),
				rec(4, "T1", files("export.py"), calls(editFile("export.py", "c", "d"), runCmd("pytest", "E   decimal.InvalidOperation", 1)), testRun(13, 1, "test_amounts")),
				rec(5, "T1", files("export.py"), calls(editFile("export.py", "d", "e"), runCmd("pytest", "E   AssertionError: assert '' == '0.00'", 1)), testRun(13, 1, "test_amounts")),
			},
		},
		{
			name: "building the feature file by file",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("go test ./e2e/", "--- FAIL: TestRefund: status 404, want 201", 1)), testRun(6, 1, "TestRefund")),
				rec(2, "T1", files("refund.go"), calls(call("write_file", `{"path":"refund.go"}`, "ok"), runCmd("go test ./e2e/", "--- FAIL: TestRefund: status 404, want 201", 1)), testRun(6, 1, "TestRefund")),
				rec(3, "T1", files("store.go"), calls(call("write_file", `{"path":"store.go"}`, "ok"), runCmd("go test ./e2e/", "--- FAIL: TestRefund: status 404, want 201", 1)), testRun(6, 1, "TestRefund")),
				rec(4, "T1", files("handler.go"), calls(call("write_file", `{"path":"handler.go"}`, "ok"), runCmd("go test ./e2e/", "--- FAIL: TestRefund: status 404, want 201", 1)), testRun(6, 1, "TestRefund")),
				rec(5, "T1", files("0004.sql"), calls(call("write_file", `{"path":"0004.sql"}`, "ok"), runCmd("go test ./e2e/", "--- FAIL: TestRefund: status 404, want 201", 1)), testRun(6, 1, "TestRefund")),
			},
		},
		{
			name:    "polling whose answer changes",
			records: []events.IterationRecord{poll(1, "no response"), poll(2, "no response"), poll(3, "rejecting connections"), poll(4, "rejecting connections"), poll(5, "rejecting connections")},
		},
		{
			name: "the error was fixed once in between",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("go build ./...", undefined, 1))),
				rec(2, "T1", files("a.go"), calls(editFile("a.go", "1", "2"), runCmd("go build ./...", "", 0))),
				rec(3, "T1", files("a.go"), calls(editFile("a.go", "2", "3"), runCmd("go build ./...", undefined, 1))),
				rec(4, "T1", calls(runCmd("go vet ./...", "vet: "+undefined, 1))),
				rec(5, "T1", files("a.go"), calls(editFile("a.go", "3", "4"), runCmd("go build ./...", undefined, 1))),
			},
		},
		{
			name: "the error appeared late in the span",
			records: []events.IterationRecord{
				rec(1, "T1", files("a.go"), calls(editFile("a.go", "1", "2"))),
				rec(2, "T1", files("b.go"), calls(editFile("b.go", "1", "2"))),
				rec(3, "T1", calls(runCmd("go build ./...", undefined, 1))),
				rec(4, "T1", files("a.go"), calls(editFile("a.go", "2", "3"), runCmd("go vet ./...", undefined, 1))),
				rec(5, "T1", files("a.go"), calls(editFile("a.go", "3", "4"), runCmd("go build ./...", undefined, 1))),
			},
		},
		{
			name: "a claim in the span",
			records: []events.IterationRecord{
				attempt(1, "a", "b"), attempt(2, "b", "c"), rec(3, "T1", text("Done."), claimedDone()), attempt(4, "c", "d"), attempt(5, "d", "e"),
			},
		},
	})
}

func TestShortHash(t *testing.T) {
	tests := []struct{ in, want string }{
		{"sha256:3f7a9c21d4e8b6051c2e", "3f7a9c21d4e8"},
		{"9f2c1a7e0b3d55aa", "9f2c1a7e0b3d"},
		{"c3", "c3"},
		{"sha256:", "sha256:"},
	}
	for _, tc := range tests {
		if got := shortHash(tc.in); got != tc.want {
			t.Errorf("shortHash(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
