package chaostest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/internal/sandboxtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

const (
	sessions = 5
	tasks    = 4
	// commandTurns is how many turns of a task run a command; the turn
	// after says the task is done.
	commandTurns = 3
	// redisDown is how long Redis is away: longer than every delivery's
	// backoff together, well within the outage budget (5m).
	redisDown = 60 * time.Second
	// scenarioBound keeps the test bounded when a session never ends: it
	// is a liveness bound, not a timing assertion (about 2 minutes are
	// used on a quiet machine).
	scenarioBound = 5 * time.Minute
)

// chaosLine is the line the command of turn of task appends to chaos.log:
// unique in the session, so a command run twice shows as a line twice.
func chaosLine(task string, turn int) string { return fmt.Sprintf("%s turn %d", task, turn) }

// script is the model of every role: each command turn of a task appends
// its line and sleeps, so that a fault meets a command in progress; the
// first turn of T2 also prints 1.3 MB, more than the server's max payload,
// which must travel as an artifact pointer. The critic approves; its
// verify (the PRD's) appends to verify.log and sleeps too.
func script() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for k := 1; k <= tasks; k++ {
		task := fmt.Sprintf("T%d", k)
		for turn := 1; turn <= commandTurns; turn++ {
			cmd := fmt.Sprintf("echo '%s' >> chaos.log && sleep 2", chaosLine(task, turn))
			if task == "T2" && turn == 1 {
				cmd = fmt.Sprintf("echo '%s' >> chaos.log && seq 1 200000 && sleep 2", chaosLine(task, turn))
			}
			fmt.Fprintf(&b, "  - {model: b, when: {first_user_contains: \"Task %s:\", turn: %d}, reply: {content: \"Step %d of %s.\", tool_calls: [{name: run, arguments: {command: %q}}]}}\n",
				task, turn, turn, task, cmd)
		}
	}
	b.WriteString("  - {model: b, reply: {content: \"Done: chaos.log has the lines.\"}}\n")
	b.WriteString("  - {model: c, reply: {content: '{\"approved\": true}'}}\n")
	return b.String()
}

func prdYAML() string {
	var b strings.Builder
	b.WriteString("tasks:\n")
	for k := 1; k <= tasks; k++ {
		fmt.Fprintf(&b, "  - {id: T%d, title: \"chaos step %d\", acceptance_criteria: [\"chaos.log has the lines of T%d\"], verify: \"echo 'verify T%d' >> verify.log && sleep 2\"}\n",
			k, k, k, k)
	}
	return b.String()
}

// gitWorkspace is a clean git repository with one commit, as `ralph run`
// needs.
func gitWorkspace(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# chaos\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "README.md"}, {"commit", "-q", "-m", "initial commit"}} {
		cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// lines are the lines of a workspace file (none when it does not exist).
func lines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// observer follows every event of the mesh, across restarts of NATS, and
// keeps when progress was stored and which sessions ended.
type observer struct {
	mu       sync.Mutex
	progress []time.Time
	ended    map[string]bool
	// err is why following stopped, other than the test's end.
	err error
}

func (o *observer) follow(ctx context.Context, b *bus.Bus) error {
	err := b.FollowAll(ctx, bus.From{}, func(ev bus.Stored) (bool, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		switch {
		case ev.Type == events.IterationCompleted || ev.Type == events.IterationAnalyzed:
			o.progress = append(o.progress, ev.Time)
		case ev.Type.Terminal():
			o.ended[ev.Session] = true
		}
		return false, nil
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	o.mu.Lock()
	o.err = fmt.Errorf("following the stream: %w", err)
	o.mu.Unlock()
	return err
}

// failed is why the observer stopped following, if it did.
func (o *observer) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// progressSince is the stream time of the first iteration.completed or
// iteration.analyzed stored at or after since.
func (o *observer) progressSince(since time.Time) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, at := range o.progress {
		if !at.Before(since) {
			return at, true
		}
	}
	return time.Time{}, false
}

func (o *observer) endedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.ended)
}

