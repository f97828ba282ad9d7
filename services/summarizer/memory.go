package summarizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/units"
)

// memoryJournalField journals a task's memory update under the step of its
// task.completed, so a redelivery publishes the same memory.updated.
const memoryJournalField = "memory"

// memoryConflicts is how many times an update adds its learnings again to
// a memory that another task's update changed meanwhile, before it leaves
// the rest to a redelivery.
const memoryConflicts = 3

// How a task's learnings or a re-summary were made (MemoryUpdatedData).
const (
	howLLM        = "llm"
	howExtractive = "extractive"
	howAlready    = "already"
)

// onTaskCompleted takes what an approved task learned into the session's
// memory (pkg/memory): best effort, off the builder's path — the builder
// does not wait for this handler, only a starting task may wait a bounded
// time for its result in the store. Events are not commands: only a task
// the session's stored state shows approved is learned from.
func (s *Service) onTaskCompleted(ctx context.Context, env events.Envelope) error {
	d, err := events.DecodeAs[events.TaskCompletedData](env)
	if err != nil {
		return err
	}
	mc := s.d.Config.Memory
	if !mc.Enabled() {
		return nil
	}
	log := s.d.Log.With(zap.String("session", env.Session), zap.String("task", d.TaskID), zap.Int("step", env.Step), zap.String("event", env.ID))
	view, err := s.d.Store.Session(ctx, env.Session)
	if store.Ignorable(err) {
		log.Warn("ignoring task.completed: the session has no state", zap.Error(err))
		return nil
	} else if err != nil {
		return err
	}
	t := view.Task(d.TaskID)
	if t == nil || t.Status != store.TaskDone || env.Task != d.TaskID {
		log.Warn("ignoring task.completed: the session's state does not show the task approved (a forged event)")
		return nil
	}
	task := memory.Task{ID: t.ID, Title: t.Title, FilesChanged: t.FilesChanged, Summary: t.Summary}
	return bus.Step[events.MemoryUpdatedData]{
		Compute: func(ctx context.Context) (events.MemoryUpdatedData, error) {
			begin := s.d.Clock()
			out, err := s.remember(ctx, env.Session, task, log)
			out.ElapsedMS = s.d.Clock().Sub(begin).Milliseconds()
			return out, err
		},
		// The memory stays as it was; later tasks start with that.
		Failed: func(out events.MemoryUpdatedData, err error) events.MemoryUpdatedData {
			return events.MemoryUpdatedData{TaskID: task.ID, MaxTokens: mc.MemoryMaxTokens, LLMCalls: out.LLMCalls, Error: err.Error()}
		},
		Publish: func(ctx context.Context, out events.MemoryUpdatedData) error {
			if out.Error != "" {
				log.Warn("memory not updated", zap.String("reason", out.Error))
			} else {
				log.Info("memory updated", zap.String("how", out.How), zap.Int("notes", out.Notes), zap.Int("tokens", out.Tokens),
					zap.Int("max_tokens", out.MaxTokens), zap.String("resummarized", out.Resummarized), zap.Int("llm_calls", out.LLMCalls))
			}
			return s.d.Bus.Publish(ctx, events.Must(events.MemoryUpdated, env.Session, env.Task, env.Step, s.d.Clock(), out))
		},
	}.RunOnce(ctx, s.d.Store, env, memoryJournalField)
}

