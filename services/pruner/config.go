package pruner

import (
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// Config is the pruner's configuration. Its tags are the one home of its
// defaults (RALPH_PRUNER_*, through pkg/config).
type Config struct {
	// MaxPrunedTokens bounds the pruned context. Protected units are kept
	// whole even beyond it; the note gets what is left.
	MaxPrunedTokens int `split_words:"true" default:"8000" desc:"token bound of a pruned context (protected units are kept whole even beyond it)"`
	// ChunkTokens bounds one request to the model: the removed units are
	// described chunk by chunk, each chunk whole units.
	ChunkTokens int `split_words:"true" default:"6000" desc:"removed context is summarised in chunks of whole units of about this many tokens"`
	// NoteTokens bounds the note.
	NoteTokens int `split_words:"true" default:"600" desc:"max output tokens of the note on what was removed"`
	// LimitTokens is the builder model's window, for the planner's lanes.
	// It is the builder's setting (RALPH_BUILDER_CONTEXT_WINDOW); the
	// wiring copies it in.
	LimitTokens int `ignored:"true"`
	// Run tunes the pruner's consumers (RALPH_STREAM_*).
	Run bus.RunOptions `ignored:"true"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings no pruning could use.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.MaxPrunedTokens >= 1, "MaxPrunedTokens", c.MaxPrunedTokens, "must be at least 1"),
		settings.Check(c.ChunkTokens >= 1, "ChunkTokens", c.ChunkTokens, "must be at least 1"),
		settings.Check(c.NoteTokens >= 1, "NoteTokens", c.NoteTokens, "must be at least 1"),
	)
}
