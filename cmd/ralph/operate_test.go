package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// ralphBG runs ralph with args under ctx in the background, writing to
// out; the returned channel gets its exit code and error.
func ralphBG(ctx context.Context, out *syncBuffer, args ...string) <-chan exitResult {
	done := make(chan exitResult, 1)
	go func() {
		root := newRoot()
		root.SetOut(out)
		root.SetErr(out)
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		code := 0
		if err != nil {
			code = 1
			var ee exitError
			if errors.As(err, &ee) {
				code = ee.code
			}
		}
		done <- exitResult{code, err}
	}()
	return done
}

type exitResult struct {
	code int
	err  error
}

func waitOutput(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", want, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServicesOf runs the named services on the mesh of the environment
// until the test ends.
func startServicesOf(t *testing.T, names ...string) {
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
	go func() { done <- m.RunServices(ctx, names...) }()
	t.Cleanup(func() { cancel(); <-done; m.Close() })
}

// waitingScript: the builder claims the task done at once; with no critic
// on the mesh, the session then waits for its review, running, until a
// person acts. After a resume the builder writes the summary.
const waitingScript = `
rules:
  - {model: b, when: {any_contains: "use notes-v2.txt"}, times: 1, reply: {content: "Following the guidance.", tool_calls: [{name: write_file, arguments: {path: summary.txt, content: "buy bread\n"}}]}}
  - {model: b, when: {any_contains: "use notes-v2.txt"}, reply: {content: "summary.txt summarises notes-v2.txt."}}
  - {model: b, reply: {content: "The notes are summarised."}}
  - {model: c, reply: {content: '{"approved": true}'}}
`

func useScript(t *testing.T, script string) {
	t.Helper()
	srv := scriptllm.New(mustScript(t, script))
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	t.Setenv("RALPH_LLM_BASE_URL", url)
	for role, model := range map[string]string{"BUILDER": "b", "CRITIC": "c", "PRUNER": "p", "DECOMPOSER": "d"} {
		t.Setenv("RALPH_"+role+"_MODEL", model)
	}
}

// A session as a team operates it: listed while it runs, watched and
// watched again after Ctrl-C (from where the first watch stopped),
// cancelled, shown, hidden from another team, resumed to completion.
func TestOperateASession(t *testing.T) {
	meshEnv(t)
	useScript(t, waitingScript)
	startServicesOf(t, "builder", "stuckdetector")
	ws := gitWorkspace(t)
	writeFile(t, ws, "notes.txt", "")
	writeFile(t, ws, "notes-v2.txt", "buy bread\n")
	prdPath := writeFile(t, t.TempDir(), "p.yaml", "tasks:\n  - {id: E1, title: Summarise the notes, acceptance_criteria: [summary.txt summarises the notes]}\n")

	var runOut syncBuffer
	run := ralphBG(context.Background(), &runOut, "run", prdPath, "--workspace", ws, "--allow-dirty", "--session", "op-1")
	// With no critic on the mesh the session waits for its review, running.
	waitOutput(t, &runOut, "critic reviewing E1")
	listed, code, err := ralph(t, "sessions")
	if code != 0 || !regexp.MustCompile(`(?m)^op-1\s+default\s+running\s+E1\s+\d+\s+\d+\s+\d+s\s+\d+s ago$`).MatchString(listed) {
		t.Fatalf("sessions: exit %d %v\n%s", code, err, listed)
	}

	// A watch, stopped by Ctrl-C, says where to pick it up.
	ctx, stop := context.WithCancel(context.Background())
	var watchOut syncBuffer
	watching := ralphBG(ctx, &watchOut, "watch", "op-1")
	waitOutput(t, &watchOut, "task E1: Summarise the notes")
	stop()
	if r := <-watching; r.code != 0 {
		t.Fatalf("watch after Ctrl-C: exit %d %v", r.code, r.err)
	}
	m := regexp.MustCompile("stopped watching after event (\\d+); pick up with `ralph watch op-1 --from-seq (\\d+)`").FindStringSubmatch(watchOut.String())
	if m == nil {
		t.Fatalf("watch output:\n%s", watchOut.String())
	}
	last, _ := strconv.ParseUint(m[1], 10, 64)
	next, _ := strconv.ParseUint(m[2], 10, 64)
	if next != last+1 {
		t.Fatalf("stopped after %d, pick up at %d", last, next)
	}

	// Watched again from where it stopped, while it runs: the rest, once,
	// live, to its end.
	var againOut syncBuffer
	again := ralphBG(context.Background(), &againOut, "watch", "op-1", "--from-seq", m[2], "--json")

	out, code, err := ralph(t, "cancel", "op-1", "--reason", "wrong notes")
	if code != 0 || !strings.Contains(out, "session cancelled at task E1") || !strings.Contains(out, "ralph resume op-1") {
		t.Fatalf("cancel: exit %d %v\n%s", code, err, out)
	}
	if r := <-run; r.code != 1 || !strings.Contains(r.err.Error(), "session op-1 cancelled: wrong notes; go on with `ralph resume op-1") {
		t.Fatalf("run: exit %d %v\n%s", r.code, r.err, runOut.String())
	}
	r := <-again
	out = againOut.String()
	if r.code != 1 || !strings.Contains(r.err.Error(), "session op-1 was cancelled: wrong notes") {
		t.Fatalf("watch again: exit %d %v\n%s", r.code, r.err, out)
	}
	var seqs []uint64
	var lastType events.Type
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct {
			Seq  uint64      `json:"seq"`
			Type events.Type `json:"type"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		seqs = append(seqs, ev.Seq)
		lastType = ev.Type
	}
	if seqs[0] != next || lastType != events.SessionCancelled {
		t.Errorf("picked up at %d (want %d), ended with %s", seqs[0], next, lastType)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("seqs not increasing: %v", seqs)
		}
	}
	// A replay from the start holds every event up to the last the second
	// watch saw (the session is the only one of its prefix).
	all, code, _ := ralph(t, "replay", "op-1", "--json")
	if n := strings.Count(all, "\n"); code != 0 || n != int(seqs[len(seqs)-1]) {
		t.Errorf("replay: exit %d, %d events; the second watch ended at %d", code, n, seqs[len(seqs)-1])
	}

	out, code, _ = ralph(t, "status", "op-1")
	if code != 0 || !strings.Contains(out, "session op-1 (team default): cancelled") || !strings.Contains(out, "reason:     wrong notes") ||
		!strings.Contains(out, "▶ E1 active: Summarise the notes (1 turns, 1 reviews)") || !strings.Contains(out, "builder:") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	out, code, _ = ralph(t, "status", "op-1", "--json")
	var st struct {
		State, Team string
		Tasks       []struct{ ID string }
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.State != "cancelled" || st.Team != "default" || len(st.Tasks) != 1 {
		t.Errorf("status --json: exit %d %v %+v", code, err, st)
	}
	if _, code, err := ralph(t, "cancel", "op-1"); code != 2 || !strings.Contains(err.Error(), "already ended: session.cancelled") {
		t.Errorf("cancel again: exit %d %v", code, err)
	}

	// Another team sees none of it and touches none of it.
	t.Setenv("RALPH_TEAM", "ops")
	for _, args := range [][]string{{"status", "op-1"}, {"cancel", "op-1"}, {"watch", "op-1"}, {"replay", "op-1"}, {"resume", "op-1", "--message", "mine"}} {
		if _, code, err := ralph(t, args...); code != 2 || !strings.Contains(err.Error(), "no events of team ops") {
			t.Errorf("team ops %v: exit %d %v", args, code, err)
		}
	}
	if out, code, _ := ralph(t, "sessions"); code != 0 || !strings.Contains(out, "no sessions of team ops") {
		t.Errorf("team ops lists:\n%s", out)
	}
	if out, code, _ := ralph(t, "sessions", "--all", "--json"); code != 0 || !strings.Contains(out, `"id": "op-1"`) {
		t.Errorf("sessions --all:\n%s", out)
	}
	t.Setenv("RALPH_TEAM", "default")

	startServicesOf(t, "critic")
	out, code, err = ralph(t, "resume", "op-1", "--message", "notes.txt is empty on purpose: use notes-v2.txt")
	if code != 0 || !strings.Contains(out, "session completed") {
		t.Fatalf("resume: exit %d %v\n%s", code, err, out)
	}
	out, _, _ = ralph(t, "sessions", "--json")
	var list struct {
		Sessions []struct{ ID, State string } `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Sessions) != 1 || list.Sessions[0].State != "completed" {
		t.Errorf("after the resume: %s %v", out, err)
	}
}

// run and watch say when a stage leaves work waiting with nobody taking
// it, and when the model is retried.
func TestStallsAndRetriesAreSaid(t *testing.T) {
	meshEnv(t)
	t.Setenv("RALPH_RUN_STALL_AFTER", "1s")
	useScript(t, `
rules:
  - {model: b, when: {turn: 2}, times: 1, error: {status: 502, message: "bad gateway"}}
  - {model: b, when: {turn: 1}, reply: {content: "Writing it.", tool_calls: [{name: write_file, arguments: {path: a.txt, content: "a"}}]}}
  - {model: b, reply: {content: "Done."}}
`)
	// No critic runs on this mesh.
	startServicesOf(t, "builder", "stuckdetector")
	prdPath := writeFile(t, t.TempDir(), "p.yaml", "tasks:\n  - {id: T1, title: Write a, acceptance_criteria: [a.txt holds a]}\n")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var runOut syncBuffer
	run := ralphBG(ctx, &runOut, "run", prdPath, "--workspace", gitWorkspace(t), "--session", "stall-1")
	waitOutput(t, &runOut, "[stall-1] ⏳ builder: model answered 502; retry 1 of 3 in ")
	waitOutput(t, &runOut, "[stall-1] ⚠ critic: 1 review waiting for ")
	if !strings.Contains(runOut.String(), "is a critic running? (none has run on this mesh)") {
		t.Errorf("run output:\n%s", runOut.String())
	}
	stop()
	<-run

	var watchOut syncBuffer
	wctx, wstop := context.WithCancel(context.Background())
	defer wstop()
	watching := ralphBG(wctx, &watchOut, "watch", "stall-1")
	waitOutput(t, &watchOut, "⚠ critic: 1 review waiting for ")
	wstop()
	<-watching
}

// The dead-letter tools on a poison event: a resume of a session that is
// not paused is refused for good (dead-lettered); once the session is
// paused (the fix), `ralph dlq replay` publishes it again, past the
// server's duplicate window, and the builder resumes the session.
func TestDLQCommands(t *testing.T) {
	prefix := meshEnv(t)
	useScript(t, waitingScript)
	startServicesOf(t, "builder", "stuckdetector")
	if out, code, _ := ralph(t, "dlq", "list"); code != 0 || !strings.Contains(out, "no dead letters") {
		t.Fatalf("dlq list of none: exit %d\n%s", code, out)
	}
	prdPath := writeFile(t, t.TempDir(), "p.yaml", "tasks:\n  - {id: E1, title: Summarise the notes, acceptance_criteria: [summary.txt summarises the notes]}\n")
	var runOut syncBuffer
	run := ralphBG(context.Background(), &runOut, "run", prdPath, "--workspace", gitWorkspace(t), "--session", "dlq-1")
	waitOutput(t, &runOut, "critic reviewing E1")

	// The poison: a resume while the session runs (waits for its review).
	m, err := mesh.Start(context.Background(), mustConfig(t), zap.NewNop(), mesh.Options{BusOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := m.Index.Get(context.Background(), "default", "dlq-1")
	if err != nil {
		t.Fatal(err)
	}
	poison := events.Must(events.SessionResumed, "dlq-1", "E1", e.Step, time.Now(), events.SessionResumedData{Message: "too early"})
	if err := m.Bus.Publish(context.Background(), poison); err != nil {
		t.Fatal(err)
	}
	var listed string
	waitFor(t, "the dead letter", func() bool {
		listed, _, _ = ralph(t, "dlq", "list")
		return strings.Contains(listed, "session.resumed")
	})
	if !regexp.MustCompile(`(?m)^1\s+\d+s\s+builder\s+session\.resumed\s+default\s+dlq-1\s+\d+\s+1\s+.*session is not escalated`).MatchString(listed) {
		t.Fatalf("dlq list:\n%s", listed)
	}
	out, code, _ := ralph(t, "dlq", "list", "--json")
	var list struct {
		DeadLetters []struct {
			ID      uint64 `json:"id"`
			Service string `json:"service"`
			Event   events.Envelope
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.DeadLetters) != 1 || list.DeadLetters[0].Event.ID != poison.ID {
		t.Fatalf("dlq list --json: exit %d %v\n%s", code, err, out)
	}
	out, code, _ = ralph(t, "dlq", "show", "1")
	if code != 0 || !strings.Contains(out, "given up by: builder (consumer builder) after 1 deliveries") || !strings.Contains(out, "too early") {
		t.Errorf("dlq show:\n%s", out)
	}
	for _, args := range [][]string{{"dlq", "show", "9"}, {"dlq", "show", "x"}, {"dlq", "replay", "0"}} {
		if _, code, err := ralph(t, args...); code != 2 {
			t.Errorf("%v: exit %d %v", args, code, err)
		}
	}

	// The fix: the session is paused; the event, published again, is
	// taken (its own id would be dropped as a duplicate).
	if out, code, err := ralph(t, "cancel", "dlq-1"); code != 0 {
		t.Fatalf("cancel: exit %d %v\n%s", code, err, out)
	}
	<-run
	out, code, err = ralph(t, "dlq", "replay", "1")
	if code != 0 || !strings.Contains(out, "published session.resumed of session dlq-1 (team default) at step") ||
		!strings.Contains(out, prefix+".s.default.dlq-1.session.resumed; dead letter 1 removed") {
		t.Fatalf("dlq replay: exit %d %v\n%s", code, err, out)
	}
	waitFor(t, "the resumed session", func() bool {
		e, err := m.Index.Get(context.Background(), "default", "dlq-1")
		return err == nil && e.State == "running" && e.Iterations == 2
	})
	if out, _, _ := ralph(t, "dlq", "list"); !strings.Contains(out, "no dead letters") {
		t.Errorf("after the replay:\n%s", out)
	}

	// purge asks nothing outside a terminal: it needs --yes.
	bad := events.Must(events.SessionResumed, "dlq-1", "E1", 999, time.Now(), events.SessionResumedData{Message: "stray"})
	if err := m.Bus.Publish(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second dead letter", func() bool {
		out, _, _ := ralph(t, "dlq", "list")
		return strings.Contains(out, "session.resumed")
	})
	if _, code, err := ralph(t, "dlq", "purge"); code != 2 || !strings.Contains(err.Error(), "purge removes 1 dead letters for good; run it again with --yes") {
		t.Errorf("purge without --yes: exit %d %v", code, err)
	}
	if out, code, _ := ralph(t, "dlq", "purge", "--yes"); code != 0 || !strings.Contains(out, "removed 1 dead letters") {
		t.Errorf("purge --yes: exit %d\n%s", code, out)
	}
}

func mustConfig(t *testing.T) config.Config {
	t.Helper()
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A tokens file the console cannot use is bad input, named with its line,
// never quoting a token.
func TestConsoleRefusesABadTokensFile(t *testing.T) {
	meshEnv(t)
	t.Setenv("RALPH_API_TOKENS_FILE", writeFile(t, t.TempDir(), "tokens.yaml", "s3cret: web\n"))
	_, code, err := ralph(t, "service", "console")
	if code != 2 || !strings.Contains(err.Error(), "RALPH_API_TOKENS_FILE") || !strings.Contains(err.Error(), "line 1: the token is shorter than 16 characters") ||
		strings.Contains(err.Error(), "s3cret") {
		t.Errorf("exit %d, err %v", code, err)
	}
}
