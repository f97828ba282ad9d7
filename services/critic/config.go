package critic

import (
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// Config is the critic's configuration. Its tags are the one home of its
// defaults (RALPH_CRITIC_*, through pkg/config).
type Config struct {
	VerifyTimeout time.Duration `split_words:"true" default:"300s" desc:"timeout of a task's verify command"`
	// MaxFileBytes bounds each changed file shown to the model; a larger
	// file is named with its size instead of being cut.
	MaxFileBytes int `split_words:"true" default:"32768" desc:"changed files larger than this are named with their size, not shown to the critic model"`
	// MaxDiffBytes bounds the task's diff shown to the model; the files
	// whose diff does not fit are named with their size instead of being
	// cut.
	MaxDiffBytes int `split_words:"true" default:"65536" desc:"the task's diff (from the commit it began at to the work tree) shown to the critic model is at most this many bytes; files beyond it are named with their size"`
	// Run tunes the critic's consumers (RALPH_STREAM_*).
	Run bus.RunOptions `ignored:"true"`
	// Git bounds the git commands of the diff (RALPH_GIT_*).
	Git gitwork.Config `ignored:"true"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings no review could run with.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.VerifyTimeout >= time.Second, "VerifyTimeout", c.VerifyTimeout, "must be at least 1s"),
		settings.Check(c.MaxFileBytes >= 1, "MaxFileBytes", c.MaxFileBytes, "must be at least 1"),
		settings.Check(c.MaxDiffBytes >= 1, "MaxDiffBytes", c.MaxDiffBytes, "must be at least 1"),
	)
}