// remember extracts t's learnings (the model under RALPH_MEMORY_TIMEOUT,
// else extractively) and adds them to the session's memory. When that
// would outgrow the bound, the memory as it was is summarised again within
// half of it and the learnings added after that. The memory is saved with
// compare-and-set; an update that lost it adds the learnings again to the
// memory another update left.
func (s *Service) remember(ctx context.Context, session string, t memory.Task, log *zap.Logger) (events.MemoryUpdatedData, error) {
	mc := s.d.Config.Memory
	out := events.MemoryUpdatedData{TaskID: t.ID, MaxTokens: mc.MemoryMaxTokens}
	var mem memory.Memory
	ver, err := s.d.Store.LoadMemory(ctx, session, &mem)
	if err != nil {
		return out, err
	}
	if slices.Contains(mem.Tasks, t.ID) {
		// Saved before a crash, or by another delivery: said once.
		out.How, out.Tokens, out.Tasks = howAlready, mem.Tokens, len(mem.Tasks)
		return out, nil
	}
	stored, err := s.d.Store.Units(ctx, session, t.ID)
	if err != nil {
		return out, err
	}
	// The model's whole part of the update shares one deadline; past it
	// the rest is extractive, so an update always lands, and in time for a
	// starting task that waits for it.
	modelCtx, cancel := context.WithTimeout(ctx, mc.MemoryTimeout)
	defer cancel()
	learned, how, err := s.extract(ctx, modelCtx, session, t, stored, &out, log)
	if err != nil {
		return out, err
	}
	out.How = how
	count := s.d.Tokens.Count
	for attempt := 1; ; attempt++ {
		before := memory.Parse(mem.Text, "")
		// The task's share of the memory is for what the memory does not
		// say yet.
		fresh, _ := memory.Bound(memory.Add(before, learned)[len(before):], mc.TaskTokens(), count)
		notes := append(slices.Clone(before), fresh...)
		resummarized := ""
		if count(notes.Render()) > mc.MemoryMaxTokens {
			// What earlier tasks learned is summarised again, and this
			// task's learnings go after it as they were extracted: a
			// re-summary never loses the newest.
			var older memory.Notes
			if older, resummarized, err = s.resummarize(ctx, modelCtx, session, before, &out, log); err != nil {
				return out, err
			}
			notes = memory.Add(older, fresh)
			if count(notes.Render()) > mc.MemoryMaxTokens {
				notes, _ = memory.Bound(notes, mc.MemoryMaxTokens, count)
			}
		}
		text := notes.Render()
		next := memory.Memory{Text: text, Tokens: count(text), Tasks: append(slices.Clone(mem.Tasks), t.ID), Resummaries: mem.Resummaries}
		if resummarized != "" {
			next.Resummaries++
		}
		_, err := s.d.Store.SaveMemory(ctx, session, ver, next)
		if errors.Is(err, store.ErrConflict) && attempt < memoryConflicts {
			mem = memory.Memory{}
			if ver, err = s.d.Store.LoadMemory(ctx, session, &mem); err != nil {
				return out, err
			}
			if slices.Contains(mem.Tasks, t.ID) {
				out.How, out.Tokens, out.Tasks = howAlready, mem.Tokens, len(mem.Tasks)
				return out, nil
			}
			continue
		}
		if err != nil {
			return out, err
		}
		out.Notes, out.Tokens, out.Tasks, out.Resummarized = len(fresh), next.Tokens, len(next.Tasks), resummarized
		return out, nil
	}
}

// extract asks the summarizer model for t's learnings from the digest of
// its work (memory.Digest: bounded, large outputs by pointer) and checks
// them against what the state knows (every file the task changed is
// named); remember bounds what is new in them to the task's share of the
// memory. When the model fails, says nothing usable or runs out of time,
// the learnings are taken from the task's context without it
// (memory.Learnings). An error is returned only when ctx itself ends
// (shutdown): then nothing is saved.
func (s *Service) extract(ctx, modelCtx context.Context, session string, t memory.Task, stored []units.Unit, out *events.MemoryUpdatedData, log *zap.Logger) (memory.Notes, string, error) {
	mc := s.d.Config.Memory
	count := s.d.Tokens.Count
	share := mc.TaskTokens()
	digest := memory.Digest(t, stored, mc.MemoryInputTokens, count)
	text, err := s.memoryChat(modelCtx, session, MemoryPrompt, MemoryRequest(digest, share), 2*share)
	out.LLMCalls++
	if err == nil {
		notes := memory.Parse(text, t.ID)
		for i := range notes {
			// Whatever the model wrote in a tag, this task learned it.
			notes[i].Task = t.ID
		}
		for _, f := range t.FilesChanged {
			if !notes.Mentions(f) {
				notes = append(notes, memory.Note{Section: memory.ModifiedFiles, Task: t.ID, Text: f})
			}
		}
		if len(notes) > 0 {
			return notes, howLLM, nil
		}
		err = errEmptyReply
	}
	if ctx.Err() != nil {
		return nil, "", fmt.Errorf("extract the learnings of %s: %w", t.ID, ctx.Err())
	}
	log.Info("memory extracted without the model (memory.updated says so)", zap.Error(err))
	return memory.Learnings(t, stored, share, count), howExtractive, nil
}

