// Package critic owns the review of claimed completions: it runs the task's
// verify command in the workspace, then asks the critic model for a JSON
// verdict against the acceptance criteria, and publishes critique.completed.
package critic

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/sandbox"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tools"
)

// Name is the service name.
const Name = "critic"

// Bus is what the critic needs of the event bus.
type Bus interface {
	Publish(ctx context.Context, env events.Envelope) error
	Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error
}

// Store is what the critic needs of Redis: the session's state, read
// only, for what to review, and the step journal, so that a redelivered
// request neither runs the verify command again nor asks the model again.
type Store interface {
	Awaiting(ctx context.Context, env events.Envelope, phase string) (store.Head, *store.TaskView, error)
	bus.Journal
}

// Model is the critic's LLM.
type Model interface {
	Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// Deps are the critic's collaborators.
type Deps struct {
	Bus    Bus
	Store  Store
	Model  Model
	Clock  func() time.Time
	Log    *zap.Logger
	Config Config
	// Sandbox runs the verify commands (probed by the wiring);
	// sandbox.Unconfined() only when the operator opted out.
	Sandbox *sandbox.Sandbox
}

// Service reviews claimed completions.
type Service struct{ d Deps }

// New builds the service; zero Config fields take their defaults.
func New(d Deps) *Service {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	settings.FillZero(&d.Config)
	return &Service{d: d}
}

// Run consumes critique.requested until ctx ends. It refuses to start
// without a sandbox for the verify commands.
func (s *Service) Run(ctx context.Context) error {
	if s.d.Sandbox == nil {
		return errors.New("critic: no sandbox for the verify commands (Deps.Sandbox); pass sandbox.Unconfined() to run them unconfined")
	}
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{events.CritiqueRequested: s.onRequested}, s.d.Config.Run)
}

// Journal fields of the critic in the step journal of the request's step.
const (
	verifyStartField = "critic:verify:start"
	verifyField      = "critic:verify"
	verdictField     = "critic:verdict"
)

func (s *Service) onRequested(ctx context.Context, env events.Envelope) error {
	// The payload is decoded (a malformed one is dead-lettered) but not
	// acted on: it is for observers. What to review, and the command to
	// run, come from the session's state, which only the builder writes.
	if _, err := events.DecodeAs[events.CritiqueRequestedData](env); err != nil {
		return err
	}
	log := s.d.Log.With(zap.String("session", env.Session), zap.String("task", env.Task), zap.Int("step", env.Step), zap.String("event", env.ID))
	view, task, err := s.d.Store.Awaiting(ctx, env, store.PhaseReviewing)
	if store.Ignorable(err) {
		log.Warn("ignoring critique.requested: the session does not await a review (a late redelivery, or a forged event)", zap.Error(err))
		return nil
	}
	if err != nil {
		return err
	}
	req := events.CritiqueRequestedData{Task: task.Task, Workspace: view.Workspace, Summary: task.Summary,
		FilesChanged: task.FilesChanged, Attempt: task.Attempts}
	out := events.CritiqueCompletedData{TaskID: req.Task.ID, Attempt: req.Attempt}
	var verified verifyRecord
	if req.Task.Verify != "" {
		if verified, err = s.verifyOnce(ctx, env, req.Workspace, req.Task.Verify); err != nil {
			return err
		}
		out.Verify = &verified.Result
		log.Info("verify", zap.String("command", verified.Result.Command), zap.Int("exit_code", verified.Result.ExitCode),
			zap.Bool("interrupted", verified.Interrupted))
	}
	return bus.Step[events.CritiqueCompletedData]{
		Compute: func(ctx context.Context) (events.CritiqueCompletedData, error) {
			res := out
			if vr := res.Verify; vr != nil && vr.ExitCode != 0 {
				// A failing verify command is a rejection on its own; the
				// model's opinion cannot overrule it, so it is not asked.
				res.Verdict = events.Verdict{Approved: false,
					Feedback:      verifyFeedback(verified),
					UnmetCriteria: []string{"verify command passes: " + vr.Command}}
				return res, nil
			}
			var err error
			res.Verdict, err = s.review(ctx, env.Session, req, task.Base, res.Verify)
			return res, err
		},
		// No verdict can be had (the critic model is down or refuses the
		// request): say so, so the builder pauses the session for a person
		// rather than leave it waiting for a review that never comes or
		// burn turns on attempts nobody can judge.
		Failed: func(out events.CritiqueCompletedData, err error) events.CritiqueCompletedData {
			log.Error("no verdict from the critic model", zap.Error(err))
			out.Error = fmt.Sprintf("the critic could not review attempt %d: %v", req.Attempt, err)
			out.Verdict = events.Verdict{Approved: false, Feedback: out.Error}
			return out
		},
		Publish: func(ctx context.Context, out events.CritiqueCompletedData) error {
			log.Info("verdict", zap.Bool("approved", out.Verdict.Approved), zap.String("feedback", out.Verdict.Feedback))
			return s.d.Bus.Publish(ctx, events.Must(events.CritiqueCompleted, env.Session, env.Task, env.Step, s.d.Clock(), out).For(env.Team))
		},
	}.RunOnce(ctx, s.d.Store, env, verdictField)
}

