package stuckdetector

import (
	"fmt"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestNoProgress(t *testing.T) {
	// read is a read of path that answers what it answered before: the
	// workspace does not change.
	read := func(it int, task, path string, opts ...recOpt) events.IterationRecord {
		return rec(it, task, append([]recOpt{text("Reading " + path), hash("h1"), calls(readFile(path, "content of "+path))}, opts...)...)
	}
	// generate re-runs a generator whose output never changes.
	generate := func(it int, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{text("Regenerating."), hash("h1"), calls(runCmd("make generate", "generated 3 files", 0))}, opts...)...)
	}
	const testFail = "--- FAIL: TestLoad (0.00s)\n    load_test.go:12: timeout = 30s, want 1m30s\nFAIL\nFAIL\tacme/config\t0.004s\n"
	cycle := []events.IterationRecord{
		read(1, "T1", "a.go"), read(2, "T1", "b.go"), read(3, "T1", "c.go"), read(4, "T1", "d.go"),
		read(5, "T1", "a.go"), read(6, "T1", "b.go"), read(7, "T1", "c.go"), read(8, "T1", "d.go"),
		read(9, "T1", "a.go"),
	}
	var twelve []events.IterationRecord
	for it := 1; it <= 12; it++ {
		twelve = append(twelve, read(it, "T1", fmt.Sprintf("internal/pkg%d/file.go", it)))
	}
	runTrajectories(t, NoProgress{}, []trajectory{
		// Firing.
		{
			name:    "the same reads cycling with nothing new",
			records: cycle[:8],
			want:    []int{8},
			wantDiag: `iterations 4-8 changed no files and the workspace hash stayed h1; 5 tool calls (read_file x5), none after iteration 4 with an answer not seen before; ` +
				`evidence weak (5 iterations without progress, threshold 5): a nudge first, decompose_task if it goes on`,
			wantEvid:     []int{4, 5, 6, 7, 8},
			wantAction:   events.ActionNudge,
			wantStrength: []events.Strength{events.StrengthWeak},
		},
		{
			// The nudge changed nothing: the window kept the evidence, one
			// more iteration of it is strong evidence and the builder
			// decomposes.
			name:         "the cycle goes on after the nudge",
			cfg:          Config{Window: 10},
			records:      cycle,
			want:         []int{8, 9},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			// A window of eight holds two rounds of a cycle of four: the
			// first read of the oldest round has left it, so the stall it
			// shows stays at the span. It keeps firing, weak; the builder,
			// which never nudges a task twice, climbs its ladder.
			name:         "the cycle goes on, seen through the default window",
			records:      cycle,
			want:         []int{8, 9},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthWeak},
		},
		{
			name: "the same failing test from different commands, nothing changed",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h1"), calls(runCmd("go test ./...", testFail, 1)), failing("TestLoad")),
				rec(2, "T1", hash("h1"), calls(runCmd("go test -run TestLoad ./config/", testFail, 1)), failing("TestLoad")),
				rec(3, "T1", hash("h1"), calls(runCmd("go test ./config/...", testFail, 1)), failing("TestLoad")),
				rec(4, "T1", hash("h1"), calls(runCmd("go test -count=1 ./config/", testFail, 1)), failing("TestLoad")),
				rec(5, "T1", hash("h1"), calls(runCmd("go test -v ./config/", "=== RUN   TestLoad\n"+testFail, 1)), failing("TestLoad")),
			},
			want: []int{5},
			wantDiag: `iterations 1-5 changed no files and the workspace hash stayed h1; 5 tool calls (run x5), none after iteration 1 with an answer not seen before; ` +
				`tests still failing (1 failed: TestLoad); evidence weak (5 iterations without progress, threshold 5): a nudge first, decompose_task if it goes on`,
		},
		{
			name: "re-runs that differ only in their timings bring nothing new",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("go test ./...", "ok  \tacme/config\t0.011s\n", 0))),
				rec(2, "T1", calls(runCmd("go test ./...", "ok  \tacme/config\t0.014s\n", 0))),
				rec(3, "T1", calls(runCmd("go test ./...", "ok  \tacme/config\t0.009s\n", 0))),
				rec(4, "T1", calls(runCmd("go test ./...", "ok  \tacme/config\t0.013s\n", 0))),
				rec(5, "T1", calls(runCmd("go test ./...", "ok  \tacme/config\t0.012s\n", 0))),
				rec(6, "T1", calls(runCmd("go test ./...", "ok  \tacme/config\t0.010s\n", 0))),
			},
			want:         []int{5, 6},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			name:     "window from config",
			cfg:      Config{Window: 3},
			records:  []events.IterationRecord{rec(1, "T1"), rec(2, "T1"), rec(3, "T1")},
			want:     []int{3},
			wantDiag: `iterations 1-3 changed no files and reported no workspace hash; no tool calls; evidence weak (3 iterations without progress, threshold 3): a nudge first, decompose_task if it goes on`,
		},
		{
			// Weak at the span, strong one later (the window is cleared),
			// then a fresh span is needed.
			name: "fires again only after a fresh full span",
			records: []events.IterationRecord{
				rec(1, "T1"), rec(2, "T1"), rec(3, "T1"), rec(4, "T1"), rec(5, "T1"), rec(6, "T1"),
				rec(7, "T1"), rec(8, "T1"), rec(9, "T1"), rec(10, "T1"), rec(11, "T1"),
			},
			want:         []int{5, 6, 11},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong, events.StrengthWeak},
		},
		{
			name: "task switch resets",
			records: []events.IterationRecord{
				generate(1), generate(2), generate(3),
				generate(4, func(r *events.IterationRecord) { r.TaskID = "T2" }), generate(5, func(r *events.IterationRecord) { r.TaskID = "T2" }),
				generate(6, func(r *events.IterationRecord) { r.TaskID = "T2" }), generate(7, func(r *events.IterationRecord) { r.TaskID = "T2" }),
				generate(8, func(r *events.IterationRecord) { r.TaskID = "T2" }),
			},
			want:     []int{8},
			wantEvid: []int{4, 5, 6, 7, 8},
		},
		// Healthy look-alikes.
		{
			name:    "twelve iterations reading distinct files",
			records: twelve,
		},
		{
			name: "ls, pwd and reads of two files with a repeat or two",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h1"), calls(runCmd("ls", "go.mod\nmain.go\nconfig.go", 0))),
				rec(2, "T1", hash("h1"), calls(runCmd("pwd", "/work/app", 0))),
				read(3, "T1", "main.go"),
				read(4, "T1", "config.go"),
				rec(5, "T1", hash("h1"), calls(runCmd("ls", "go.mod\nmain.go\nconfig.go", 0))),
				read(6, "T1", "main.go"),
				rec(7, "T1", hash("h1"), calls(runCmd("cat go.mod", "module app\n\ngo 1.26", 0))),
				read(8, "T1", "config.go"),
				rec(9, "T1", hash("h1"), calls(runCmd("pwd", "/work/app", 0))),
				rec(10, "T1", hash("h1"), calls(runCmd("go env GOPATH", "/root/go", 0))),
			},
		},
		{
			name:    "four quiet iterations are not a full span",
			records: []events.IterationRecord{generate(1), generate(2), generate(3), generate(4)},
		},
		{
			name: "a file change in the span",
			records: []events.IterationRecord{
				generate(1), generate(2), generate(3, files("gen.go")), generate(4), generate(5),
			},
		},
		{
			name: "a hash change without files_changed",
			records: []events.IterationRecord{
				generate(1), generate(2), generate(3, hash("h2")), generate(4, hash("h2")), generate(5, hash("h2")),
			},
		},
		{
			name: "a claimed completion in the span",
			records: []events.IterationRecord{
				generate(1), generate(2), rec(3, "T1", text("Done."), claimedDone()), generate(4), generate(5),
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
	})
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
			want:         []int{5},
			wantDiag:     `the same tests kept failing (1 failed: TestParse) in iterations 1-5 across 5 different calls and edits to parse.go in 4 iterations; evidence weak (5 iterations without progress, threshold 5): a nudge first, decompose_task if it goes on`,
			wantEvid:     []int{1, 2, 3, 4, 5},
			wantAction:   events.ActionNudge,
			wantConf:     0.8,
			wantStrength: []events.Strength{events.StrengthWeak},
		},
		{
			name: "the same failing test after the nudge is strong evidence",
			records: []events.IterationRecord{
				rec(1, "T1", hash("h0"), calls(runCmd("go test ./config/", parseFail, 1)), testRun(8, 1, "TestParse")),
				attempt(2, "a", "b"), attempt(3, "b", "c"), attempt(4, "c", "d"), attempt(5, "d", "e"), attempt(6, "e", "f"),
			},
			want:         []int{5, 6},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			// The edit that led to the failure was progress: the stall is
			// counted from the first run that showed the failure.
			name: "the edit before the first failing run is not part of the stall",
			records: []events.IterationRecord{
				rec(1, "T1", files("parse.go"), calls(editFile("parse.go", "a", "b"))),
				rec(2, "T1", calls(runCmd("go test ./config/", parseFail, 1)), testRun(8, 1, "TestParse")),
				rec(3, "T1", calls(readFile("parse_test.go", "T"))),
				rec(4, "T1", calls(runCmd("go test ./config/", parseFail, 1)), testRun(8, 1, "TestParse")),
				rec(5, "T1", calls(readFile("duration.go", "D"))),
				rec(6, "T1", calls(runCmd("go test ./config/", parseFail, 1)), testRun(8, 1, "TestParse")),
			},
			want:         []int{6},
			wantEvid:     []int{2, 3, 4, 5, 6},
			wantStrength: []events.Strength{events.StrengthWeak},
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
				`"vet: ./store/pool.go:14:9: undefined: pgxpool.Connect"; evidence weak (5 iterations without progress, threshold 5): a nudge first, decompose_task if it goes on`,
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
