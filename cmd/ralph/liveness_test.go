package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// modelEnv serves script as every role's model for the commands the test
// runs.
func modelEnv(t *testing.T, script string) {
	t.Helper()
	srv := scriptllm.New(mustScript(t, script))
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	t.Setenv("RALPH_LLM_BASE_URL", url)
	t.Setenv("RALPH_BUILDER_MODEL", "b")
	t.Setenv("RALPH_CRITIC_MODEL", "c")
}

// runInBackground runs `ralph run` and returns its outcome on a channel.
type runResult struct {
	out  string
	code int
	err  error
}

func runInBackground(t *testing.T, args ...string) <-chan runResult {
	t.Helper()
	done := make(chan runResult, 1)
	go func() {
		out, code, err := ralph(t, args...)
		done <- runResult{out, code, err}
	}()
	return done
}

func waitRun(t *testing.T, done <-chan runResult) runResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(2 * time.Minute):
		t.Fatal("ralph run did not end")
		return runResult{}
	}
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A session.completed that the builder did not send (the session's stored
// state says it is still going) does not end `ralph run`: it is shown as
// ignored, and the exit code is the session's real outcome.
func TestRunIgnoresAForgedEnd(t *testing.T) {
	prefix := meshEnv(t)
	modelEnv(t, `
rules:
  - {model: b, reply: {content: "again", tool_calls: [{name: run, arguments: {command: "touch sleeping; sleep 1"}}]}}
`)
	t.Setenv("RALPH_BUILDER_MAX_TURNS_PER_TASK", "2")
	startServices(t)
	ws := gitWorkspace(t)
	prdPath := writeFile(t, t.TempDir(), "p.yaml", "tasks:\n  - {id: T1, title: x, acceptance_criteria: [y]}\n")
	done := runInBackground(t, "run", prdPath, "--workspace", ws, "--session", "forged-end")
	waitForFile(t, filepath.Join(ws, "sleeping"))

	nc, err := nats.Connect(meshtest.NATSURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	forged := events.Must(events.SessionCompleted, "forged-end", "", 99, time.Now(), events.SessionCompletedData{Tasks: 1})
	if _, err := js.Publish(context.Background(), events.Subject(prefix, events.DefaultTeam, "forged-end", forged.Type), forged.Marshal()); err != nil {
		t.Fatal(err)
	}

	r := waitRun(t, done)
	if r.code != 1 || !strings.Contains(r.err.Error(), "used all 2 turns") {
		t.Fatalf("exit %d, err %v; want 1 with the real outcome\n%s", r.code, r.err, r.out)
	}
	if !strings.Contains(r.out, "ignored session.completed at step 99: the stored state is") {
		t.Fatalf("the forged end is not shown as ignored:\n%s", r.out)
	}
}

// A graceful restart of the NATS server while `ralph run` follows a
// session: the services and the follower reconnect and go on, and the exit
// code is the session's outcome.
func TestRunGoesOnAcrossANATSRestart(t *testing.T) {
	srv := meshtest.StartNATS(t)
	t.Setenv("RALPH_NATS_URL", srv.URL())
	t.Setenv("RALPH_REDIS_URL", meshtest.RedisURL(t))
	t.Setenv("RALPH_PREFIX", meshtest.Prefix(t))
	modelEnv(t, `
rules:
  - {model: b, when: {turn: 1}, reply: {content: "Building.", tool_calls: [{name: run, arguments: {command: "touch sleeping; sleep 3"}}]}}
  - {model: b, reply: {content: "Built; done."}}
  - {model: c, reply: {content: '{"approved": true}'}}
`)
	startServices(t)
	ws := gitWorkspace(t)
	prdPath := writeFile(t, t.TempDir(), "p.yaml", "tasks:\n  - {id: T1, title: x, acceptance_criteria: [y]}\n")
	done := runInBackground(t, "run", prdPath, "--workspace", ws, "--session", "nats-restart")
	waitForFile(t, filepath.Join(ws, "sleeping"))
	srv.Restart(2 * time.Second)

	r := waitRun(t, done)
	if r.code != 0 || !strings.Contains(r.out, "session completed") {
		t.Fatalf("exit %d, err %v; want 0 with the session completed\n%s", r.code, r.err, r.out)
	}
}

// `ralph up` keeps a session's events and its state, or neither: events
// kept without the state (the embedded Redis is in memory) would leave
// every session with its state gone after a restart.
func TestUpKeepsBothOrNeither(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"store dir, embedded Redis":   {"RALPH_UP_STORE_DIR": t.TempDir()},
		"own NATS, embedded Redis":    {"RALPH_NATS_URL": "nats://127.0.0.1:1"},
		"own Redis, temporary events": {"RALPH_REDIS_URL": "redis://127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			upEnv(t)
			for k, v := range env {
				t.Setenv(k, v)
			}
			_, code, err := ralph(t, "up")
			if code != 2 || !strings.Contains(err.Error(), "Keep both or neither") {
				t.Fatalf("exit %d, err %v; want 2 saying to keep both or neither", code, err)
			}
		})
	}
}

// What survives a restart is said at start.
func TestUpSaysWhatItKeeps(t *testing.T) {
	upEnv(t)
	t.Setenv("RALPH_PREFIX", meshtest.Prefix(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"up"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), "services:") {
		if time.Now().After(deadline) {
			t.Fatalf("up printed:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if !strings.Contains(out.String(), "state:          in memory, lost when ralph up stops") {
		t.Fatalf("up does not say that state is in memory:\n%s", out.String())
	}
}

// syncBuffer is a bytes.Buffer a command writes to while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
