package builder

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Fit is what a task's first request takes of the builder model's window
// before any work is done: the task's instructions (the system prompt and
// the task, and for a subtask its parent's context), the tool definitions
// sent with every request, and room for the model's reply. A task whose
// first request does not fit can never take a step: compaction keeps the
// instructions whole, so it would only loop.
type Fit struct {
	Instructions, Tools, Reply int
	// Memory is the room kept for the session's memory, which the shell
	// adds to a task's first units (0 with memory off).
	Memory int
}

// Total is the tokens the first request needs.
func (f Fit) Total() int { return f.Instructions + f.Memory + f.Tools + f.Reply }

func (f Fit) String() string {
	memory := ""
	if f.Memory > 0 {
		memory = fmt.Sprintf(", memory up to %d", f.Memory)
	}
	return fmt.Sprintf("%d tokens (instructions %d%s, tool definitions %d, reply %d)", f.Total(), f.Instructions, memory, f.Tools, f.Reply)
}

// Measure is a task's instructions sized as a first request: the state
// machine takes it from the shell, where the tokenizer is, to refuse a task
// that cannot fit.
type Measure func(instructions []units.Unit) Fit

// Measurer sizes first requests with count, leaving maxTokens for the
// reply (the builder's RALPH_BUILDER_MAX_TOKENS).
func Measurer(count TokenCounter, maxTokens int) Measure {
	// The definitions are the same for every request: counted once, when
	// first needed.
	toolTokens := sync.OnceValue(func() int {
		defs, _ := json.Marshal(tools.Definitions()) // plain structs: cannot fail
		return count.Count(string(defs))
	})
	return func(us []units.Unit) Fit {
		n := 0
		for _, u := range us {
			n += count.Count(u.Content)
		}
		return Fit{Instructions: n, Tools: toolTokens(), Reply: maxTokens}
	}
}

// WithMemory is m keeping room for a session memory of up to tokens: the
// memory unit the shell adds to every starting task's first units.
func (m Measure) WithMemory(tokens int) Measure {
	return func(us []units.Unit) Fit {
		f := m(us)
		f.Memory = tokens
		return f
	}
}

// MemoryRoom is what a memory of up to c's bound takes in a first request:
// the bound and the unit's header; 0 when memory is off.
func MemoryRoom(count TokenCounter, c memory.Config) int {
	if !c.Enabled() {
		return 0
	}
	return c.MemoryMaxTokens + count.Count(memory.Header)
}

// Unfit says which task of the session has a first request that does not
// fit in the builder model's window, with the token counts; "" when every
// one fits. A decomposed task is left out: it is reviewed, not iterated on.
// Every PRD task is checked when a session starts; a decomposition checks
// its subtasks the same way.
func (s *State) Unfit(measure Measure) string {
	for _, t := range s.Tasks {
		if len(t.Subtasks) > 0 {
			continue
		}
		if reason := s.unfit(t, measure); reason != "" {
			return reason
		}
	}
	return ""
}

// unfit is Unfit for one task.
func (s *State) unfit(t TaskState, measure Measure) string {
	if measure == nil {
		return ""
	}
	if f := measure(s.instructions(t)); f.Total() > s.Limits.ContextWindow {
		return fmt.Sprintf("task %s cannot start: its first request needs %s, more than the builder model's context window of %d tokens",
			t.ID, f, s.Limits.ContextWindow)
	}
	return ""
}
