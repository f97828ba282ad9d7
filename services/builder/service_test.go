package builder_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/services/builder"
)

// A model that refuses the request (a rejected key) cannot be waited out:
// the session fails on the first delivery with the model's reason, instead
// of after every delivery JetStream allows.
func TestRejectedModelRequestFailsTheSessionAtOnce(t *testing.T) {
	script, err := scriptllm.ParseScript([]byte(`
rules:
  - {name: rejected, model: builder, error: {status: 401, message: invalid api key}}
`), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptllm.New(script)
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL, cfg.LLM.MaxRetries = url, -1
	cfg.Builder.Model = "builder"
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, "builder") }()
	t.Cleanup(func() { cancel(); <-done })

	p, err := prd.Parse([]byte("tasks:\n  - {id: K1, title: k, acceptance_criteria: [x]}\n"), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Bus.Publish(ctx, events.Must(events.SessionStarted, "rejected-key", "", 0, time.Now(),
		events.SessionStartedData{PRD: p, Workspace: t.TempDir()})); err != nil {
		t.Fatal(err)
	}
	var last events.Envelope
	if err := m.Bus.Follow(ctx, "rejected-key", func(env events.Envelope) (bool, error) {
		last = env
		return env.Type.Terminal(), nil
	}); err != nil {
		t.Fatalf("the session did not end: %v", err)
	}
	var d events.SessionFailedData
	if last.Type != events.SessionFailed || last.Decode(&d) != nil {
		t.Fatalf("the session ended with %s %s, want session.failed", last.Type, last.Data)
	}
	if !strings.Contains(d.Reason, "401") || !strings.Contains(d.Reason, "builder model") || strings.Contains(d.Reason, "last delivery") {
		t.Errorf("reason %q, want the model's refusal, given up on at once", d.Reason)
	}
	if n := srv.Hits("rejected"); n != 1 {
		t.Errorf("the model was asked %d times, want 1: a refusal is not retried", n)
	}
}

// A session started with a task that cannot fit in the builder model's
// window, by whoever publishes session.started, fails at once with the
// task and the token counts; no task starts and the model is not asked.
func TestTaskThatCannotFitIsRefusedAtStart(t *testing.T) {
	script, err := scriptllm.ParseScript([]byte("rules:\n  - {name: any, model: builder, reply: {content: done}}\n"), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptllm.New(script)
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL, cfg.Builder.Model = url, "builder"
	cfg.Builder.ContextWindow = 8000
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, "builder") }()
	t.Cleanup(func() { cancel(); <-done })

	p := prd.PRD{Tasks: []prd.Task{
		{ID: "K1", Title: "small", AcceptanceCriteria: []string{"x"}},
		{ID: "K2", Title: "huge", Description: strings.Repeat("one more requirement to meet; ", 2000), AcceptanceCriteria: []string{"x"}},
	}}
	if err := m.Bus.Publish(ctx, events.Must(events.SessionStarted, "unfit-task", "", 0, time.Now(),
		events.SessionStartedData{PRD: p, Workspace: t.TempDir()})); err != nil {
		t.Fatal(err)
	}
	var got []events.Envelope
	if err := m.Bus.Follow(ctx, "unfit-task", func(env events.Envelope) (bool, error) {
		got = append(got, env)
		return env.Type.Terminal(), nil
	}); err != nil {
		t.Fatalf("the session did not end: %v", err)
	}
	var d events.SessionFailedData
	if last := got[len(got)-1]; last.Type != events.SessionFailed || last.Decode(&d) != nil || len(got) != 2 {
		t.Fatalf("events %d, last %s; want session.started then session.failed", len(got), last.Type)
	}
	if !strings.Contains(d.Reason, "task K2 cannot start") || !strings.Contains(d.Reason, "context window of 8000 tokens") {
		t.Errorf("reason %q", d.Reason)
	}
	if n := srv.Hits("any"); n != 0 {
		t.Errorf("the model was asked %d times", n)
	}
}

// Running the model's commands unconfined must be chosen, never a
// default: without a sandbox the builder does not start.
func TestBuilderNeedsASandbox(t *testing.T) {
	err := builder.New(builder.Deps{Log: zap.NewNop()}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no sandbox") {
		t.Fatalf("Run without a sandbox: %v", err)
	}
}
