package summarizer

import (
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// Config is the summarizer's configuration: the planner's options and its
// own. Their tags are the one home of the defaults (RALPH_COMPACTION_*,
// through pkg/config).
type Config struct {
	// Options are the planner's knobs.
	compaction.Options
	MaxSummaryTokens int           `split_words:"true" default:"2000" desc:"bound of a checkpoint summary"`
	CacheTTL         time.Duration `split_words:"true" default:"24h" desc:"lifetime of cached compaction results"`
	// Advisor enables the advisory ranking of near-tied candidates by the
	// summarizer model.
	Advisor bool `split_words:"true" default:"false" desc:"let the summarizer model rank near-tied candidates"`
	// SummaryPrompt empty means DefaultSummaryPrompt.
	SummaryPrompt string `split_words:"true" desc:"system prompt of checkpoint summaries (default: the four-section summary of docs/design-origins.md); changing it invalidates cached results"`
	// Memory is the session memory's settings (RALPH_MEMORY,
	// RALPH_MEMORY_*), whose home is pkg/memory; the wiring copies them
	// in. Zero is memory off.
	Memory memory.Config `ignored:"true"`
	// Run tunes the summarizer's consumers (RALPH_STREAM_*).
	Run bus.RunOptions `ignored:"true"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config {
	c := settings.Defaults[Config]()
	c.Options = compaction.DefaultOptions() // with the prompt version, which is no setting
	c.SummaryPrompt = DefaultSummaryPrompt
	return c
}

// Validate rejects settings no compaction could use, the planner's
// included.
func (c Config) Validate() error {
	return settings.Join(
		c.Options.Validate(),
		settings.Check(c.MaxSummaryTokens >= 1, "MaxSummaryTokens", c.MaxSummaryTokens, "must be at least 1"),
		settings.Check(c.CacheTTL > 0, "CacheTTL", c.CacheTTL, "must be positive"),
	)
}