// fault is one thing done to the mesh while the sessions run. It starts
// when a line is appended to trigger in a workspace (a command or a verify
// has just started, so the fault meets it in progress); its end is when
// what was stopped runs again.
type fault struct {
	name    string
	trigger string
	do      func()
}

// TestChaos runs sessions while services are killed, Redis is away for a
// minute and NATS restarts, then checks what must hold whatever happened.
// Every service and every `ralph run` is a process of its own, built from
// cmd/ralph, so a kill is a SIGKILL; NATS is a nats-server process
// (RALPH_TEST_NATS_SERVER, which the test command sets; else embedded, where
// the hard restart is a shutdown without lame duck mode). Redis is a
// redis-server of the test's own, stopped and started again on the same
// port and data directory with its append-only file (fsync always): an
// outage with the data kept, as a deployment must keep it (README). A Redis
// that lost its data is another case, with its own test
// (internal/mesh's TestLostStateFailsTheSessionWithTheReason).
//
// Each fault's recovery time (from its end to the next iteration.completed
// or iteration.analyzed the stream stores, of any session) is printed, never
// asserted.
func TestChaos(t *testing.T) {
	dir := t.TempDir()
	bin := buildRalph(t, dir)
	natsSrv := meshtest.StartNATS(t)
	if !natsSrv.Process() {
		t.Log("RALPH_TEST_NATS_SERVER is not set: NATS is embedded, and its hard restart is a shutdown without lame duck mode, not a SIGKILL")
	}
	redisSrv := meshtest.StartRedis(t)
	model := scriptllm.New(mustScript(t, script()))
	modelURL, err := model.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = model.Close() })

	prefix := "chaos" + randomHex(t)
	env := []string{
		"RALPH_NATS_URL=" + natsSrv.URL(),
		"RALPH_REDIS_URL=" + redisSrv.URL(),
		"RALPH_PREFIX=" + prefix,
		"RALPH_LLM_BASE_URL=" + modelURL,
		"RALPH_BUILDER_MODEL=b", "RALPH_CRITIC_MODEL=c", "RALPH_PRUNER_MODEL=p",
		"RALPH_DECOMPOSER_MODEL=d", "RALPH_SUMMARIZER_MODEL=s",
		// A killed service's event comes back in seconds, not 30.
		"RALPH_STREAM_ACK_WAIT=3s",
		"RALPH_STREAM_DRAIN_TIMEOUT=5s",
		// Memory would add a summarizer call per task whose answer
		// depends on timing; its own tests cover it.
		"RALPH_MEMORY=off",
		"RALPH_METRICS_ADDR=127.0.0.1:0",
		"RALPH_CONSOLE_ADDR=127.0.0.1:0",
		"RALPH_LOG_LEVEL=info",
	}
	if !sandboxtest.Available(t) {
		t.Log("bubblewrap does not work here: the agent's commands run with RALPH_SANDBOX_MODE=none")
		env = append(env, "RALPH_SANDBOX_MODE=none")
	}

	services := map[string]*proc{}
	for _, name := range []string{"builder", "critic", "stuckdetector", "pruner", "decomposer", "summarizer"} {
		p := newProc(t, dir, name, bin, env, "service", name)
		p.start()
		services[name] = p
	}
	// Registered after the servers: the services stop first.
	t.Cleanup(func() {
		for _, p := range services {
			p.stop()
		}
	})
	for _, p := range services {
		p.waitReady()
	}

	ctx, cancel := context.WithTimeout(context.Background(), scenarioBound)
	defer cancel()
	nc, err := bus.Connect(bus.ConnectOptions{URL: natsSrv.URL(), Name: "chaos-observer"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, prefix, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	obs := &observer{ended: map[string]bool{}}
	followCtx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- obs.follow(followCtx, b) }()
	defer func() { stopFollow(); <-followed }()

	prdPath := filepath.Join(dir, "prd.yaml")
	if err := os.WriteFile(prdPath, []byte(prdYAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	var runs []*proc
	var workspaces []string
	for i := range sessions {
		id := fmt.Sprintf("chaos-%d", i+1)
		ws := filepath.Join(dir, id)
		gitWorkspace(t, ws)
		run := newProc(t, dir, "run-"+id, bin, env, "run", prdPath, "--workspace", ws, "--session", id)
		run.start()
		t.Cleanup(run.stop)
		runs = append(runs, run)
		workspaces = append(workspaces, ws)
	}

	// A failure shows what each process said last (the directory goes
	// with the test).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, p := range append(runs, services["builder"], services["critic"], services["stuckdetector"]) {
			t.Logf("%s, the end of its output:\n%s", p.name, tail(p.output(), 40))
		}
	})

	// countLines is the number of lines of name in every workspace.
	countLines := func(name string) int {
		n := 0
		for _, ws := range workspaces {
			n += len(lines(filepath.Join(ws, name)))
		}
		return n
	}
	waitForLine := func(name string) {
		t.Helper()
		before := countLines(name)
		for countLines(name) == before {
			if obs.endedCount() == sessions {
				t.Fatalf("every session ended before the fault: the scenario is too short for this machine")
			}
			if ctx.Err() != nil {
				t.Fatalf("no new line in any %s within the scenario's bound (%s)", name, scenarioBound)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// killed is when the builder and the critic were killed: a command or
	// a verify reported interrupted must have started before its service
	// was killed, not while Redis or NATS was away later.
	var killed struct{ builder, critic time.Time }
	builder, critic := services["builder"], services["critic"]
	faults := []fault{
		{"builder SIGKILL", "chaos.log", func() { killed.builder = time.Now(); builder.kill(); time.Sleep(time.Second); builder.start() }},
		{"critic SIGKILL", "verify.log", func() { killed.critic = time.Now(); critic.kill(); time.Sleep(time.Second); critic.start() }},
		{fmt.Sprintf("redis down %.0fs", redisDown.Seconds()), "chaos.log", func() { redisSrv.Stop(); time.Sleep(redisDown); redisSrv.Start() }},
		{"nats graceful restart (SIGTERM)", "chaos.log", func() { natsSrv.Restart(2 * time.Second) }},
		{"nats hard restart (SIGKILL)", "chaos.log", func() { natsSrv.Kill(2 * time.Second) }},
	}
	for _, f := range faults {
		waitForLine(f.trigger)
		f.do()
		end := time.Now()
		for {
			if at, ok := obs.progressSince(end); ok {
				fmt.Printf("chaos: %s: recovered in %.1fs\n", f.name, at.Sub(end).Seconds())
				break
			}
			if obs.endedCount() == sessions {
				fmt.Printf("chaos: %s: every session had ended, nothing to recover\n", f.name)
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("no session made progress after %s within the scenario's bound (%s)", f.name, scenarioBound)
			}
			if err := obs.failed(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	for _, r := range runs {
		select {
		case <-r.exited:
		case <-ctx.Done():
			t.Fatalf("%s did not end within the scenario's bound (%s):\n%s", r.name, scenarioBound, r.output())
		}
	}
	if t.Failed() {
		return
	}
	checkInvariants(ctx, t, b, runs, workspaces, killed.builder, killed.critic)
	checkPayloads(ctx, t, nc, prefix)
}

// checkInvariants checks each session after the chaos: it ended with a
// reason, `ralph run` exited with its outcome, no command ran twice, only a
// command or verify that started before its service was killed is
// reported interrupted (not one that finished while Redis or NATS was away
// later), and the stream holds every step once.
func checkInvariants(ctx context.Context, t *testing.T, b *bus.Bus, runs []*proc, workspaces []string, builderKilled, criticKilled time.Time) {
	t.Helper()
	for i, run := range runs {
		id := fmt.Sprintf("chaos-%d", i+1)
		var got []events.Envelope
		if err := b.Replay(ctx, id, func(env events.Envelope) error { got = append(got, env); return nil }); err != nil {
			t.Fatalf("replay %s: %v", id, err)
		}
		var end *events.Envelope
		steps := map[string]int{}
		critiques := map[string]int{}
		// asked and ran are, per chaos.log line, the run calls the model
		// asked for that append it (a model may ask again: after a prune
		// its context has fewer turns) and those reported to have run.
		asked, ran := map[string]int{}, map[string]int{}
		interrupted := 0
		for i, env := range got {
			switch {
			case env.Type.Terminal():
				if end == nil {
					end = &got[i]
				}
			case env.Type == events.IterationCompleted:
				steps[fmt.Sprintf("%s step %d", env.Task, env.Step)]++
				var rec events.IterationRecord
				if err := env.Decode(&rec); err != nil {
					t.Fatalf("%s: %s: %v", id, env.ID, err)
				}
				for _, c := range rec.ToolCalls {
					if l, ok := appendedLine(c); ok {
						asked[l]++
						if c.ExitCode == 0 {
							ran[l]++
						}
						if strings.Contains(c.Error, "interrupted") {
							interrupted++
							if started, ok := startedAt(c.Error); !ok || started.After(builderKilled) {
								t.Errorf("%s: %q is reported interrupted (%s), but it started after the builder was killed at %s; the session:\n%s",
									id, l, c.Error, builderKilled.UTC().Format(time.RFC3339), timeline(got))
							}
						}
					}
				}
			case env.Type == events.CritiqueRequested:
				critiques[env.Task]++
			case env.Type == events.CritiqueCompleted:
				var d events.CritiqueCompletedData
				if err := env.Decode(&d); err != nil {
					t.Fatalf("%s: %s: %v", id, env.ID, err)
				}
				if d.Verify == nil || !strings.Contains(d.Verify.Output, "interrupted") {
					break
				}
				if started, ok := startedAt(d.Verify.Output); !ok || started.After(criticKilled) {
					t.Errorf("%s: the verify of %s at step %d is reported interrupted (%s), but it started after the critic was killed at %s; the session:\n%s",
						id, d.TaskID, env.Step, d.Verify.Output, criticKilled.UTC().Format(time.RFC3339), timeline(got))
				}
			}
		}
		if end == nil {
			t.Errorf("%s has no terminal event; `ralph run` exited %d:\n%s", id, run.code, run.output())
			continue
		}
		outcome := endReason(t, id, *end)
		again := 0
		for _, n := range asked {
			again += n - 1
		}
		fmt.Printf("chaos: %s: %s; %d commands asked for, %d asked again by the model, %d reported interrupted (ralph run exit %d)\n",
			id, outcome, len(asked), again, interrupted, run.code)
		if want := map[bool]int{true: 0, false: 1}[end.Type == events.SessionCompleted]; run.code != want {
			t.Errorf("%s ended with %s but `ralph run` exited %d, want %d:\n%s", id, end.Type, run.code, want, run.output())
		}
		for step, n := range steps {
			if n != 1 {
				t.Errorf("%s: replay holds iteration.completed of %s %d times", id, step, n)
			}
		}
		// Each line once. A command run twice leaves its line more often
		// than it was asked for; a reported run that did not run leaves it
		// less often than reported.
		seen := map[string]int{}
		for _, l := range lines(filepath.Join(workspaces[i], "chaos.log")) {
			seen[l]++
		}
		for l := range merge(seen, asked) {
			switch {
			case seen[l] > asked[l] || seen[l] < ran[l]:
				t.Errorf("%s: %q is in chaos.log %d times; the model asked for the command that appends it %d times, %d reported run; the session:\n%s",
					id, l, seen[l], asked[l], ran[l], timeline(got))
			case seen[l] > 1:
				// The script asks for each command once unless the session
				// is set back: rejections for nothing, then a prune of the
				// turns that asked for it.
				t.Errorf("%s: %q is in chaos.log %d times: the model was made to ask for its command again; the session:\n%s",
					id, l, seen[l], timeline(got))
			}
		}
		verified := map[string]int{}
		for _, l := range lines(filepath.Join(workspaces[i], "verify.log")) {
			verified[strings.TrimPrefix(l, "verify ")]++
		}
		for task, n := range verified {
			if n > critiques[task] {
				t.Errorf("%s: the verify of %s ran %d times for %d critique requests", id, task, n, critiques[task])
			}
		}
	}
}

// startedAtPattern finds the start of an interrupted command or verify in
// what the builder or the critic says of it ("interrupted at
// 2026-01-02T03:04:05Z", "it started at ...").
var startedAtPattern = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

// startedAt is the start an interruption report names, to the second
// (rounded down, so never after the real start).
func startedAt(report string) (time.Time, bool) {
	at, err := time.Parse(time.RFC3339, startedAtPattern.FindString(report))
	return at, err == nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// appendedLine is the chaos.log line a run call appends, if it is one of
// the script's commands.
func appendedLine(c events.ToolCall) (string, bool) {
	var args struct {
		Command string `json:"command"`
	}
	if c.Name != "run" || json.Unmarshal(c.Args, &args) != nil {
		return "", false
	}
	_, rest, ok := strings.Cut(args.Command, "echo '")
	if !ok {
		return "", false
	}
	line, _, ok := strings.Cut(rest, "' >> chaos.log")
	return line, ok
}

// merge is the keys of a and b.
func merge(a, b map[string]int) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

// timeline is a session's events, one line each, with the commands of
// its iterations and how they ended: what to read when a check fails.
func timeline(got []events.Envelope) string {
	var b strings.Builder
	for _, env := range got {
		fmt.Fprintf(&b, "  %s step %d %s %s", env.Time.Format("15:04:05.000"), env.Step, env.Task, env.Type)
		if env.Type == events.CritiqueCompleted {
			var d events.CritiqueCompletedData
			if env.Decode(&d) == nil && d.Verify != nil {
				fmt.Fprintf(&b, " | approved %v, verify exit %d", d.Verdict.Approved, d.Verify.ExitCode)
			}
		}
		if env.Type == events.IterationCompleted {
			var rec events.IterationRecord
			_ = env.Decode(&rec)
			for _, c := range rec.ToolCalls {
				out := c.Output
				if len(out) > 120 {
					out = out[:120] + "..."
				}
				fmt.Fprintf(&b, " | %s %s exit %d %q %s", c.Name, c.Args, c.ExitCode, out, c.Error)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// endReason says how a session ended, failing the test when a failure or
// an escalation has no reason or a completion is not of every task.
func endReason(t *testing.T, id string, end events.Envelope) string {
	t.Helper()
	switch end.Type {
	case events.SessionCompleted:
		var d events.SessionCompletedData
		if err := end.Decode(&d); err != nil || d.Tasks != tasks {
			t.Errorf("%s: session.completed %s (%v), want %d tasks done", id, end.Data, err, tasks)
		}
		return fmt.Sprintf("completed, %d tasks in %d iterations", d.Tasks, d.Iterations)
	case events.SessionFailed:
		var d events.SessionFailedData
		if err := end.Decode(&d); err != nil || d.Reason == "" {
			t.Errorf("%s: session.failed without a reason: %s", id, end.Data)
		}
		return "failed: " + d.Reason
	case events.SessionEscalated:
		var d events.SessionEscalatedData
		if err := end.Decode(&d); err != nil || d.Reason == "" {
			t.Errorf("%s: session.escalated without a reason: %s", id, end.Data)
		}
		return "escalated: " + d.Reason
	}
	t.Errorf("%s ended with %s, which nothing in this test does", id, end.Type)
	return string(end.Type)
}

// checkPayloads reads every message of the session stream and checks that
// none is over the server's max payload, headers included: an output over
// it (T2's 1.3 MB) must have travelled as an artifact pointer.
func checkPayloads(ctx context.Context, t *testing.T, nc *nats.Conn, prefix string) {
	t.Helper()
	limit := nc.MaxPayload()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, events.StreamName(prefix))
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	largest := int64(0)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("read stored event %d: %v", seq, err)
		}
		size := bus.MessageSize(msg.Header.Get(nats.MsgIdHdr), msg.Data)
		largest = max(largest, size)
		if size > limit {
			t.Errorf("stored event %d on %s is %d bytes, over the max payload of %d", seq, msg.Subject, size, limit)
		}
	}
	fmt.Printf("chaos: %d events stored, the largest %d bytes (max payload %d)\n", info.State.Msgs, largest, limit)
}

func mustScript(t *testing.T, yaml string) scriptllm.Script {
	t.Helper()
	s, err := scriptllm.ParseScript([]byte(yaml), ".yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, yaml)
	}
	return s
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
