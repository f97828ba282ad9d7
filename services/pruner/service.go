// Package pruner owns context pruning: on prune.requested it keeps the
// units the task cannot do without verbatim (selection.go), describes what
// it removes in a short note written by the pruner model (in chunks of whole
// units; oversized units through artifact pointers; an extractive note when
// the model is unavailable), replaces the task's context as a new version
// with compare-and-set, and publishes prune.completed.
package pruner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
	"github.com/ralphmesh/ralph/services/builder"
)

// Name is the service name.
const Name = "pruner"

// Bus is what the pruner needs of the event bus.
type Bus interface {
	Publish(ctx context.Context, env events.Envelope) error
	Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error
}

// Store is what the pruner needs of Redis.
type Store interface {
	Context(ctx context.Context, session, scope string) ([]units.Unit, int64, error)
	ReplaceUnits(ctx context.Context, session, scope string, expect int64, us []units.Unit) (int64, error)
	PutArtifact(ctx context.Context, session, content string) (string, error)
	Awaiting(ctx context.Context, env events.Envelope, phase string) (store.Head, *store.TaskView, error)
	bus.Journal
}

// Model is the pruner's LLM.
type Model interface {
	Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// TokenCounter counts tokens.
type TokenCounter interface{ Count(text string) int }

// Deps are the pruner's collaborators.
type Deps struct {
	Bus    Bus
	Store  Store
	Model  Model
	Tokens TokenCounter
	Clock  func() time.Time
	Log    *zap.Logger
	Config Config
}

// Service prunes contexts.
type Service struct{ d Deps }

// New builds the service; zero Config fields take their defaults.
func New(d Deps) *Service {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	settings.FillZero(&d.Config)
	if d.Config.LimitTokens <= 0 {
		d.Config.LimitTokens = builder.DefaultConfig().ContextWindow
	}
	return &Service{d: d}
}

// Run consumes prune.requested until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{events.PruneRequested: s.onRequested}, s.d.Config.Run)
}

const journalField = "prune"

func (s *Service) onRequested(ctx context.Context, env events.Envelope) error {
	req, err := events.DecodeAs[events.PruneRequestedData](env)
	if err != nil {
		return err
	}
	log := s.d.Log.With(zap.String("session", env.Session), zap.String("task", req.TaskID), zap.Int("step", env.Step), zap.String("event", env.ID))
	// Only a prune the session waits for is done, on the task it is at:
	// a forged or late request must not rewrite a context.
	if _, task, err := s.d.Store.Awaiting(ctx, env, store.PhasePruning); store.Ignorable(err) || (err == nil && task.ID != req.TaskID) {
		log.Warn("ignoring prune.requested: the session does not await a prune of this task (a late redelivery, or a forged event)", zap.Error(err))
		return nil
	} else if err != nil {
		return err
	}
	return bus.Step[events.PruneCompletedData]{
		Compute: func(ctx context.Context) (events.PruneCompletedData, error) { return s.prune(ctx, env, req, log) },
		// The context is left as it was; the builder goes on to its next
		// intervention rather than wait.
		Failed: func(_ events.PruneCompletedData, err error) events.PruneCompletedData {
			return events.PruneCompletedData{TaskID: req.TaskID, Error: err.Error()}
		},
		Publish: func(ctx context.Context, out events.PruneCompletedData) error {
			if out.Error != "" {
				log.Warn("prune failed", zap.String("reason", out.Error))
			} else {
				log.Info("pruned", zap.Int("tokens_before", out.TokensBefore), zap.Int("tokens_after", out.TokensAfter),
					zap.Int("removed", len(out.RemovedUnits)), zap.Bool("fallback", out.Fallback))
			}
			return s.d.Bus.Publish(ctx, events.Must(events.PruneCompleted, env.Session, env.Task, env.Step, s.d.Clock(), out).For(env.Team))
		},
	}.RunOnce(ctx, s.d.Store, env, journalField)
}

// noteID names the note of the prune at step; a redelivered request that
// finds it in the context knows its replacement already happened.
func noteID(step int) string { return fmt.Sprintf("pruned-%d", step) }

