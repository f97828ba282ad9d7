package stuckdetector

import (
	"fmt"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func npmFailure(stamp string) string {
	return "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree\n" +
		"npm ERR! A complete log of this run can be found in: /root/.npm/_logs/" + stamp + "-debug-0.log\n"
}

func TestActionErrorLoop(t *testing.T) {
	npm := func(it int, stamp string, opts ...recOpt) events.IterationRecord {
		return rec(it, "T1", append([]recOpt{text("Installing."), calls(runCmd("npm install", npmFailure(stamp), 1))}, opts...)...)
	}
	goTestFail := func(dur string) events.ToolCall {
		return runCmd("go test ./...", "--- FAIL: TestLoad (0.00s)\nFAIL\tgithub.com/acme/x\t"+dur+"\n", 1)
	}
	const notFound = `edit_file: argument "old" was not found in "a.go"; it must match the file exactly`
	badEdit := toolError("edit_file", `{"path":"a.go","old":"x  ","new":"y"}`, notFound)
	runTrajectories(t, ActionErrorLoop{}, []trajectory{
		// Firing.
		{
			name: "the same failure with a new log path each time",
			records: []events.IterationRecord{
				npm(4, "2026-01-18T10_22_33_123Z"), npm(5, "2026-01-18T10_23_05_871Z"), npm(6, "2026-01-18T10_23_41_002Z"),
			},
			want:       []int{6},
			wantDiag:   `run {"command":"npm install"} failed the same way 3 times in iterations 4-6 with no workspace change in between: "npm ERR! code ERESOLVE"; evidence weak (3 failed calls, threshold 3)`,
			wantEvid:   []int{4, 5, 6},
			wantAction: events.ActionNudge,
			wantConf:   0.85,
		},
		{
			name: "reads in between do not hide it",
			records: []events.IterationRecord{
				rec(1, "T1", calls(goTestFail("0.012s"))),
				rec(2, "T1", calls(readFile("a.go", "A"), goTestFail("0.009s"))),
				rec(3, "T1", calls(readFile("b.go", "B"))),
				rec(4, "T1", calls(goTestFail("0.014s"))),
			},
			want:     []int{4},
			wantDiag: `run {"command":"go test ./..."} failed the same way 3 times in iterations 1, 2 and 4 with no workspace change in between: "--- FAIL: TestLoad (0.00s)"; evidence weak (3 failed calls, threshold 3)`,
			wantEvid: []int{1, 2, 4},
		},
		{
			name:     "three refused edits in one iteration",
			records:  []events.IterationRecord{rec(9, "T1", calls(badEdit, badEdit, badEdit))},
			want:     []int{9},
			wantDiag: `edit_file {"new":"y","old":"x  ","path":"a.go"} failed the same way 3 times in iteration 9 with no workspace change in between: "edit_file: argument \"old\" was not found in \"a.go\"; it must match the file exactly"; evidence weak (3 failed calls, threshold 3)`,
		},
		{
			name: "an unchanged hash is no change",
			records: []events.IterationRecord{
				npm(1, "2026-01-18T10_22_33_123Z", hash("h1")), npm(2, "2026-01-18T10_23_05_871Z", hash("h1")),
				npm(3, "2026-01-18T10_23_41_002Z", hash("h1")),
			},
			want: []int{3},
		},
		{
			// The same call failing three times in a row is a loop whatever
			// the failures said: the model treats each as transient.
			name: "the same call failing with a different message each time",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("go mod download", "dial tcp 142.250.74.113:443: i/o timeout", 1))),
				rec(2, "T1", calls(runCmd("go mod download", "read: connection reset by peer", 1))),
				rec(3, "T1", calls(runCmd("go mod download", "net/http: TLS handshake timeout", 1))),
			},
			want: []int{3},
			wantDiag: `run {"command":"go mod download"} failed 3 times in a row in iterations 1-3 with no workspace change in between: ` +
				`3 different error texts, the newest "net/http: TLS handshake timeout"; evidence weak (3 failed calls, threshold 3)`,
			wantAction:   events.ActionNudge,
			wantStrength: []events.Strength{events.StrengthWeak},
		},
		{
			name: "a timestamp and a request id in the message, then a fourth try",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("docker push acme/api:1.4", "2026/01/18 10:41:07 denied: requested access to the resource is denied (request 7f3a9c)", 1))),
				rec(2, "T1", calls(runCmd("docker push acme/api:1.4", "2026/01/18 10:41:39 unauthorized: authentication required (request 91bd0e)", 1))),
				rec(3, "T1", calls(runCmd("docker push acme/api:1.4", "2026/01/18 10:42:02 denied: requested access to the resource is denied (request c0ffee)", 1))),
				rec(4, "T1", calls(runCmd("docker push acme/api:1.4", "2026/01/18 10:42:30 unauthorized: authentication required (request 5e1a77)", 1))),
			},
			want:         []int{3, 4},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			name:    "repeat threshold from config",
			cfg:     Config{RepeatThreshold: 2},
			records: []events.IterationRecord{npm(1, "2026-01-18T10_22_33_123Z"), npm(2, "2026-01-18T10_23_05_871Z")},
			want:    []int{2},
		},
		// Healthy look-alikes.
		{
			name: "re-run after each edit, failing the same way",
			records: []events.IterationRecord{
				rec(1, "T1", calls(goTestFail("0.012s"))),
				rec(2, "T1", files("a.go"), calls(editFile("a.go", "1", "2"), goTestFail("0.011s"))),
				rec(3, "T1", files("a.go"), calls(editFile("a.go", "2", "3"), goTestFail("0.013s"))),
			},
		},
		{
			name: "re-run after a change seen only by hash",
			records: []events.IterationRecord{
				npm(1, "2026-01-18T10_22_33_123Z", hash("h1")), npm(2, "2026-01-18T10_23_05_871Z", hash("h2")),
				npm(3, "2026-01-18T10_23_41_002Z", hash("h2")),
			},
		},
		{
			name: "a success in between ends the count (a flaky test)",
			records: []events.IterationRecord{
				rec(1, "T1", calls(goTestFail("0.012s"))),
				rec(2, "T1", calls(runCmd("go test ./...", "ok  \tgithub.com/acme/x\t0.010s\n", 0))),
				rec(3, "T1", calls(goTestFail("0.015s"))),
				rec(4, "T1", calls(goTestFail("0.011s"))),
			},
		},
		{
			name: "two failures with different messages, then a success",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("go mod download", "dial tcp 142.250.74.113:443: i/o timeout", 1))),
				rec(2, "T1", calls(runCmd("go mod download", "read: connection reset by peer", 1))),
				rec(3, "T1", calls(runCmd("go mod download", "", 0))),
				rec(4, "T1", calls(runCmd("go mod download", "net/http: TLS handshake timeout", 1))),
			},
		},
		{
			name: "a failing poll whose progress counter moves",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("kubectl rollout status deploy/api", "0 of 3 updated replicas are available...\nerror: timed out waiting for the condition", 1))),
				rec(2, "T1", calls(runCmd("kubectl rollout status deploy/api", "1 of 3 updated replicas are available...\nerror: timed out waiting for the condition", 1))),
				rec(3, "T1", calls(runCmd("kubectl rollout status deploy/api", "2 of 3 updated replicas are available...\nerror: timed out waiting for the condition", 1))),
			},
		},
		{
			name: "the same error from different commands is no_progress's",
			records: []events.IterationRecord{
				rec(1, "T1", calls(runCmd("go build ./...", "./a.go:3:2: undefined: Foo", 1))),
				rec(2, "T1", calls(runCmd("go vet ./...", "./a.go:3:2: undefined: Foo", 1))),
				rec(3, "T1", calls(runCmd("go test ./...", "./a.go:3:2: undefined: Foo", 1))),
			},
		},
		{
			name: "successful repeats are circular_tools'",
			records: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", "A"))), rec(2, "T1", calls(readFile("a.go", "A"))), rec(3, "T1", calls(readFile("a.go", "A"))),
			},
		},
		{
			name: "the newest iteration changed the workspace",
			records: []events.IterationRecord{
				npm(1, "2026-01-18T10_22_33_123Z"), npm(2, "2026-01-18T10_23_05_871Z"),
				npm(3, "2026-01-18T10_23_41_002Z", files("package.json")),
			},
		},
	})
}

