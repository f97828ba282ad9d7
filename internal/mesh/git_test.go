package mesh_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// gitIn runs git in dir as a person would.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Person", "-c", "user.email=person@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// repoWorkspace is a workspace with files, committed on main.
func repoWorkspace(t *testing.T, files map[string]string) string {
	t.Helper()
	ws := workspace(t, files)
	gitIn(t, ws, "init", "-q")
	gitIn(t, ws, "config", "user.name", "Ada")
	gitIn(t, ws, "config", "user.email", "ada@example.com")
	gitIn(t, ws, "add", "-A")
	gitIn(t, ws, "commit", "-q", "-m", "initial commit")
	return ws
}

// startOnBranch publishes session.started for p in ws on branch, as `ralph
// run` does.
func startOnBranch(t *testing.T, m *mesh.Mesh, session string, p prd.PRD, ws string, g events.Git) {
	t.Helper()
	env, err := events.New(events.SessionStarted, session, "", 0, time.Now(), events.SessionStartedData{PRD: p, Workspace: ws, Git: &g})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Bus.Publish(context.Background(), env); err != nil {
		t.Fatal(err)
	}
}

// commitsOf is base..branch, oldest first: "sha subject".
func commitsOf(t *testing.T, ws, rev string) []string {
	t.Helper()
	out := gitIn(t, ws, "log", "--reverse", "--format=%H %s", rev)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// Each approved task is one commit on the session's branch, created from
// HEAD: subject "<id>: <title>", the critic's verdict as the body, the
// session's trailers, the user's identity, progress.txt in it; the next
// task reads the codebase patterns the first one found, and the critic
// reviews the task's diff.
func TestSessionCommitsEachApprovedTaskOnItsBranch(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {first_user_contains: "Task G1:", last_role: user}, reply: {content: "Writing.", tool_calls: [{name: write_file, arguments: {path: a.txt, content: "alpha\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task G1:"}, reply: {content: "a.txt holds alpha.\nLearnings:\n- Pattern: data files end with a newline\n- printf is safer than echo here"}}
  - {model: builder, when: {first_user_contains: "Task G2:", last_role: user}, reply: {content: "Writing.", tool_calls: [{name: write_file, arguments: {path: b.txt, content: "beta\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task G2:"}, reply: {content: "b.txt holds beta."}}
  - {model: critic, reply: {content: '{"approved": true, "feedback": "The file is there\nand correct."}'}}
`))
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")
	ws := repoWorkspace(t, map[string]string{"README.md": "# repo\n"})
	base := gitIn(t, ws, "rev-parse", "HEAD")
	startOnBranch(t, m, "e2e-git", parsePRD(t, `
title: Two files
tasks:
  - {id: G1, title: Alpha file, acceptance_criteria: [a.txt holds alpha], verify: "grep -qx alpha a.txt"}
  - {id: G2, title: Beta file, acceptance_criteria: [b.txt holds beta], depends_on: [G1]}
`), ws, events.Git{Branch: "ralph/two-files"})
	got := h.wait(m, "e2e-git")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s: %v", last.Type, types(got))
	}

	if cur := gitIn(t, ws, "branch", "--show-current"); cur != "ralph/two-files" {
		t.Fatalf("the workspace is on %q, want the session's branch", cur)
	}
	commits := commitsOf(t, ws, base+"..ralph/two-files")
	if len(commits) != 2 || !strings.HasSuffix(commits[0], " G1: Alpha file") || !strings.HasSuffix(commits[1], " G2: Beta file") {
		t.Fatalf("commits on the branch %q", commits)
	}
	if gitIn(t, ws, "rev-parse", "main") != base {
		t.Error("main moved")
	}
	g1 := strings.Fields(commits[0])[0]
	msg := gitIn(t, ws, "log", "-1", "--format=%B", g1)
	want := "G1: Alpha file\n\nThe file is there and correct. The verify command `grep -qx alpha a.txt` passed.\n\nRalph-Session: e2e-git\nRalph-Task: G1"
	if msg != want {
		t.Errorf("G1's message:\n%s\nwant:\n%s", msg, want)
	}
	if who := gitIn(t, ws, "log", "-1", "--format=%an <%ae>", g1); who != "Ada <ada@example.com>" {
		t.Errorf("G1 by %s, want the repository's user", who)
	}
	if files := gitIn(t, ws, "show", "--name-only", "--format=", g1); files != "a.txt\nprogress.txt" {
		t.Errorf("G1 committed %q", files)
	}
	if status := gitIn(t, ws, "status", "--porcelain"); status != "" {
		t.Errorf("work left uncommitted: %q", status)
	}
	progress, _ := os.ReadFile(filepath.Join(ws, "progress.txt"))
	for _, want := range []string{"## Codebase patterns\n- data files end with a newline\n", "## G1: Alpha file (session e2e-git)\nDone: a.txt holds alpha.\nFiles: a.txt\n",
		"- printf is safer than echo here", "## G2: Beta file (session e2e-git)"} {
		if !strings.Contains(string(progress), want) {
			t.Errorf("progress.txt lacks %q:\n%s", want, progress)
		}
	}

	// The events carry the commits.
	var shas []string
	for _, d := range eventsOf[events.TaskCompletedData](t, got, events.TaskCompleted) {
		if d.Commit == nil {
			t.Fatalf("task.completed %+v without its commit", d)
		}
		shas = append(shas, d.Commit.SHA)
	}
	end := last[events.SessionCompletedData](t, got, events.SessionCompleted)
	if end.Branch != "ralph/two-files" || len(end.Commits) != 2 || !slices.Equal(shas, []string{g1, strings.Fields(commits[1])[0]}) ||
		end.Commits[1].SHA != shas[1] {
		t.Fatalf("task.completed commits %v, session.completed %+v, git %v", shas, end, commits)
	}

	// G2 started with the pattern G1 found.
	g2, err := m.Store.Units(context.Background(), "e2e-git", "G2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(g2, func(u unitT) bool {
		return u.ID == "patterns-G2" && strings.Contains(u.Content, "data files end with a newline")
	}) {
		t.Error("G2's first context lacks the codebase patterns")
	}
	// The critic reviewed G2's diff: from G1's commit to the work tree.
	if !slices.ContainsFunc(h.llm.Requests(), func(r scriptllm.Recorded) bool {
		return r.Model == "critic" && slices.ContainsFunc(r.Messages, func(msg scriptllm.Message) bool {
			return strings.Contains(msg.Content, "from commit "+g1[:12]) && strings.Contains(msg.Content, "+++ b/b.txt\n@@ -0,0 +1,1 @@\n+beta")
		})
	}) {
		t.Error("the critic was not shown G2's diff")
	}
}

// A pre-commit hook that refuses the commit is a rejection the builder
// sees, with the hook's output: the builder fixes the work and the task is
// committed once.
func TestFailingPreCommitHookIsARejection(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {any_contains: "still says TODO", last_role: user}, reply: {content: "Fixing.", tool_calls: [{name: write_file, arguments: {path: a.txt, content: "done\n"}}]}}
  - {model: builder, when: {any_contains: "still says TODO"}, reply: {content: "a.txt is finished."}}
  - {model: builder, when: {last_role: user}, reply: {content: "Writing.", tool_calls: [{name: write_file, arguments: {path: a.txt, content: "TODO\n"}}]}}
  - {model: builder, reply: {content: "a.txt exists."}}
  - {model: critic, reply: {content: '{"approved": true, "feedback": "a.txt exists"}'}}
`))
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")
	ws := repoWorkspace(t, map[string]string{"README.md": "# repo\n"})
	hook := filepath.Join(ws, ".git", "hooks", "pre-commit")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\nif grep -q TODO a.txt; then echo 'lint: a.txt still says TODO' >&2; exit 1; fi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := gitIn(t, ws, "rev-parse", "HEAD")
	startOnBranch(t, m, "e2e-hook", parsePRD(t, `
tasks:
  - {id: H1, title: Finish a.txt, acceptance_criteria: [a.txt exists]}
`), ws, events.Git{Branch: "ralph/hook"})
	got := h.wait(m, "e2e-hook")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s: %v", last.Type, types(got))
	}
	if n := len(eventsOf[events.CritiqueCompletedData](t, got, events.CritiqueCompleted)); n != 2 {
		t.Fatalf("%d reviews, want 2 (approved, refused by the hook, approved again)", n)
	}
	commits := commitsOf(t, ws, base+"..ralph/hook")
	if len(commits) != 1 {
		t.Fatalf("commits %q, want one", commits)
	}
	if a := gitIn(t, ws, "show", "HEAD:a.txt"); a != "done" {
		t.Errorf("committed a.txt %q", a)
	}
	units, err := m.Store.Units(context.Background(), "e2e-hook", "H1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(units, func(u unitT) bool {
		return strings.HasPrefix(u.ID, "commit-refused-") && strings.Contains(u.Content, "pre-commit hook") && strings.Contains(u.Content, "lint: a.txt still says TODO")
	}) {
		t.Error("the hook's refusal did not reach the builder")
	}
	progress := gitIn(t, ws, "show", "HEAD:progress.txt")
	if strings.Count(progress, "## H1: ") != 1 {
		t.Errorf("progress.txt:\n%s", progress)
	}
}

// A session paused after its first commit goes on from its branch's last
// commit when resumed, wherever the person left the workspace: a commit the
// person made on the branch meanwhile is kept, and the next task's commit
// follows it.
func TestResumedSessionContinuesTheBranch(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {first_user_contains: "Task R1:", last_role: user}, reply: {content: "Writing.", tool_calls: [{name: write_file, arguments: {path: a.txt, content: "a\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task R1:"}, reply: {content: "a.txt written."}}
  - {model: builder, when: {any_contains: "lock is gone"}, reply: {content: "b.txt is still there."}}
  - {model: builder, when: {first_user_contains: "Task R2:", last_role: user}, reply: {content: "Writing.", tool_calls: [{name: write_file, arguments: {path: b.txt, content: "b\n"}}, {name: write_file, arguments: {path: .git/index.lock, content: ""}}]}}
  - {model: builder, when: {first_user_contains: "Task R2:"}, reply: {content: "b.txt written."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")
	ws := repoWorkspace(t, map[string]string{"README.md": "# repo\n"})
	base := gitIn(t, ws, "rev-parse", "HEAD")
	startOnBranch(t, m, "e2e-resume", parsePRD(t, `
tasks:
  - {id: R1, title: First, acceptance_criteria: [a.txt exists]}
  - {id: R2, title: Second, acceptance_criteria: [b.txt exists], depends_on: [R1]}
`), ws, events.Git{Branch: "ralph/resume"})
	got := h.wait(m, "e2e-resume")
	esc := got[len(got)-1]
	var d events.SessionEscalatedData
	if esc.Type != events.SessionEscalated || esc.Decode(&d) != nil || !strings.Contains(d.Reason, "could not be committed") {
		t.Fatalf("session ended with %s %+v, want escalated because git could not commit", esc.Type, d)
	}
	if commits := commitsOf(t, ws, base+"..ralph/resume"); len(commits) != 1 || !strings.HasSuffix(commits[0], " R1: First") {
		t.Fatalf("commits before the pause %q", commits)
	}
	// The person removes the lock, commits a fix of their own on the
	// branch, and leaves the workspace on main.
	if err := os.Remove(filepath.Join(ws, ".git", "index.lock")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "fix.txt"), []byte("by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, ws, "add", "fix.txt")
	gitIn(t, ws, "commit", "-q", "-m", "a person's fix")
	manual := gitIn(t, ws, "rev-parse", "HEAD")
	gitIn(t, ws, "switch", "-q", "main")

	resume, err := events.New(events.SessionResumed, "e2e-resume", d.TaskID, esc.Step, time.Now(),
		events.SessionResumedData{Message: "The lock is gone; claim the task done again."})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Bus.Publish(context.Background(), resume); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var end events.Envelope
	if err := m.Bus.Follow(ctx, "e2e-resume", func(env events.Envelope) (bool, error) {
		if env.Type.Terminal() && env.Step > esc.Step {
			end = env
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the resumed session did not end: %v", err)
	}
	if end.Type != events.SessionCompleted {
		t.Fatalf("the resumed session ended with %s", end.Type)
	}
	if cur := gitIn(t, ws, "branch", "--show-current"); cur != "ralph/resume" {
		t.Fatalf("the workspace is on %q, want the session's branch", cur)
	}
	commits := commitsOf(t, ws, base+"..ralph/resume")
	if len(commits) != 3 || !strings.HasSuffix(commits[1], " a person's fix") || !strings.HasSuffix(commits[2], " R2: Second") {
		t.Fatalf("commits after the resume %q", commits)
	}
	if parent := gitIn(t, ws, "rev-parse", "ralph/resume^"); parent != manual {
		t.Errorf("R2's commit follows %s, want the person's commit %s", parent, manual)
	}
	if files := gitIn(t, ws, "show", "--name-only", "--format=", "ralph/resume"); files != "b.txt\nprogress.txt" {
		t.Errorf("R2 committed %q", files)
	}
}

// A Ralph prd.json runs as it is: stories by priority, those that pass
// skipped, and each approved story's passes written back in its own commit,
// every other byte of the file kept.
func TestPRDJSONRunsByPriorityAndTicksStoriesOff(t *testing.T) {
	const prdJSON = `{
  "project": "Letters",
  "branchName": "ralph/letters",
  "owner": {"team": "core"},
  "userStories": [
    {"id": "US-1", "title": "Letter A", "acceptanceCriteria": ["a.txt exists"], "priority": 3, "passes": false, "notes": ""},
    {"id": "US-2", "title": "Letter B", "acceptanceCriteria": ["b.txt exists"], "priority": 1, "passes": true, "notes": "done before"},
    {"id": "US-3", "title": "Letter C", "acceptanceCriteria": ["c.txt exists"], "priority": 2, "passes": false, "estimate": "1h"}
  ]
}
`
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {first_user_contains: "Task US-1:", last_role: user}, reply: {content: "Writing.", tool_calls: [{name: write_file, arguments: {path: a.txt, content: "a\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task US-3:", last_role: user}, reply: {content: "Writing.", tool_calls: [{name: write_file, arguments: {path: c.txt, content: "c\n"}}]}}
  - {model: builder, reply: {content: "Written."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")
	ws := repoWorkspace(t, map[string]string{"prd.json": prdJSON})
	base := gitIn(t, ws, "rev-parse", "HEAD")
	f, err := prd.ParseFile([]byte(prdJSON), ".json")
	if err != nil {
		t.Fatal(err)
	}
	startOnBranch(t, m, "e2e-prdjson", f.PRD, ws, events.Git{Branch: f.Branch, PRDFile: "prd.json"})
	got := h.wait(m, "e2e-prdjson")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s: %v", last.Type, types(got))
	}
	var started []string
	for _, d := range eventsOf[events.TaskStartedData](t, got, events.TaskStarted) {
		started = append(started, d.Task.ID)
	}
	if !slices.Equal(started, []string{"US-3", "US-1"}) {
		t.Fatalf("stories started %v, want US-3 (priority 2) then US-1 (priority 3), US-2 skipped", started)
	}
	commits := commitsOf(t, ws, base+"..ralph/letters")
	if len(commits) != 2 {
		t.Fatalf("commits %q", commits)
	}
	// Each commit ticks off its own story, in the same commit as the work.
	first := gitIn(t, ws, "show", strings.Fields(commits[0])[0]+":prd.json")
	if want := strings.Replace(prdJSON, `"priority": 2, "passes": false`, `"priority": 2, "passes": true`, 1); first+"\n" != want {
		t.Errorf("prd.json in US-3's commit:\n%s\nwant:\n%s", first, want)
	}
	if files := gitIn(t, ws, "show", "--name-only", "--format=", strings.Fields(commits[0])[0]); files != "c.txt\nprd.json\nprogress.txt" {
		t.Errorf("US-3's commit has %q", files)
	}
	final, _ := os.ReadFile(filepath.Join(ws, "prd.json"))
	if want := strings.ReplaceAll(prdJSON, `"passes": false`, `"passes": true`); string(final) != want {
		t.Errorf("prd.json at the end:\n%s\nwant:\n%s", final, want)
	}
}