func (s *Service) prune(ctx context.Context, env events.Envelope, req events.PruneRequestedData, log *zap.Logger) (events.PruneCompletedData, error) {
	out := events.PruneCompletedData{TaskID: req.TaskID}
	us, version, err := s.d.Store.Context(ctx, env.Session, req.TaskID)
	if err != nil {
		return out, err
	}
	out.TokensBefore = units.Total(us)
	for _, u := range us {
		if u.ID == noteID(env.Step) {
			// Replaced already by a delivery that died before journaling.
			out.TokensAfter, out.ContextVersion = out.TokensBefore, version
			return out, nil
		}
	}
	if len(us) == 0 {
		return out, bus.Permanent(fmt.Errorf("task %s has no context to prune", req.TaskID))
	}
	sel := Select(compaction.Document{LimitTokens: s.d.Config.LimitTokens, Task: compaction.Task{Goal: goalOf(us)}, Units: us})
	if len(sel.Removed) == 0 {
		return out, bus.Permanent(errors.New("nothing to prune: every unit of the context is protected (instructions, active writing, latest errors)"))
	}
	kept := units.Total(sel.Kept)
	budget := min(s.d.Config.NoteTokens, max(s.d.Config.MaxPrunedTokens-kept, s.d.Config.NoteTokens/4))
	note, calls, fallback, err := s.describe(ctx, env.Session, req, sel.Removed, budget)
	out.LLMCalls, out.Fallback = calls, fallback
	if err != nil {
		return out, err
	}
	noteUnit := units.Unit{
		ID: noteID(env.Step), Role: openai.ChatMessageRoleUser, Kind: units.KindSummary,
		Content: noteText(req.Signal, note, len(sel.Removed)),
	}
	noteUnit.Tokens = s.d.Tokens.Count(noteUnit.Content)
	pruned := insertAfterInstructions(sel, noteUnit)
	nv, err := s.d.Store.ReplaceUnits(ctx, env.Session, req.TaskID, version, pruned)
	if errors.Is(err, store.ErrConflict) {
		// A step appended meanwhile: prune again from the new context.
		return out, fmt.Errorf("prune %s: %w", req.TaskID, err)
	}
	if err != nil {
		return out, err
	}
	for _, u := range sel.Removed {
		out.RemovedUnits = append(out.RemovedUnits, u.ID)
	}
	for _, u := range sel.Kept {
		out.KeptUnits = append(out.KeptUnits, u.ID)
	}
	out.TokensAfter, out.ContextVersion = units.Total(pruned), nv
	if out.TokensAfter > s.d.Config.MaxPrunedTokens {
		log.Warn("pruned context is over max_pruned_tokens: its protected units alone are that large",
			zap.Int("tokens", out.TokensAfter), zap.Int("max", s.d.Config.MaxPrunedTokens))
	}
	return out, nil
}

// insertAfterInstructions puts the note after the leading run of system
// and user messages (the prompt, the task, a subtask's parent): where the
// builder reads the task, it then reads what was already tried.
func insertAfterInstructions(sel Selection, note units.Unit) []units.Unit {
	at := 0
	for at < len(sel.Kept) && sel.Kept[at].Kind == units.KindMessage &&
		(sel.Kept[at].Role == openai.ChatMessageRoleSystem || sel.Kept[at].Role == openai.ChatMessageRoleUser) {
		at++
	}
	out := make([]units.Unit, 0, len(sel.Kept)+1)
	out = append(out, sel.Kept[:at]...)
	out = append(out, note)
	return append(out, sel.Kept[at:]...)
}

func noteText(sig events.Signal, note string, removed int) string {
	return fmt.Sprintf("Your context was pruned because you were stuck (%s: %s). %d earlier unit(s) were removed; "+
		"what they established:\n%s\nDo not repeat what this says did not work; take a different approach.",
		sig.Pattern, sig.Diagnosis, removed, strings.TrimSpace(note))
}

// goalOf is the task message's first line, for the planner's relevance.
func goalOf(us []units.Unit) string {
	for _, u := range us {
		if u.Role == openai.ChatMessageRoleUser && u.Kind == units.KindMessage {
			first, _, _ := strings.Cut(u.Content, "\n")
			return first
		}
	}
	return ""
}

