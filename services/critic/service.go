// Package critic owns the review of claimed completions: it runs the task's
// verify command in the workspace, then asks the critic model for a JSON
// verdict against the acceptance criteria, and publishes critique.completed.
package critic

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/tools"
)

// Name is the service name.
const Name = "critic"

// Bus is what the critic needs of the event bus.
type Bus interface {
	Publish(ctx context.Context, env events.Envelope) error
	Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error
}

// Model is the critic's LLM.
type Model interface {
	Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// Config is the critic's configuration.
type Config struct {
	VerifyTimeout time.Duration
	// MaxFileBytes bounds each changed file shown to the model; a larger
	// file is named with its size instead of being cut.
	MaxFileBytes int
	Run          bus.RunOptions
}

// Deps are the critic's collaborators.
type Deps struct {
	Bus    Bus
	Model  Model
	Clock  func() time.Time
	Log    *zap.Logger
	Config Config
}

// Service reviews claimed completions.
type Service struct{ d Deps }

// New builds the service.
func New(d Deps) *Service {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	if d.Config.VerifyTimeout <= 0 {
		d.Config.VerifyTimeout = 5 * time.Minute
	}
	if d.Config.MaxFileBytes <= 0 {
		d.Config.MaxFileBytes = 32 << 10
	}
	return &Service{d: d}
}

// Run consumes critique.requested until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{events.CritiqueRequested: s.onRequested}, s.d.Config.Run)
}

func (s *Service) onRequested(ctx context.Context, env events.Envelope) error {
	var req events.CritiqueRequestedData
	if err := env.Decode(&req); err != nil {
		return err
	}
	log := s.d.Log.With(zap.String("session", env.Session), zap.String("task", env.Task), zap.Int("step", env.Step), zap.String("event", env.ID))
	out := events.CritiqueCompletedData{TaskID: req.Task.ID, Attempt: req.Attempt}
	if req.Task.Verify != "" {
		vr, err := s.verify(ctx, req.Workspace, req.Task.Verify)
		if err != nil {
			return err
		}
		out.Verify = &vr
		log.Info("verify", zap.String("command", vr.Command), zap.Int("exit_code", vr.ExitCode))
	}
	if out.Verify != nil && out.Verify.ExitCode != 0 {
		// A failing verify command is a rejection on its own; the model's
		// opinion cannot overrule it, so it is not asked.
		out.Verdict = events.Verdict{Approved: false,
			Feedback:      fmt.Sprintf("the verify command `%s` exited with %d", out.Verify.Command, out.Verify.ExitCode),
			UnmetCriteria: []string{"verify command passes: " + out.Verify.Command}}
	} else {
		v, err := s.review(ctx, env.Session, req, out.Verify)
		switch {
		case err != nil && ctx.Err() == nil && (bus.LastDelivery(ctx) || bus.IsPermanent(err)):
			// No verdict can be had (the critic model is down or refuses
			// the request): say so, so the builder pauses the session for
			// a person rather than leave it waiting for a review that never
			// comes or burn turns on attempts nobody can judge.
			log.Error("no verdict from the critic model", zap.Error(err))
			out.Error = fmt.Sprintf("the critic could not review attempt %d: %v", req.Attempt, err)
			v = events.Verdict{Approved: false, Feedback: out.Error}
		case err != nil:
			return err
		}
		out.Verdict = v
	}
	log.Info("verdict", zap.Bool("approved", out.Verdict.Approved), zap.String("feedback", out.Verdict.Feedback))
	return s.d.Bus.Publish(ctx, events.Must(events.CritiqueCompleted, env.Session, env.Task, env.Step, s.d.Clock(), out))
}

// verify runs the task's verify command in the workspace with the same
// clean environment and process-group handling as the builder's run tool.
func (s *Service) verify(ctx context.Context, workspace, command string) (events.VerifyResult, error) {
	ws, err := tools.NewWorkspace(workspace)
	if err != nil {
		return events.VerifyResult{Command: command, ExitCode: -1, Output: err.Error()}, nil
	}
	exec := tools.NewExecutor(ws, nil, tools.Options{ShellTimeout: s.d.Config.VerifyTimeout})
	args := fmt.Sprintf(`{"command": %q, "timeout_seconds": %d}`, command, int(s.d.Config.VerifyTimeout/time.Second))
	res, err := exec.Execute(ctx, "run", args)
	if err != nil {
		return events.VerifyResult{}, fmt.Errorf("verify %q: %w", command, err)
	}
	out := res.Output
	if res.Error != "" && res.TimedOut {
		out = strings.TrimSpace(out + "\n" + res.Error)
	}
	code := res.ExitCode
	if res.TimedOut && code == 0 {
		code = -1
	}
	return events.VerifyResult{Command: command, ExitCode: code, Output: out, TimedOut: res.TimedOut}, nil
}

