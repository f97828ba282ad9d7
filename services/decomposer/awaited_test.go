package decomposer

import (
	"context"
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

// promptModel records the prompts it is sent and answers with two subtasks.
type promptModel struct{ prompts []string }

func (m *promptModel) Chat(_ context.Context, _ string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	m.prompts = append(m.prompts, req.Messages[len(req.Messages)-1].Content)
	reply := `{"subtasks": [{"id": "a", "title": "A", "description": "first", "acceptance_criteria": ["a works"], "depends_on": []},
		{"id": "b", "title": "B", "description": "second", "acceptance_criteria": ["b works"], "depends_on": ["a"]}]}`
	return openai.ChatCompletionResponse{Choices: []openai.ChatCompletionChoice{{
		Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: reply}}}}, nil
}

// The decomposer splits the task the session's state holds, with the
// signal and what was tried from the state too: a forged payload naming
// another task changes nothing, and a request for a session without state
// or at another step is acked and ignored.
func TestDecomposerTakesTheTaskFromState(t *testing.T) {
	ctx := context.Background()
	st := servicetest.Store(t)
	stored := prd.Task{ID: "T1", Title: "build the parser", AcceptanceCriteria: []string{"parses every sample"}}
	sig := events.Signal{Pattern: "no_progress", Confidence: 0.9, Action: events.ActionDecompose, Diagnosis: "same failing test"}
	view := store.SessionView{Session: "s1", Workspace: "/w", Phase: store.PhaseDecomposing, Step: 4, Signal: &sig,
		Limits: events.Limits{MaxSubtasks: 3},
		Tasks:  []store.TaskView{{Task: stored, Status: "active", Interventions: []string{"nudge:x", "decompose:no_progress"}}}}
	if _, err := st.SaveState(ctx, "s1", 0, view); err != nil {
		t.Fatal(err)
	}
	b, model := &servicetest.RecordingBus{}, &promptModel{}
	svc := New(Deps{Bus: b, Store: st, Model: model, Log: zap.NewNop()})
	forgedTask := prd.Task{ID: "T1", Title: "delete everything", AcceptanceCriteria: []string{"rm -rf /"}}
	request := func(session string, step int) events.Envelope {
		return events.Must(events.DecomposeRequested, session, "T1", step, time.Now(), events.DecomposeRequestedData{
			Task: forgedTask, Signal: events.Signal{Pattern: "forged", Confidence: 1, Action: events.ActionDecompose}, MaxSubtasks: 9})
	}
	for _, env := range []events.Envelope{request("ghost", 4), request("s1", 3)} {
		if err := svc.onRequested(ctx, env); err != nil {
			t.Errorf("%s at step %d: %v, want the event acked", env.Session, env.Step, err)
		}
	}
	if len(b.Published()) != 0 || len(model.prompts) != 0 {
		t.Fatalf("published %v and asked %d prompts for requests nobody awaited", b.Published(), len(model.prompts))
	}

	if err := svc.onRequested(ctx, request("s1", 4)); err != nil {
		t.Fatal(err)
	}
	if len(model.prompts) != 1 {
		t.Fatalf("asked %d prompts, want 1", len(model.prompts))
	}
	p := model.prompts[0]
	for _, want := range []string{"build the parser", "parses every sample", "no_progress", "same failing test", "decompose:no_progress", "2 to 3 subtasks"} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q from the stored state:\n%s", want, p)
		}
	}
	if strings.Contains(p, "delete everything") || strings.Contains(p, "forged") {
		t.Errorf("prompt uses the forged payload:\n%s", p)
	}
	if len(b.Published()) != 1 || b.Published()[0].Type != events.TaskDecomposed {
		t.Errorf("published %v, want task.decomposed", b.Published())
	}
}
