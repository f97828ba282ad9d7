package decomposer

import (
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// Config is the decomposer's configuration. Its tags are the one home of
// its defaults (RALPH_DECOMPOSER_*, through pkg/config).
type Config struct {
	// MaxSubtasks applies when a request does not carry its own (the
	// builder passes it along in its limits).
	MaxSubtasks int `split_words:"true" default:"4" desc:"most subtasks one decomposition may create (at least 2)"`
	// MaxDepth is enforced by the builder, which decides whether to ask:
	// a task at this depth is not decomposed again.
	MaxDepth int `split_words:"true" default:"2" desc:"subtasks at this depth are not decomposed again"`
	// MaxTokens bounds the decomposer model's answer.
	MaxTokens int `split_words:"true" default:"2000" desc:"max output tokens of a decomposition call"`
	// Run tunes the decomposer's consumers (RALPH_STREAM_*).
	Run bus.RunOptions `ignored:"true"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings no decomposition could use.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.MaxSubtasks >= 2, "MaxSubtasks", c.MaxSubtasks, "must be at least 2 (one subtask is the task again)"),
		settings.Check(c.MaxDepth >= 0, "MaxDepth", c.MaxDepth, "must not be negative"),
		settings.Check(c.MaxTokens >= 1, "MaxTokens", c.MaxTokens, "must be at least 1"),
	)
}