func TestNormalizeFailure(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"go test durations", "FAIL\tgithub.com/acme/x\t0.012s", "FAIL\tgithub.com/acme/x\t0.231s", true},
		{"ISO timestamps", "token expired at 2026-01-18T10:41:07Z", "token expired at 2026-01-19T08:02:55.120+01:00", true},
		{"clock times", "[10:41:07] connect: refused", "[10:42:13.5] connect: refused", true},
		{"UUIDs", "request 3f2b8c1e-9a4d-4b7e-8f10-2c6d5e4a9b01 failed", "request 0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d failed", true},
		{"hex ids", "endpoint orders-db-1 (3f9a1c07be52d1e6): port is already allocated", "endpoint orders-db-1 (a81d4c9e2f7b03c6): port is already allocated", true},
		{"pointers", "panic: nil map at 0xc000123456", "panic: nil map at 0xc0001a9f00", true},
		{"absolute temp paths", "open /tmp/pytest-of-root/pytest-7/out.csv: no such file", "open /tmp/pytest-of-root/pytest-12/out.csv: no such file", true},
		{"quoted absolute paths", `File "/home/ci/proj/x.py", line 12`, `File "/work/proj/x.py", line 12`, true},
		{"whitespace", "error:   a\n\tb", "error: a b", true},
		{"relative paths name what is broken", "./a.go:12:2: undefined: Foo", "./b.go:12:2: undefined: Foo", false},
		{"different symbols", "./a.go:12:2: undefined: Foo", "./a.go:12:2: undefined: Bar", false},
		{"URLs are not paths", "404 Not Found - GET https://registry.npmjs.org/left-pad", "404 Not Found - GET https://registry.npmjs.org/right-pad", false},
		{"progress counters are kept", "1 of 3 updated replicas", "2 of 3 updated replicas", false},
		{"fractions are kept", "12/40 tests done", "13/40 tests done", false},
		{"percentages are kept", "downloaded 45%", "downloaded 60%", false},
		{"words of hex letters are words", "deadbeef effaced", "deadbeef defaced", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			na, nb := normalizeFailure(tc.a), normalizeFailure(tc.b)
			if (na == nb) != tc.same {
				t.Errorf("normalized\n %q\n %q\nsame = %v, want %v", na, nb, na == nb, tc.same)
			}
		})
	}
}

