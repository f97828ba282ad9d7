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
	// wantStrength is the strength of each signal (parallel to want), when
	// set.
	wantStrength []events.Strength
}

// runTrajectories feeds each trajectory to a Detector running only p, the
// way the scanner does, and checks where p fires and what it says.
func runTrajectories(t *testing.T, p Pattern, cases []trajectory) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDetector(tc.cfg, []Pattern{p})
			var got []int
			var strengths []events.Strength
			var first *events.Signal
			for _, r := range tc.records {
				s := d.Observe(r)
				if s == nil {
					continue
				}
				checkSignal(t, s, r, p.Name())
				got = append(got, s.Iteration)
				strengths = append(strengths, s.Strength)
				if first == nil {
					first = s
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("fired at %v, want %v (first: %+v)", got, tc.want, first)
			}
			if tc.wantStrength != nil && !slices.Equal(strengths, tc.wantStrength) {
				t.Errorf("strengths %v, want %v", strengths, tc.wantStrength)
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
	// Every pattern grades its evidence, and the action follows: weak
	// evidence gets a nudge whatever the pattern, and says so.
	switch s.Strength {
	case events.StrengthWeak:
		if s.Action != events.ActionNudge || !strings.Contains(s.Diagnosis, "; evidence weak (") {
			t.Errorf("weak signal with action %s and diagnosis %q, want a nudge saying the evidence is weak", s.Action, s.Diagnosis)
		}
	case events.StrengthStrong:
		if !strings.Contains(s.Diagnosis, "; evidence strong (") {
			t.Errorf("strong signal whose diagnosis %q does not say so", s.Diagnosis)
		}
	default:
		t.Errorf("signal strength %q, want weak or strong", s.Strength)
	}
}
