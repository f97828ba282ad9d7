package builder

import (
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/tools"
)

// Config is the builder's configuration. Its tags are the one home of its
// defaults (RALPH_BUILDER_*, through pkg/config); the limits are a
// session's defaults, which its PRD may override.
type Config struct {
	MaxTurnsPerTask int `split_words:"true" default:"30" desc:"iterations one task may take"`
	MaxIterations   int `split_words:"true" default:"200" desc:"iterations one session may take"`
	MaxTotalTokens  int `split_words:"true" default:"2000000" desc:"LLM tokens (in+out) one session may spend"`
	// Options are the tools' (run's timeout and output cap).
	tools.Options
	// InlineOutputBytes: a larger tool output is stored as an artifact and
	// enters the context as a pointer with a digest.
	InlineOutputBytes int `split_words:"true" default:"16384" desc:"larger tool outputs enter the context as an artifact pointer"`
	ContextWindow     int `split_words:"true" default:"128000" desc:"the builder model's context window in tokens"`
	MaxTokens         int `split_words:"true" default:"4096" desc:"max output tokens per builder call"`
	// CacheSessions bounds what a replica keeps in memory between steps
	// (a session's state and the context of its current task), so a step
	// reads from Redis only what changed since.
	CacheSessions int `split_words:"true" default:"512" desc:"sessions whose state and current context one builder replica keeps in memory between steps (the least recently stepped are dropped beyond it)"`
	// WatchdogIdle is how long a session may go without any sign of life
	// (a state change, or a stage at work on one of its events) before the
	// watchdog escalates it with the reason. It must be longer than any
	// one step may take without a heartbeat, and shorter than the time
	// `ralph run` follows a session (RALPH_RUN_TIMEOUT).
	WatchdogIdle time.Duration `split_words:"true" default:"15m" desc:"a session with no event and no stage at work on it for this long is escalated with the reason (what it waited for, who should have answered)"`
	// IndexInterval paces the session index's counters: a session's start
	// and end and every change of a task's status are written at once, the
	// rest (iterations, tokens, usage, phase) at most this often.
	IndexInterval time.Duration `split_words:"true" default:"1s" desc:"the session index (ralph sessions, the console) shows a session's start, end and task changes at once and its counters (iterations, tokens, usage, phase) at most this late; one write per change would cost a JetStream write per step"`

	// The limits below belong to other homes (the decomposer's depth and
	// subtask count, the compaction threshold derived from the planner's
	// pressure ratio); the wiring copies them in.
	MaxDecomposeDepth int `ignored:"true"`
	MaxSubtasks       int `ignored:"true"`
	CompactAt         int `ignored:"true"`
	// Memory is the session memory's settings (pkg/memory): whether a
	// starting task gets the memory and how long it waits for it. Zero is
	// memory off.
	Memory memory.Config `ignored:"true"`
	// Run tunes the builder's consumers (RALPH_STREAM_*).
	Run bus.RunOptions `ignored:"true"`
	// Git is how the builder commits (RALPH_GIT_*).
	Git gitwork.Config `ignored:"true"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings no session could run with.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.MaxTurnsPerTask >= 1, "MaxTurnsPerTask", c.MaxTurnsPerTask, "must be at least 1"),
		settings.Check(c.MaxIterations >= 1, "MaxIterations", c.MaxIterations, "must be at least 1"),
		settings.Check(c.MaxTotalTokens >= 1, "MaxTotalTokens", c.MaxTotalTokens, "must be at least 1"),
		c.Options.Validate(),
		settings.Check(c.InlineOutputBytes >= 1, "InlineOutputBytes", c.InlineOutputBytes, "must be at least 1"),
		settings.Check(c.ContextWindow >= 1, "ContextWindow", c.ContextWindow, "must be at least 1"),
		settings.Check(c.MaxTokens >= 1, "MaxTokens", c.MaxTokens, "must be at least 1"),
		settings.Check(c.CacheSessions >= 1, "CacheSessions", c.CacheSessions, "must be at least 1"),
		settings.Check(c.WatchdogIdle > 0, "WatchdogIdle", c.WatchdogIdle, "must be positive"),
		settings.Check(c.IndexInterval > 0, "IndexInterval", c.IndexInterval, "must be positive"),
	)
}

// Limits are the session limits a session gets unless its PRD sets its own.
func (c Config) Limits() events.Limits {
	return events.Limits{MaxTurnsPerTask: c.MaxTurnsPerTask, MaxIterations: c.MaxIterations, MaxTotalTokens: c.MaxTotalTokens,
		MaxDecomposeDepth: c.MaxDecomposeDepth, MaxSubtasks: c.MaxSubtasks, ContextWindow: c.ContextWindow, CompactAt: c.CompactAt}
}
