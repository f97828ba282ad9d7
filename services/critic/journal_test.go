package critic

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/servicetest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/store"
)

// approving is a critic model that approves everything.
type approving struct{}

func (approving) Chat(context.Context, string, openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	return openai.ChatCompletionResponse{Choices: []openai.ChatCompletionChoice{{
		Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: `{"approved": true}`}}}}, nil
}

// reviewing stores a session reviewing task T1 at step, whose verify
// command is verify, and returns the critic and its request.
func reviewing(t *testing.T, step int, verify string) (*Service, *store.Store, *servicetest.RecordingBus, events.Envelope) {
	t.Helper()
	ctx := context.Background()
	st := servicetest.Store(t)
	task := prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}, Verify: verify}
	view := store.SessionView{Session: "s1", Workspace: t.TempDir(), Current: 0, Phase: store.PhaseReviewing, Step: step,
		Tasks: []store.TaskView{{Task: task, Status: "review", Attempts: 1}}}
	if _, err := st.SaveState(ctx, "s1", 0, view); err != nil {
		t.Fatal(err)
	}
	pub := &servicetest.RecordingBus{}
	svc := New(Deps{Bus: pub, Store: st, Model: approving{}, Log: zap.NewNop()})
	env := events.Must(events.CritiqueRequested, "s1", "T1", step, time.Now(),
		events.CritiqueRequestedData{Task: task, Workspace: view.Workspace, Attempt: 1})
	return svc, st, pub, env
}

// The verify result is journaled before anything is published: a
// redelivered critique.requested (here, the handler called again) replays
// it and publishes the same verdict instead of running the command again.
func TestVerifyRunsOncePerRequest(t *testing.T) {
	count := filepath.Join(t.TempDir(), "runs")
	svc, _, pub, env := reviewing(t, 3, "echo run >> "+count+"; exit 1")
	for range 2 {
		if err := svc.onRequested(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Errorf("the verify command ran %d times for one request, want 1", n)
	}
	if len(pub.Published()) != 2 || pub.Published()[0].ID != pub.Published()[1].ID || string(pub.Published()[0].Data) != string(pub.Published()[1].Data) {
		t.Fatalf("published %v, want the same critique.completed twice (the bus drops the copy)", pub.Published())
	}
	d, err := events.DecodeAs[events.CritiqueCompletedData](pub.Published()[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.Verify == nil || d.Verify.ExitCode != 1 || d.Verdict.Approved {
		t.Errorf("verdict %+v, want the failing verify as a rejection", d)
	}
}

// A verify that started but left no result (the critic died while it ran)
// is not run again on the redelivery: it is reported as interrupted, a
// rejection the builder sees.
func TestInterruptedVerifyIsNotRunAgain(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	svc, st, pub, env := reviewing(t, 4, "touch "+marker)
	if err := st.JournalPut(context.Background(), "s1", 4, verifyStartField, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := svc.onRequested(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the interrupted verify command ran again (%v)", err)
	}
	if len(pub.Published()) != 1 {
		t.Fatalf("published %d events, want 1", len(pub.Published()))
	}
	d, err := events.DecodeAs[events.CritiqueCompletedData](pub.Published()[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict.Approved || !strings.Contains(d.Verdict.Feedback, "interrupted") ||
		d.Verify == nil || d.Verify.ExitCode != -1 || !strings.Contains(d.Verify.Output, "verify was interrupted") {
		t.Errorf("critique %+v (verify %+v), want a rejection saying the verify was interrupted", d, d.Verify)
	}
}
