package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/demo"
	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// ralph runs the CLI in-process and returns its output and exit code.
func ralph(t *testing.T, args ...string) (string, int, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	code := 0
	if err != nil {
		code = 1
		var ee exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
	}
	return out.String(), code, err
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// gitWorkspace is a workspace a session can run in: the top level of a
// git repository with one commit and a clean work tree.
func gitWorkspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "README.md", "# workspace\n")
	for _, args := range [][]string{{"init", "-q"}, {"add", "README.md"}, {"commit", "-q", "-m", "initial commit"}} {
		cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

func TestStuckScan(t *testing.T) {
	out, code, err := ralph(t, "stuck", "scan", "../../internal/stuckbench/testdata/stuck_circular.jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	type signal struct {
		Iteration  int     `json:"iteration"`
		Pattern    string  `json:"pattern"`
		Confidence float64 `json:"confidence"`
		Action     string  `json:"action"`
		Strength   string  `json:"strength"`
		Diagnosis  string  `json:"diagnosis"`
	}
	if len(lines) != 2 {
		t.Fatalf("%d signals, want 2:\n%s", len(lines), out)
	}
	// Three identical reads are weak evidence (a nudge); the fourth makes
	// it strong (prune the context).
	for i, want := range []signal{
		{Iteration: 3, Pattern: "circular_tools", Action: "nudge", Strength: "weak"},
		{Iteration: 4, Pattern: "circular_tools", Action: "prune_context", Strength: "strong"},
	} {
		var sig signal
		if err := json.Unmarshal([]byte(lines[i]), &sig); err != nil {
			t.Fatalf("not JSON: %q", lines[i])
		}
		if sig.Iteration != want.Iteration || sig.Pattern != want.Pattern || sig.Action != want.Action || sig.Strength != want.Strength || sig.Diagnosis == "" {
			t.Fatalf("signal %d: %+v, want %+v", i, sig, want)
		}
	}
	// Same input, byte-identical output.
	again, _, _ := ralph(t, "stuck", "scan", "../../internal/stuckbench/testdata/stuck_circular.jsonl")
	if again != out {
		t.Fatal("stuck scan is not deterministic")
	}
}

func TestStuckScanBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.jsonl", `{"iteration": 1}`+"\n"+`{"iteration": "two"}`+"\n")
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"bad line", []string{"stuck", "scan", bad}, []string{"bad.jsonl", "line 2"}},
		{"missing file", []string{"stuck", "scan", filepath.Join(dir, "nope.jsonl")}, []string{"nope.jsonl"}},
		{"bad window", []string{"stuck", "scan", "--window", "-3", bad}, []string{"--window"}},
		{"no file", []string{"stuck", "scan"}, []string{"accepts 1 arg"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code, err := ralph(t, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (err %v)", code, err)
			}
			if out != "" {
				t.Fatalf("printed output for bad input: %q", out)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// meshEnv points the CLI at the test NATS and Redis under a fresh prefix.
func meshEnv(t *testing.T) (prefix string) {
	t.Helper()
	prefix = meshtest.Prefix(t)
	t.Setenv("RALPH_NATS_URL", meshtest.NATSURL(t))
	t.Setenv("RALPH_REDIS_URL", meshtest.RedisURL(t))
	t.Setenv("RALPH_PREFIX", prefix)
	t.Setenv("RALPH_CONSOLE_ADDR", "127.0.0.1:0")
	return prefix
}

func streamMessages(t *testing.T, prefix string) uint64 {
	t.Helper()
	nc, err := nats.Connect(meshtest.NATSURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), events.StreamName(prefix))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestRunBadInputPublishesNothing(t *testing.T) {
	prefix := meshEnv(t)
	dir := t.TempDir()
	ws := t.TempDir()
	cases := []struct {
		name, file, content string
		extra               []string
		want                []string
	}{
		{"malformed yaml", "a.yaml", "tasks: [\n", nil, []string{"a.yaml", "bad YAML"}},
		{"malformed json", "b.json", `{"tasks": [}`, nil, []string{"b.json", "bad JSON"}},
		{"missing criteria", "c.yaml", "tasks:\n  - {id: T1, title: x}\n", nil, []string{"c.yaml", `task "T1"`, "acceptance_criteria"}},
		{"unknown field", "d.yaml", "tasks:\n  - {id: T1, title: x, acceptence: [y]}\n", nil, []string{"d.yaml", "acceptence"}},
		{"unknown dependency", "e.yaml", "tasks:\n  - {id: T1, title: x, acceptance_criteria: [y], depends_on: [T9]}\n", nil, []string{"e.yaml", "depends_on", "T9"}},
		{"missing file", "nope.yaml", "", nil, []string{"nope.yaml"}},
		{"missing workspace", "f.yaml", "tasks:\n  - {id: T1, title: x, acceptance_criteria: [y]}\n", []string{"--workspace", filepath.Join(dir, "nowhere")}, []string{"--workspace", "nowhere"}},
		{"bad session id", "g.yaml", "tasks:\n  - {id: T1, title: x, acceptance_criteria: [y]}\n", []string{"--session", "a.b"}, []string{"session id"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.file)
			if c.content != "" {
				writeFile(t, dir, c.file, c.content)
			}
			args := append([]string{"run", path}, c.extra...)
			if c.extra == nil || c.extra[0] != "--workspace" {
				args = append(args, "--workspace", ws)
			}
			_, code, err := ralph(t, args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (err %v)", code, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if n := streamMessages(t, prefix); n != 0 {
		t.Fatalf("%d events were published for bad input", n)
	}
}

// `ralph run` against an external mesh (services running elsewhere) and
// `ralph replay` of the same session.
func TestRunAgainstExternalMeshAndReplay(t *testing.T) {
	meshEnv(t)
	script, err := demo.Script()
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptllm.New(script)
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	t.Setenv("RALPH_LLM_BASE_URL", url)
	t.Setenv("RALPH_BUILDER_MODEL", demo.BuilderModel)
	t.Setenv("RALPH_CRITIC_MODEL", demo.CriticModel)
	t.Setenv("RALPH_PRUNER_MODEL", demo.PrunerModel)

	startServices(t)

	dir := t.TempDir()
	prdPath := writeFile(t, dir, "prd.yaml", string(demo.PRDYAML()))
	ws := filepath.Join(dir, "ws")
	if err := demo.Workspace(ws); err != nil {
		t.Fatal(err)
	}
	out, code, err := ralph(t, "run", prdPath, "--workspace", ws, "--json", "--session", "cli-run")
	if code != 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last events.Envelope
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Type != events.SessionCompleted {
		t.Fatalf("last line %q", lines[len(lines)-1])
	}
	replayed, code, err := ralph(t, "replay", "cli-run", "--json")
	if code != 0 {
		t.Fatalf("replay exit %d: %v", code, err)
	}
	// run stops at the session's end; a service may still add an event
	// after it (the stuck detector's analysis of the last step, the
	// memory of the last task), which replay shows. So run printed
	// exactly the events replay shows up to the end, in the same order.
	rlines := strings.Split(strings.TrimSpace(replayed), "\n")
	if len(rlines) < len(lines) {
		t.Fatalf("replay printed %d events, run printed %d", len(rlines), len(lines))
	}
	for i, l := range lines {
		if rlines[i] != l {
			t.Fatalf("event %d: run printed\n%s\nreplay printed\n%s", i+1, l, rlines[i])
		}
	}
	for _, l := range rlines[len(lines):] {
		t.Logf("after the end: %s", l)
	}
	human, code, _ := ralph(t, "replay", "cli-run")
	if code != 0 || !strings.Contains(human, "critic requested changes on T2") || !strings.Contains(human, "session completed") {
		t.Fatalf("human replay:\n%s", human)
	}
	if _, code, err := ralph(t, "run", prdPath, "--workspace", ws, "--session", "cli-run"); code != 2 || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("reusing a session id: exit %d, err %v", code, err)
	}
	if _, code, _ := ralph(t, "replay", "no-such-session"); code != 2 {
		t.Fatalf("replay of an unknown session exit %d, want 2", code)
	}
}

func TestRunFailedSessionExitsOne(t *testing.T) {
	meshEnv(t)
	// The mesh is reached with a password, which run must not print.
	t.Setenv("RALPH_NATS_URL", natsURLWithPassword(t, "run-s3cret"))
	srv := scriptllm.New(mustScript(t, `
rules:
  - {model: b, reply: {content: "again", tool_calls: [{name: run, arguments: {command: "date +%s%N > t"}}]}}
`))
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	t.Setenv("RALPH_LLM_BASE_URL", url)
	t.Setenv("RALPH_BUILDER_MODEL", "b")
	t.Setenv("RALPH_BUILDER_MAX_TURNS_PER_TASK", "2")
	startServices(t)
	prdPath := writeFile(t, t.TempDir(), "p.yaml", "tasks:\n  - {id: T1, title: x, acceptance_criteria: [y]}\n")
	out, code, err := ralph(t, "run", prdPath, "--workspace", gitWorkspace(t))
	if code != 1 || !strings.Contains(err.Error(), "used all 2 turns") {
		t.Fatalf("exit %d, err %v\n%s", code, err, out)
	}
	if !strings.Contains(out, "session failed") {
		t.Fatalf("output does not show the failure:\n%s", out)
	}
	if strings.Contains(out, "run-s3cret") || !strings.Contains(out, "mesh at nats://ralph:****@") {
		t.Fatalf("output does not mask the NATS password:\n%s", out)
	}
}

func TestConfigAndServiceArgs(t *testing.T) {
	t.Setenv("RALPH_LLM_API_KEY", "sk-hidden")
	out, code, _ := ralph(t, "config")
	if code != 0 || !strings.Contains(out, "RALPH_BUILDER_MODEL") || strings.Contains(out, "sk-hidden") {
		t.Fatalf("config output (exit %d):\n%s", code, out)
	}
	if _, code, err := ralph(t, "service", "nope"); code != 2 || !strings.Contains(err.Error(), `unknown service "nope"`) {
		t.Fatalf("exit %d, err %v", code, err)
	}
	t.Setenv("RALPH_STREAM_ACK_WAIT", "soon")
	if _, code, err := ralph(t, "config"); code != 2 || !strings.Contains(err.Error(), "ACK_WAIT") {
		t.Fatalf("bad env: exit %d, err %v", code, err)
	}
}

// startServices runs the loop's services on the mesh the environment names,
// as a separate deployment would, until the test ends.
func startServices(t *testing.T) {
	t.Helper()
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- m.RunServices(ctx, "builder", "critic", "stuckdetector", "pruner", "decomposer", "summarizer")
	}()
	t.Cleanup(func() { cancel(); <-done; m.Close() })
}

func mustScript(t *testing.T, yaml string) scriptllm.Script {
	t.Helper()
	s, err := scriptllm.ParseScript([]byte(yaml), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStuckBench(t *testing.T) {
	out, code, err := ralph(t, "stuck", "bench")
	if code != 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	for _, want := range []string{"precision", "recall", "action_error_loop", "monologue", "alternating", "compaction_loop", "chanting", "no_progress", "total",
		"look-alike kind", "false alarms", "distinct_reads", "shell_mix_with_repeats"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// A detector that cannot see loops misses the recall target: exit 1.
	t.Setenv("RALPH_STUCK_REPEAT_THRESHOLD", "9")
	t.Setenv("RALPH_STUCK_NO_PROGRESS_SPAN", "9")
	if out, code, err := ralph(t, "stuck", "bench"); code != 1 || !strings.Contains(err.Error(), "targets missed") {
		t.Fatalf("blunted detector: exit %d, err %v\n%s", code, err, out)
	}
	t.Setenv("RALPH_STUCK_REPEAT_THRESHOLD", "1")
	if _, code, err := ralph(t, "stuck", "bench"); code != 2 || !strings.Contains(err.Error(), "RALPH_STUCK_") {
		t.Fatalf("bad setting: exit %d, err %v", code, err)
	}
	t.Setenv("RALPH_STUCK_REPEAT_THRESHOLD", "3")
	if _, code, err := ralph(t, "stuck", "bench", "--corpus", t.TempDir()); code != 2 || !strings.Contains(err.Error(), "labels.json") {
		t.Fatalf("empty corpus dir: exit %d, err %v", code, err)
	}
}

func TestReportEscapesTheError(t *testing.T) {
	var b bytes.Buffer
	code := report(&b, exitError{code: 2, err: errors.New("task \"T1\": title \x1b]0;owned\x07 is\nbad\r✔ session completed")})
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if want := "ralph: task \"T1\": title \\x1b]0;owned\\x07 is\nbad\\r✔ session completed\n"; b.String() != want {
		t.Fatalf("printed %q, want %q", b.String(), want)
	}
	b.Reset()
	if code := report(&b, nil); code != 0 || b.Len() != 0 {
		t.Fatalf("no error: exit %d, printed %q", code, b.String())
	}
}

// A PRD over its bounds, one with a task that cannot fit in the builder
// model's window, and one too large for the bus are bad input: exit 2 with
// the reason, and nothing is published.
func TestRunRefusesAPRDOverItsLimits(t *testing.T) {
	prefix := meshEnv(t)
	dir, ws := t.TempDir(), gitWorkspace(t)
	tasks := func(n, descBytes int) string {
		var b strings.Builder
		b.WriteString("tasks:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - {id: T%d, title: t, description: %q, acceptance_criteria: [c]}\n", i+1, strings.Repeat("d", descBytes))
		}
		return b.String()
	}
	cases := []struct {
		name, prd string
		env       map[string]string
		want      []string
	}{
		{"over the byte limit", tasks(3, 100), map[string]string{"RALPH_PRD_MAX_BYTES": "200"},
			[]string{"more than the 200 allowed (RALPH_PRD_MAX_BYTES)"}},
		{"over the task limit", tasks(3, 1), map[string]string{"RALPH_PRD_MAX_TASKS": "2"},
			[]string{"3 tasks, more than the 2 allowed (RALPH_PRD_MAX_TASKS)"}},
		{"a task that cannot fit in the window", tasks(2, 20_000), map[string]string{"RALPH_BUILDER_CONTEXT_WINDOW": "6000"},
			[]string{"task T1 cannot start", "its first request needs", "context window of 6000 tokens", "RALPH_BUILDER_CONTEXT_WINDOW"}},
		{"too large for the bus", tasks(600, 2000), map[string]string{"RALPH_PRD_MAX_BYTES": "10000000", "RALPH_PRD_MAX_TASKS": "1000"},
			[]string{"too large for this mesh", "session.started", "max payload"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			path := writeFile(t, dir, "p.yaml", c.prd)
			_, code, err := ralph(t, "run", path, "--workspace", ws)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (err %v)", code, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if n := streamMessages(t, prefix); n != 0 {
		t.Fatalf("%d events were published for PRDs over their limits", n)
	}
}
