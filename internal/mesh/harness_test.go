package mesh_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// harness is a mesh on the test NATS and Redis with a scripted model.
type harness struct {
	t   testing.TB
	cfg config.Config
	llm *scriptllm.Server
	log *zap.Logger
}

func newHarness(t testing.TB, script scriptllm.Script) *harness {
	t.Helper()
	cfg := meshconfig.New(t)
	srv := scriptllm.New(script)
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cfg.LLM.BaseURL = url
	cfg.Builder.Model = "builder"
	cfg.Critic.Model = "critic"
	log := zap.NewNop()
	if os.Getenv("RALPH_TEST_LOG") != "" {
		log, _ = zap.NewDevelopment()
	}
	return &harness{t: t, cfg: cfg, llm: srv, log: log}
}

// mesh connects a new mesh (its own NATS connection and Redis client).
func (h *harness) mesh() *mesh.Mesh {
	h.t.Helper()
	m, err := mesh.Start(context.Background(), h.cfg, h.log, mesh.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(m.Close)
	return m
}

// run starts services on m; the returned stop waits for them to drain.
func (h *harness) run(m *mesh.Mesh, names ...string) (stop func()) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, names...) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("services %v: %v", names, err)
		}
	}
	h.t.Cleanup(stop)
	return stop
}

// start publishes session.started for p in workspace.
func (h *harness) start(m *mesh.Mesh, session string, p prd.PRD, workspace string) {
	h.t.Helper()
	env, err := events.New(events.SessionStarted, session, "", 0, time.Now(), events.SessionStartedData{PRD: p, Workspace: workspace})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := m.Bus.Publish(context.Background(), env); err != nil {
		h.t.Fatal(err)
	}
}

// wait follows the session until it ends and returns all its events.
func (h *harness) wait(m *mesh.Mesh, session string) []events.Envelope {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var got []events.Envelope
	err := m.Bus.Follow(ctx, session, func(env events.Envelope) (bool, error) {
		got = append(got, env)
		return env.Type.Terminal(), nil
	})
	if err != nil {
		h.t.Fatalf("session %s did not end: %v; events so far: %v", session, err, types(got))
	}
	return got
}

func types(envs []events.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = string(e.Type)
	}
	return out
}

func workspace(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func parseScript(t testing.TB, yaml string) scriptllm.Script {
	t.Helper()
	s, err := scriptllm.ParseScript([]byte(yaml), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func parsePRD(t testing.TB, yaml string) prd.PRD {
	t.Helper()
	p, err := prd.Parse([]byte(yaml), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