// describe writes the note on the removed units: one model call per chunk
// of whole units, and one more to merge when the chunk notes together are
// over budget. When the model is unavailable the note is extracted from
// whole lines instead (fallback true); text is never cut.
func (s *Service) describe(ctx context.Context, session string, req events.PruneRequestedData, removed []units.Unit, budget int) (string, int, bool, error) {
	chunks, err := s.chunks(ctx, session, removed)
	if err != nil {
		return "", 0, false, err
	}
	calls := 0
	var notes []string
	perChunk := max(budget/len(chunks), 64)
	for _, c := range chunks {
		text, err := s.chat(ctx, session, PromptFor(req, c), perChunk)
		calls++
		if err != nil {
			if ctx.Err() != nil {
				return "", calls, false, err
			}
			// The client has already retried what was worth retrying:
			// a stuck builder is better served by an extracted note now
			// than by a better note after another round of backoff.
			s.d.Log.Warn("pruner model unavailable; extracting the note", zap.String("session", session), zap.Error(err))
			return s.extract(chunks, budget), calls, true, nil
		}
		notes = append(notes, strings.TrimSpace(text))
	}
	note := strings.Join(notes, "\n")
	if len(notes) > 1 && s.d.Tokens.Count(note) > budget {
		merged, err := s.chat(ctx, session, MergePrompt(req, notes), budget)
		calls++
		if err == nil {
			note = strings.TrimSpace(merged)
		}
		// When the merge fails the chunk notes stand as they are: longer
		// than asked, never cut.
	}
	return note, calls, false, nil
}

func (s *Service) extract(chunks []string, budget int) string {
	return compaction.Extract(strings.Join(chunks, "\n"), budget, s.d.Tokens.Count)
}

// chunks renders the removed units as text in chunks of whole units of at
// most ChunkTokens. A unit larger than a chunk is stored as an artifact and
// shown by a pointer the note can cite, never sliced.
func (s *Service) chunks(ctx context.Context, session string, removed []units.Unit) ([]string, error) {
	var out []string
	var cur strings.Builder
	curTokens := 0
	for _, u := range removed {
		text := render(u)
		n := s.d.Tokens.Count(text)
		if n > s.d.Config.ChunkTokens {
			id := u.Artifact
			if id == "" {
				var err error
				if id, err = s.d.Store.PutArtifact(ctx, session, u.Content); err != nil {
					return nil, err
				}
			}
			text = tools.ArtifactPointer(fmt.Sprintf("%s %s: %d tokens, too large to show here", u.Role, u.ID, u.Tokens), id) + "\n"
			n = s.d.Tokens.Count(text)
		}
		if curTokens > 0 && curTokens+n > s.d.Config.ChunkTokens {
			out = append(out, cur.String())
			cur.Reset()
			curTokens = 0
		}
		cur.WriteString(text)
		curTokens += n
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
}

func render(u units.Unit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s (%s", u.ID, u.Role)
	if u.Tool != "" {
		fmt.Fprintf(&b, ", %s %s", u.Tool, u.Args)
	}
	b.WriteString(")\n")
	b.WriteString(u.Content)
	for _, c := range u.Calls {
		fmt.Fprintf(&b, "\n[calls %s %s]", c.Name, c.Args)
	}
	b.WriteString("\n")
	return b.String()
}

// chat asks the pruner model for a note on prompt of at most maxTokens.
func (s *Service) chat(ctx context.Context, session, prompt string, maxTokens int) (string, error) {
	text, err := llm.Text(ctx, s.d.Model, session, llm.Request{
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: SystemPrompt},
			{Role: openai.ChatMessageRoleUser, Content: prompt},
		},
		MaxTokens: maxTokens,
	})
	if err != nil {
		return "", fmt.Errorf("pruner model: %w", err)
	}
	return text, nil
}

// SystemPrompt is the original pruning instruction (docs/design-origins.md,
// "The pruning prompt"), turned around: the model
// does not rewrite the context (the protected parts are kept verbatim by
// the service), it writes down what the removed part established.
const SystemPrompt = `You are the context pruner of Ralph mesh. A coding agent got stuck in a loop. The part of its
context shown to you is being removed. Write a short note, in plain sentences or bullets, of only what
the agent still needs from it to finish its task: facts it found (paths, names, values), approaches it
tried that failed and why, errors it hit. Leave out completed steps that no longer matter, tangents and
repetition. Do not invent anything. Reply with the note only.`

// PromptFor is the request for one chunk of removed units.
func PromptFor(req events.PruneRequestedData, chunk string) string {
	return fmt.Sprintf("The agent is stuck with pattern %s: %s\nTask: %s\n\nContext being removed:\n%s",
		req.Signal.Pattern, req.Signal.Diagnosis, req.TaskID, chunk)
}

// MergePrompt asks for one note from the notes of several chunks.
func MergePrompt(req events.PruneRequestedData, notes []string) string {
	return fmt.Sprintf("These notes describe consecutive parts of a stuck agent's removed context (task %s, %s). "+
		"Merge them into one shorter note without losing a fact, a failed approach or an error:\n\n%s",
		req.TaskID, req.Signal.Pattern, strings.Join(notes, "\n---\n"))
}