// resummarize is the memory summarised again within half its bound
// (Config.TargetTokens): by the model, whose answer is taken when it is
// within that (else it is bounded extractively too), or extractively
// (memory.Bound: whole notes, errors and conventions first, newest first).
func (s *Service) resummarize(ctx, modelCtx context.Context, session string, notes memory.Notes, out *events.MemoryUpdatedData, log *zap.Logger) (memory.Notes, string, error) {
	mc := s.d.Config.Memory
	count := s.d.Tokens.Count
	target := mc.TargetTokens()
	text, err := s.memoryChat(modelCtx, session, MemoryMergePrompt, MemoryMergeRequest(notes.Render(), target), 2*target)
	out.LLMCalls++
	if err == nil {
		merged := memory.Parse(text, "")
		if len(merged) > 0 && count(merged.Render()) <= target {
			return merged, howLLM, nil
		}
		if len(merged) > 0 {
			bounded, _ := memory.Bound(merged, target, count)
			return bounded, howLLM + "+" + howExtractive, nil
		}
		err = errEmptyReply
	}
	if ctx.Err() != nil {
		return nil, "", fmt.Errorf("summarise the memory again: %w", ctx.Err())
	}
	log.Info("memory summarised again without the model (memory.updated says so)", zap.Error(err))
	bounded, _ := memory.Bound(notes, target, count)
	return bounded, howExtractive, nil
}

// memoryChat asks the summarizer model once. A reply the server cut at
// maxTokens loses its last, unfinished line: what is kept is whole lines.
func (s *Service) memoryChat(ctx context.Context, session, system, prompt string, maxTokens int) (string, error) {
	resp, err := s.d.Model.Chat(ctx, session, openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: system},
			{Role: openai.ChatMessageRoleUser, Content: prompt},
		},
		MaxCompletionTokens: maxTokens,
	})
	if err != nil {
		return "", fmt.Errorf("summarizer model: %w", err)
	}
	if len(resp.Choices) == 0 {
		return "", errEmptyReply
	}
	text := resp.Choices[0].Message.Content
	if resp.Choices[0].FinishReason == openai.FinishReasonLength {
		if i := strings.LastIndex(text, "\n"); i >= 0 {
			text = text[:i]
		} else {
			text = ""
		}
	}
	if strings.TrimSpace(text) == "" {
		return "", errEmptyReply
	}
	return text, nil
}

// MemoryPrompt asks for a finished task's durable learnings in ADR-003's
// four sections (docs/design-origins.md, "Phase 3: memory compressed by
// meaning").
const MemoryPrompt = `You keep the memory of a coding agent that works through a list of tasks in one workspace. You are given a
digest of a task it has just finished, which the reviewer approved: its commands and how they ended, what it
read, and its closing message. Write down what a later task in the same workspace needs to know so that it does
not have to find it out again, with exactly these sections:
## Key Decisions
## Errors & Solutions
## Modified Files
## Critical Context
Under Errors & Solutions, each error with what solved it (the exact command or change). Under Critical Context,
conventions of the codebase and commands that work, exactly as they were run, environment variables included.
Under Modified Files, the files changed, by path. Point to files and artifacts by path or id instead of copying
their text. Leave out what mattered only to this task, routine steps, and anything the digest does not show.
One short bullet per fact, without task ids. Reply with the sections only.`

// MemoryRequest is the request for one task's learnings.
func MemoryRequest(digest string, maxTokens int) string {
	return fmt.Sprintf("Extract at most %d tokens of durable learnings from this finished task:\n\n%s", maxTokens, digest)
}

// MemoryMergePrompt asks for the memory again, shorter, in the same shape.
const MemoryMergePrompt = `You keep the memory of a coding agent that works through a list of tasks in one workspace. The memory below has
outgrown its bound. Rewrite it shorter, with exactly these sections:
## Key Decisions
## Errors & Solutions
## Modified Files
## Critical Context
Keep every error with its solution, every convention and every command that works (exactly as written), and the
decisions later tasks rely on. Merge notes that say the same thing; drop notes that later ones superseded and
files that no longer matter. Start each bullet with the task tags of the notes it keeps, such as [T1] or
[T1,T3]. Reply with the sections only.`

// MemoryMergeRequest is the request for a re-summary within maxTokens.
func MemoryMergeRequest(text string, maxTokens int) string {
	return fmt.Sprintf("Rewrite this memory within %d tokens:\n\n%s", maxTokens, text)
}
