package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// TestEscalateThenResume: a task that stays stuck after a nudge, a prune and
// a decomposition the model could not produce is escalated; `ralph resume`
// hands the builder a person's guidance and the session completes.
func TestEscalateThenResume(t *testing.T) {
	meshEnv(t)
	srv := scriptllm.New(mustScript(t, `
rules:
  - {model: b, when: {any_contains: "use notes-v2.txt"}, times: 1, reply: {content: "Following the guidance.", tool_calls: [{name: write_file, arguments: {path: summary.txt, content: "buy bread\n"}}]}}
  - {model: b, when: {any_contains: "use notes-v2.txt"}, reply: {content: "summary.txt summarises notes-v2.txt."}}
  - {model: b, reply: {content: "Let me read the notes again.", tool_calls: [{name: read_file, arguments: {path: notes.txt}}]}}
  - {model: p, reply: {content: "notes.txt was read many times and is empty."}}
  - {model: d, reply: {content: "Sure! First read the notes, then write the summary."}}
  - {model: c, reply: {content: '{"approved": true}'}}
`))
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	t.Setenv("RALPH_LLM_BASE_URL", url)
	for role, model := range map[string]string{"BUILDER": "b", "CRITIC": "c", "PRUNER": "p", "DECOMPOSER": "d"} {
		t.Setenv("RALPH_"+role+"_MODEL", model)
	}
	startServices(t)
	ws := gitWorkspace(t)
	writeFile(t, ws, "notes.txt", "")
	writeFile(t, ws, "notes-v2.txt", "buy bread\n")
	prdPath := writeFile(t, t.TempDir(), "p.yaml", "tasks:\n  - {id: E1, title: Summarise the notes, acceptance_criteria: [summary.txt summarises the notes]}\n")

	runOut, code, err := ralph(t, "run", prdPath, "--workspace", ws, "--session", "cli-esc", "--allow-dirty")
	out := runOut
	if code != 1 || !strings.Contains(err.Error(), "session cli-esc escalated") || !strings.Contains(err.Error(), "could not be decomposed") ||
		!strings.Contains(err.Error(), "after one repair request") || !strings.Contains(err.Error(), "ralph resume cli-esc") {
		t.Fatalf("run: exit %d, err %v\n%s", code, err, out)
	}
	for _, want := range []string{"pruned E1", "could not be decomposed", "session escalated"} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}

	// Bad input is refused before anything is published.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"resume", "cli-esc"}, "--message is required"},
		{[]string{"resume", "cli-esc", "--message", "  "}, "--message is required"},
		{[]string{"resume", "no-such-session", "--message", "x"}, "no events"},
		{[]string{"resume", "bad id!", "--message", "x"}, "session"},
	} {
		if _, code, err := ralph(t, c.args...); code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, err %v; want 2 and %q", c.args, code, err, c.want)
		}
	}

	out, code, err = ralph(t, "resume", "cli-esc", "--message", "notes.txt is empty on purpose: use notes-v2.txt")
	if code != 0 {
		t.Fatalf("resume: exit %d, err %v\n%s", code, err, out)
	}
	if !strings.Contains(out, "session resumed at task E1") || !strings.Contains(out, "session completed") {
		t.Fatalf("resume output:\n%s", out)
	}
	if strings.Contains(out, "pruned E1") {
		t.Fatalf("resume printed the history before the resume:\n%s", out)
	}
	checkResumeSummary(t, runOut, out)
	if data, err := os.ReadFile(filepath.Join(ws, "summary.txt")); err != nil || string(data) != "buy bread\n" {
		t.Fatalf("summary.txt = %q, %v", data, err)
	}
	// A completed session cannot be resumed.
	if _, code, err := ralph(t, "resume", "cli-esc", "--message", "again"); code != 2 || !strings.Contains(err.Error(), "not escalated") {
		t.Fatalf("resume of a completed session: exit %d, err %v", code, err)
	}
}

func TestResumeNeedsTheMesh(t *testing.T) {
	t.Setenv("RALPH_NATS_URL", "")
	if _, code, err := ralph(t, "resume", "s-1", "--message", "go on"); code != 2 || !strings.Contains(err.Error(), "RALPH_NATS_URL") {
		t.Fatalf("exit %d, err %v; want 2 naming RALPH_NATS_URL", code, err)
	}
}

// summaryFigures reads "<label>iterations N, builder tokens T" and
// "builder model: <label2>C calls" from a summary.
func summaryFigures(t *testing.T, out, label, modelLabel string) (iterations, tokens, calls int) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(label) + `iterations (\d+), builder tokens (\d+),`).FindStringSubmatch(out)
	c := regexp.MustCompile(`(?m)^  builder model: ` + regexp.QuoteMeta(modelLabel) + `(\d+) calls`).FindStringSubmatch(out)
	if m == nil || c == nil {
		t.Fatalf("summary lacks %q figures or %q builder calls:\n%s", label, modelLabel, out)
	}
	iterations, _ = strconv.Atoi(m[1])
	tokens, _ = strconv.Atoi(m[2])
	calls, _ = strconv.Atoi(c[1])
	return iterations, tokens, calls
}

// checkResumeSummary: after a resume the summary keeps the resumed part's
// figures apart from the whole session's, and the whole is the run's part
// plus the resumed part.
func checkResumeSummary(t *testing.T, runOut, resumeOut string) {
	t.Helper()
	runIts, runTokens, runCalls := summaryFigures(t, runOut, "", "")
	partIts, partTokens, partCalls := summaryFigures(t, resumeOut, "resumed part:  ", "resumed part ")
	wholeIts, wholeTokens, _ := summaryFigures(t, resumeOut, "whole session: ", "resumed part ")
	wholeCalls := regexp.MustCompile(`(?m)^  builder model: .*; whole session (\d+) calls`).FindStringSubmatch(resumeOut)
	if partIts == 0 || partCalls == 0 || wholeCalls == nil {
		t.Fatalf("resume summary:\n%s", resumeOut)
	}
	if wholeIts != runIts+partIts || wholeTokens != runTokens+partTokens || wholeCalls[1] != strconv.Itoa(runCalls+partCalls) {
		t.Fatalf("whole session (%d iterations, %d tokens, %s calls) is not the run's (%d, %d, %d) plus the resumed part's (%d, %d, %d):\n%s\n%s",
			wholeIts, wholeTokens, wholeCalls[1], runIts, runTokens, runCalls, partIts, partTokens, partCalls, runOut, resumeOut)
	}
}