func TestFailureOf(t *testing.T) {
	tests := []struct {
		name      string
		call      events.ToolCall
		failed    bool
		quote     string
		sameLine  string // another output whose failure line must match
		otherLine string // one whose failure line must not
	}{
		{name: "success", call: runCmd("ls", "a.go", 0)},
		{
			name: "go test picks the FAIL line, not the bare FAIL", failed: true,
			call:  runCmd("go test", "=== RUN   TestLoad\n--- FAIL: TestLoad (0.00s)\n    load_test.go:9: boom\nFAIL\n", 1),
			quote: "--- FAIL: TestLoad (0.00s)",
		},
		{
			name: "a tool error wins over the output", failed: true,
			call:  events.ToolCall{Name: "read_file", Output: "ignored", Error: `read_file: path "x" does not exist`},
			quote: `read_file: path "x" does not exist`,
		},
		{
			name: "pytest skips the banner", failed: true,
			call:  runCmd("pytest", "=================== FAILURES ===================\n____ test_x ____\nE       AssertionError: assert 1 == 2\n", 1),
			quote: "E       AssertionError: assert 1 == 2",
		},
		{
			name: "an error beats a generic FAILED banner", failed: true,
			call:  runCmd("./gradlew test", "> Task :app:test FAILED\n\nOrderServiceTest > refundCannotExceedCapture() FAILED\n    org.opentest4j.AssertionFailedError: expected: <1> but was: <2>\n\nBUILD FAILED in 4s\n", 1),
			quote: "org.opentest4j.AssertionFailedError: expected: <1> but was: <2>",
		},
		{
			name: "a traceback is quoted by its error, not its header", failed: true,
			call:  runCmd("python -m pipeline", "Traceback (most recent call last):\n  File \"/work/pipeline/cli.py\", line 6, in main\nKeyError: 'currency'\n", 1),
			quote: "KeyError: 'currency'",
		},
		{
			name: "no keyword: the first line", failed: true,
			call:  runCmd("grep -q x a.txt", "\n  nothing here\n", 1),
			quote: "nothing here",
		},
		{
			name: "the tool's prefix is not part of the error", failed: true,
			call:     runCmd("go vet", "# acme\nvet: ./a.go:3:2: undefined: Foo\n", 1),
			quote:    "vet: ./a.go:3:2: undefined: Foo",
			sameLine: "# acme\n./a.go:3:2: undefined: Foo\n",
			// Another symbol is another error.
			otherLine: "# acme\n./a.go:3:2: undefined: Bar\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, failed := failureOf(tc.call)
			if failed != tc.failed || f.quote != tc.quote {
				t.Fatalf("failureOf = %+v, %v; want quote %q, %v", f, failed, tc.quote, tc.failed)
			}
			if tc.sameLine != "" {
				g, _ := failureOf(runCmd("go build", tc.sameLine, 1))
				if g.line != f.line {
					t.Errorf("lines differ: %q and %q", f.line, g.line)
				}
			}
			if tc.otherLine != "" {
				g, _ := failureOf(runCmd("go build", tc.otherLine, 1))
				if g.line == f.line {
					t.Errorf("lines are the same: %q", f.line)
				}
			}
		})
	}
	// The exit code is part of the identity of a failure.
	a, _ := failureOf(runCmd("x", "boom", 1))
	b, _ := failureOf(runCmd("x", "boom", 2))
	if a.fingerprint == b.fingerprint {
		t.Errorf("exit codes 1 and 2 share fingerprint %q", a.fingerprint)
	}
	if fmt.Sprint(outcomeOf(runCmd("x", "1 of 3", 0))) == fmt.Sprint(outcomeOf(runCmd("x", "2 of 3", 0))) {
		t.Error("successful outputs must compare exactly")
	}
}