// review asks the model for a verdict, with one repair request when the
// reply is not a valid verdict; after that the raw reply counts as a
// request for changes.
func (s *Service) review(ctx context.Context, session string, req events.CritiqueRequestedData, vr *events.VerifyResult) (events.Verdict, error) {
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: SystemPrompt},
		{Role: openai.ChatMessageRoleUser, Content: s.reviewPrompt(req, vr)},
	}
	text, err := s.chat(ctx, session, msgs)
	if err != nil {
		return events.Verdict{}, err
	}
	v, perr := ParseVerdict(text)
	if perr == nil {
		return v, nil
	}
	msgs = append(msgs,
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf(
			"Your reply could not be used: %v. Reply with only the JSON object "+
				`{"approved": true|false, "feedback": "...", "unmet_criteria": ["..."]}.`, perr)})
	repaired, err := s.chat(ctx, session, msgs)
	if err != nil {
		return events.Verdict{}, err
	}
	if v, perr := ParseVerdict(repaired); perr == nil {
		return v, nil
	}
	return events.Verdict{Approved: false, Feedback: strings.TrimSpace(repaired)}, nil
}

func (s *Service) chat(ctx context.Context, session string, msgs []openai.ChatCompletionMessage) (string, error) {
	resp, err := s.d.Model.Chat(ctx, session, openai.ChatCompletionRequest{Messages: msgs})
	if err != nil {
		if llm.IsRetryable(err) {
			return "", fmt.Errorf("critic model: %w", err)
		}
		return "", bus.Permanent(fmt.Errorf("critic model: %w", err))
	}
	if len(resp.Choices) == 0 {
		return "", errors.New("critic model: reply without choices")
	}
	return resp.Choices[0].Message.Content, nil
}

func (s *Service) reviewPrompt(req events.CritiqueRequestedData, vr *events.VerifyResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s: %s\n", req.Task.ID, req.Task.Title)
	if req.Task.Description != "" {
		fmt.Fprintf(&b, "\n%s\n", req.Task.Description)
	}
	b.WriteString("\nAcceptance criteria:\n")
	for _, c := range req.Task.AcceptanceCriteria {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	fmt.Fprintf(&b, "\nThe builder says (attempt %d):\n%s\n", req.Attempt, req.Summary)
	if vr != nil {
		fmt.Fprintf(&b, "\nVerify command `%s` exited with %d.\n%s\n", vr.Command, vr.ExitCode, vr.Output)
	}
	if len(req.FilesChanged) > 0 {
		b.WriteString("\nFiles changed in this task:\n")
		ws, err := tools.NewWorkspace(req.Workspace)
		if err != nil {
			fmt.Fprintf(&b, "(workspace %s unavailable: %v)\n", req.Workspace, err)
			return b.String()
		}
		for _, f := range req.FilesChanged {
			s.writeFile(&b, ws, f)
		}
	}
	return b.String()
}

func (s *Service) writeFile(b *strings.Builder, ws *tools.Workspace, rel string) {
	abs, err := ws.Resolve(rel)
	if err != nil {
		fmt.Fprintf(b, "\n--- %s (refused: %v)\n", rel, err)
		return
	}
	data, err := os.ReadFile(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(b, "\n--- %s (deleted)\n", rel)
	case err != nil:
		fmt.Fprintf(b, "\n--- %s (unreadable: %v)\n", rel, err)
	case len(data) > s.d.Config.MaxFileBytes:
		fmt.Fprintf(b, "\n--- %s (%d bytes; too large to include whole, so not shown)\n", rel, len(data))
	default:
		fmt.Fprintf(b, "\n--- %s\n%s\n", filepath.ToSlash(rel), data)
	}
}

// SystemPrompt tells the critic model what to return.
const SystemPrompt = `You are the Critic of Ralph mesh. You review whether a task is really done.
Judge only against the acceptance criteria, using the files and the verify result you are shown.
Reply with only a JSON object: {"approved": true|false, "feedback": "what to fix, concretely", "unmet_criteria": ["..."]}.`
