package memory

import (
	"time"

	"github.com/ralphmesh/ralph/pkg/settings"
)

// Switch turns memory on or off.
type Switch string

// The values of RALPH_MEMORY.
const (
	On  Switch = "on"
	Off Switch = "off"
)

// Config is the memory's settings, the one home of their defaults. It is
// embedded in pkg/config's Config rather than nested under a name, so that
// the switch is RALPH_MEMORY itself and the others RALPH_MEMORY_*; hence
// the names that repeat "Memory". The wiring copies it to the summarizer,
// which extracts and bounds the memory, and to the builder, which starts
// every task with it.
type Config struct {
	Memory Switch `split_words:"true" default:"on" desc:"on or off: when a task is approved the summarizer extracts what it learned (decisions, errors and their solutions, files changed, conventions, commands that work) into the session's memory, and every later task starts with it"`
	// MemoryMaxTokens bounds the memory a task starts with: past it, the
	// memory is summarised again, to half of it.
	MemoryMaxTokens int `split_words:"true" default:"1500" desc:"bound of the session's memory in tokens; when it outgrows it, it is summarised again within half of it (the model, else extractively)"`
	// MemoryInputTokens bounds what one extraction sends the model: a
	// digest of the task's work, never its whole context.
	MemoryInputTokens int `split_words:"true" default:"6000" desc:"bound of the digest of a finished task that the summarizer model extracts learnings from (large outputs go as artifact pointers, not text)"`
	// MemoryTimeout bounds the model's part of one update; what is left
	// past it is done extractively, so an update always lands.
	MemoryTimeout time.Duration `split_words:"true" default:"20s" desc:"how long the summarizer model may take over one task's memory (extraction and re-summary); past it the rest is done extractively"`
	// MemoryWait is how long a starting task waits for the memory of the
	// tasks approved before it. It is longer than MemoryTimeout so that
	// a slow model still lands its extractive fallback in time.
	MemoryWait time.Duration `split_words:"true" default:"30s" desc:"how long a starting task waits for the memory of the tasks approved before it (0: it starts at once with the memory as it stands)"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Enabled reports whether memory is on. The zero Config, which a service
// built without the wiring has, is off.
func (c Config) Enabled() bool { return c.Memory == On }

// TaskTokens bounds what one task adds to the memory: a quarter of the
// bound, so that a memory summarised again to half of it takes two tasks'
// learnings before it outgrows the bound again.
func (c Config) TaskTokens() int { return max(c.MemoryMaxTokens/4, 1) }

// TargetTokens is what the memory is summarised again to when it outgrows
// its bound: half of it, as compaction aims well below its trigger, so
// that re-summaries (each of which may lose detail) are seldom.
func (c Config) TargetTokens() int { return max(c.MemoryMaxTokens/2, 1) }

// Validate rejects settings no memory could work with.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.Memory == On || c.Memory == Off, "Memory", c.Memory, "not on or off"),
		settings.Check(c.MemoryMaxTokens >= 100, "MemoryMaxTokens", c.MemoryMaxTokens, "must be at least 100"),
		settings.Check(c.MemoryInputTokens >= 100, "MemoryInputTokens", c.MemoryInputTokens, "must be at least 100"),
		settings.Check(c.MemoryTimeout > 0, "MemoryTimeout", c.MemoryTimeout, "must be positive"),
		settings.Check(c.MemoryWait >= 0, "MemoryWait", c.MemoryWait, "must not be negative"),
	)
}