// interruptedOutput is the output of a verify command whose run was
// interrupted: the critic replica running it stopped before recording its
// result.
const interruptedOutput = "verify was interrupted: the critic stopped while the command ran, and it is not run again " +
	"on a redelivery because its effects are unknown; claim the task done again to have it verified anew"

// verifyRecord is what the step journal keeps of a verify command.
type verifyRecord struct {
	Result events.VerifyResult `json:"result"`
	// Interrupted: the command started but its result was never
	// recorded; Result says so.
	Interrupted bool `json:"interrupted,omitempty"`
}

// verifyOnce runs the verify command at most once per request: its result
// is journaled before the model is asked, and a redelivered request
// replays it. A run that started but left no result (the replica died
// mid-verify) is not run again blindly: it counts as interrupted, which is
// a rejection the builder sees and can answer by claiming the task done
// again (a new request, at a new step).
func (s *Service) verifyOnce(ctx context.Context, env events.Envelope, workspace, command string) (verifyRecord, error) {
	return bus.Once(ctx, s.d.Store, env, verifyField, func(ctx context.Context) (verifyRecord, error) {
		var started time.Time
		found, err := s.d.Store.JournalGet(ctx, env.Session, env.Step, verifyStartField, &started)
		if err != nil {
			return verifyRecord{}, fmt.Errorf("recall the verify start of step %d: %w", env.Step, err)
		}
		if found {
			return verifyRecord{Interrupted: true, Result: events.VerifyResult{Command: command, ExitCode: -1,
				Output: fmt.Sprintf("%s (it started at %s)", interruptedOutput, started.UTC().Format(time.RFC3339))}}, nil
		}
		if err := s.d.Store.JournalPut(ctx, env.Session, env.Step, verifyStartField, s.d.Clock()); err != nil {
			return verifyRecord{}, fmt.Errorf("record the verify start of step %d: %w", env.Step, err)
		}
		vr, err := s.verify(ctx, workspace, command)
		return verifyRecord{Result: vr}, err
	})
}

// verifyFeedback is the rejection a failing verify command is on its own.
func verifyFeedback(v verifyRecord) string {
	if v.Interrupted {
		return fmt.Sprintf("the verify command `%s` was interrupted and not run again", v.Result.Command)
	}
	return fmt.Sprintf("the verify command `%s` exited with %d", v.Result.Command, v.Result.ExitCode)
}

// verify runs the task's verify command in the workspace through the
// builder's run tool, in the same sandbox: the PRD, and so the command, may
// come from anyone who can start a session.
func (s *Service) verify(ctx context.Context, workspace, command string) (events.VerifyResult, error) {
	ws, err := tools.NewWorkspace(workspace)
	if err != nil {
		return events.VerifyResult{Command: command, ExitCode: -1, Output: err.Error()}, nil
	}
	exec := tools.NewExecutor(ws, nil, tools.Options{ShellTimeout: s.d.Config.VerifyTimeout, Sandbox: s.d.Sandbox})
	args := fmt.Sprintf(`{"command": %q, "timeout_seconds": %d}`, command, int(s.d.Config.VerifyTimeout/time.Second))
	res, err := exec.Execute(ctx, tools.Run, args)
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
func (s *Service) review(ctx context.Context, session string, req events.CritiqueRequestedData, base string, vr *events.VerifyResult) (events.Verdict, error) {
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: SystemPrompt},
		{Role: openai.ChatMessageRoleUser, Content: s.reviewPrompt(ctx, req, base, vr)},
	}
	text, err := llm.Text(ctx, s.d.Model, session, llm.Request{Messages: msgs})
	if err != nil {
		return events.Verdict{}, fmt.Errorf("critic model: %w", err)
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
	repaired, err := llm.Text(ctx, s.d.Model, session, llm.Request{Messages: msgs})
	if err != nil {
		return events.Verdict{}, fmt.Errorf("critic model: %w", err)
	}
	if v, perr := ParseVerdict(repaired); perr == nil {
		return v, nil
	}
	return events.Verdict{Approved: false, Feedback: strings.TrimSpace(repaired)}, nil
}

// reviewPrompt is what the critic model judges: the task, the builder's
// claim, the verify result, the task's diff (base..work tree, when the
// session has a branch) and the changed files.
func (s *Service) reviewPrompt(ctx context.Context, req events.CritiqueRequestedData, base string, vr *events.VerifyResult) string {
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
	if base != "" {
		s.writeDiff(ctx, &b, req.Workspace, base)
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

// SystemPrompt tells the critic model what to return.
const SystemPrompt = `You are the Critic of Ralph mesh. You review whether a task is really done.
Judge only against the acceptance criteria, using the task's diff, the files and the verify result you are shown.
Reply with only a JSON object: {"approved": true|false, "feedback": "what to fix, concretely", "unmet_criteria": ["..."]}.`
