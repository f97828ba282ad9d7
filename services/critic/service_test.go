package critic_test

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
	"github.com/ralphmesh/ralph/services/critic"
)

// A critic model that refuses the request gives no verdict on any
// delivery: the critic says so at once, with the verify result it has, and
// the builder escalates the session to a person.
func TestRefusedReviewIsReportedAtOnce(t *testing.T) {
	script, err := scriptllm.ParseScript([]byte(`
rules:
  - {model: builder, reply: {content: "Nothing to do; done."}}
  - {name: refused, model: critic, error: {status: 400, message: context too long}}
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
	cfg.Builder.Model, cfg.Critic.Model = "builder", "critic"
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, "builder", "critic", "stuckdetector") }()
	t.Cleanup(func() { cancel(); <-done })

	p, err := prd.Parse([]byte("tasks:\n  - {id: V1, title: v, acceptance_criteria: [x], verify: 'true'}\n"), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Bus.Publish(ctx, events.Must(events.SessionStarted, "refused-review", "", 0, time.Now(),
		events.SessionStartedData{PRD: p, Workspace: t.TempDir()})); err != nil {
		t.Fatal(err)
	}
	var got []events.Envelope
	if err := m.Bus.Follow(ctx, "refused-review", func(env events.Envelope) (bool, error) {
		got = append(got, env)
		return env.Type.Terminal(), nil
	}); err != nil {
		t.Fatalf("the session did not end: %v", err)
	}
	var critique events.CritiqueCompletedData
	for _, env := range got {
		if env.Type == events.CritiqueCompleted {
			if err := env.Decode(&critique); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.Contains(critique.Error, "could not review attempt 1") || !strings.Contains(critique.Error, "400") || critique.Verdict.Approved {
		t.Errorf("critique %+v, want a refusal naming the model's error", critique)
	}
	if critique.Verify == nil || critique.Verify.Command != "true" || critique.Verify.ExitCode != 0 {
		t.Errorf("critique verify %+v, want the verify command's result kept", critique.Verify)
	}
	if last := got[len(got)-1]; last.Type != events.SessionEscalated {
		t.Errorf("the session ended with %s, want session.escalated", last.Type)
	}
	if n := srv.Hits("refused"); n != 1 {
		t.Errorf("the critic model was asked %d times, want 1: a refusal is not retried", n)
	}
}

// Verify commands come from the PRD: without a sandbox the critic does not
// start.
func TestCriticNeedsASandbox(t *testing.T) {
	err := critic.New(critic.Deps{Log: zap.NewNop()}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no sandbox") {
		t.Fatalf("Run without a sandbox: %v", err)
	}
}
