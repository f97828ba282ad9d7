// Package stuckdetector owns stuck detection: the pure patterns that look at
// a task's most recent iterations and say whether the builder is looping or
// making no progress, and the service shell that feeds them from the bus and
// keeps the window in Redis (service.go). detector.go holds the Pattern
// interface, Analyze and the in-memory Detector; each pattern has its own
// file (repetitive.go, chanting.go, compaction.go, monologue.go,
// alternating.go, circular.go, errorloop.go, noprogress.go), and what they
// share is in files named for it (fingerprint.go, failure.go, similarity.go,
// workspace.go, evidence.go, diagnosis.go). The patterns do no I/O and read
// no clock.
// The labelled corpus, its evaluation and `ralph stuck scan` live in
// internal/stuckbench, which uses this package as any caller would.
package stuckdetector

import (
	"math"
	"slices"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// Config tunes detection. Its tags are the one home of the defaults
// (RALPH_STUCK_*, through pkg/config). Zero fields take their defaults, so
// a Config that sets only what an operator overrode still behaves.
type Config struct {
	// Window is how many of a task's most recent iterations are kept and
	// considered. It bounds both memory and how far back a loop can reach,
	// so every span below is capped to it. Eight leaves room for an A/B
	// ping-pong and a compaction cycle on either side of it.
	Window int `split_words:"true" default:"8" desc:"iterations of a task kept in the detection window"`
	// RepeatThreshold is how many identical outputs, tool calls or failures
	// make a loop; two could be a coincidence (a re-check), three is a habit.
	RepeatThreshold int `split_words:"true" default:"3" desc:"identical outputs, calls or failures that make a loop"`
	// SimilarityThreshold is the Jaccard similarity of word 3-shingles at or
	// above which two assistant texts count as the same response. Below 1 so
	// that a changed attempt number or a reworded clause does not hide a loop.
	SimilarityThreshold float64 `split_words:"true" default:"0.9" desc:"text similarity at which two responses count as the same"`
	// NoProgressSpan is how many iterations in a row must show no progress
	// (an unchanged workspace, or the same failing tests or error despite
	// different attempts) before no_progress fires. It is the original
	// detector's history window of five (docs/design-origins.md, "Phase 1:
	// the stuck detector"), kept apart from Window so that a longer memory
	// does not make the detector slower to call a stall.
	NoProgressSpan int `split_words:"true" default:"5" desc:"iterations in a row without progress before no_progress fires"`
	// AlternatingSteps is how many trailing iterations must ping-pong between
	// two states (A/B/A/B) before alternating fires. Four is two full cycles:
	// A/B/A alone is a re-check, and a fifth step would let circular_tools
	// fire first on any ping-pong of reads.
	AlternatingSteps int `split_words:"true" default:"4" desc:"trailing A/B/A/B steps that make a ping-pong"`
	// MonologueTurns is how many consecutive iterations without tool calls
	// (each one a completion claim the critic turned down) make a monologue.
	MonologueTurns int `split_words:"true" default:"3" desc:"consecutive turns without tool calls that make a monologue"`
	// MonologueNovelty is the largest share of a turn's content words not
	// said earlier in the window for which the turn still counts as a
	// restatement. A third lets a restatement reword itself; a revised
	// answer that adds substance is well above it.
	MonologueNovelty float64 `split_words:"true" default:"0.34" desc:"largest share of new words for a turn to count as a restatement"`
	// ChantRepeats is how many times one chunk of text must recur, back to
	// back in one response or closing consecutive responses, to be chanting.
	ChantRepeats int `split_words:"true" default:"3" desc:"times one chunk of text must recur to be chanting"`
	// ChantMinChars is the shortest chunk, in characters of normalised
	// text, whose back-to-back repeats in one response count: "Thinking...
	// Done." (17) and a five-word thought count whatever their sentence
	// structure, while "ok | ok | ok" and "ha ha ha" are too short to tell
	// from ordinary text.
	ChantMinChars int `split_words:"true" default:"12" desc:"shortest chunk, in characters, whose back-to-back repeats in one response are chanting"`
	// ChantCarryChars is the shortest closing passage, in characters of
	// normalised text, that consecutive responses must share to be
	// chanting. Longer than ChantMinChars: a stock closing such as "Let me
	// look at the next file." is how terse models narrate exploration,
	// while a sign-off or apology copied from response to response runs to
	// a sentence or two.
	ChantCarryChars int `split_words:"true" default:"40" desc:"shortest closing passage, in characters, carried across responses that is chanting"`
	// CompactionRepeats is how many compactions with no progress between them
	// make a compaction loop. Two: a compaction that the builder has to
	// repeat without having gained anything is already a loop.
	CompactionRepeats int `split_words:"true" default:"2" desc:"compactions with no progress between them that make a compaction loop"`
}

// DefaultConfig is the original detector's repeat threshold of three and
// no-progress span of five (docs/design-origins.md, "Phase 1: the stuck
// detector"), in a window of eight that leaves room for the newer patterns.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings that cannot mean anything. Zero is accepted
// everywhere and means the default.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.Window == 0 || c.Window >= 2, "Window", c.Window, "must be at least 2 (one iteration holds no repeat)"),
		settings.Check(c.RepeatThreshold == 0 || c.RepeatThreshold >= 2, "RepeatThreshold", c.RepeatThreshold,
			"must be at least 2 (one occurrence is no repeat)"),
		settings.Check(validFraction(c.SimilarityThreshold), "SimilarityThreshold", c.SimilarityThreshold, "must be above 0 and at most 1"),
		settings.Check(c.NoProgressSpan == 0 || c.NoProgressSpan >= 2, "NoProgressSpan", c.NoProgressSpan,
			"must be at least 2 (one quiet iteration is no stall)"),
		settings.Check(c.AlternatingSteps == 0 || c.AlternatingSteps >= 4, "AlternatingSteps", c.AlternatingSteps,
			"must be at least 4 (two full A/B cycles)"),
		settings.Check(c.MonologueTurns == 0 || c.MonologueTurns >= 2, "MonologueTurns", c.MonologueTurns,
			"must be at least 2 (one turn is no monologue)"),
		settings.Check(validFraction(c.MonologueNovelty), "MonologueNovelty", c.MonologueNovelty, "must be above 0 and at most 1"),
		settings.Check(c.ChantRepeats == 0 || c.ChantRepeats >= 2, "ChantRepeats", c.ChantRepeats,
			"must be at least 2 (one occurrence is no repeat)"),
		settings.Check(c.ChantMinChars == 0 || c.ChantMinChars >= 4, "ChantMinChars", c.ChantMinChars,
			"must be at least 4 (shorter repeats are ordinary text)"),
		settings.Check(c.ChantCarryChars == 0 || c.ChantCarryChars >= 4, "ChantCarryChars", c.ChantCarryChars,
			"must be at least 4 (shorter passages are ordinary text)"),
		settings.Check(c.CompactionRepeats == 0 || c.CompactionRepeats >= 2, "CompactionRepeats", c.CompactionRepeats,
			"must be at least 2 (one compaction is no loop)"),
	)
}

// validFraction accepts 0 (the default) and (0,1].
func validFraction(f float64) bool {
	return !math.IsNaN(f) && f >= 0 && f <= 1
}

// withDefaults fills zero fields, and replaces values Validate would reject,
// with the defaults: the core never fails on configuration, the edges
// (CLI, service start-up) validate and report.
func (c Config) withDefaults() Config {
	// The defaults come from the struct tags by reflection, which costs more
	// than a whole analysis; a valid config (every Analyze after the first
	// withDefaults, and every Detect inside it) never needs them.
	var d *Config
	def := func() Config {
		if d == nil {
			v := DefaultConfig()
			d = &v
		}
		return *d
	}
	if c.Window < 2 {
		c.Window = def().Window
	}
	if c.RepeatThreshold < 2 {
		c.RepeatThreshold = def().RepeatThreshold
	}
	if math.IsNaN(c.SimilarityThreshold) || c.SimilarityThreshold <= 0 || c.SimilarityThreshold > 1 {
		c.SimilarityThreshold = def().SimilarityThreshold
	}
	if c.NoProgressSpan < 2 {
		c.NoProgressSpan = def().NoProgressSpan
	}
	if c.AlternatingSteps < 4 {
		c.AlternatingSteps = def().AlternatingSteps
	}
	if c.MonologueTurns < 2 {
		c.MonologueTurns = def().MonologueTurns
	}
	if math.IsNaN(c.MonologueNovelty) || c.MonologueNovelty <= 0 || c.MonologueNovelty > 1 {
		c.MonologueNovelty = def().MonologueNovelty
	}
	if c.ChantRepeats < 2 {
		c.ChantRepeats = def().ChantRepeats
	}
	if c.ChantMinChars < 4 {
		c.ChantMinChars = def().ChantMinChars
	}
	if c.ChantCarryChars < 4 {
		c.ChantCarryChars = def().ChantCarryChars
	}
	if c.CompactionRepeats < 2 {
		c.CompactionRepeats = def().CompactionRepeats
	}
	return c
}

// Pattern is one stuck pattern. Adding a pattern is writing a type that
// implements it and adding it to a pattern list (DefaultPatterns for all
// callers); nothing else knows the patterns by name.
type Pattern interface {
	// Name is the lower_snake_case name reported as Signal.Pattern, e.g.
	// "circular_tools".
	Name() string
	// Detect looks at window (oldest first, newest last; only records of the
	// newest record's task, at most cfg.Window of them) and returns a signal
	// about the newest iteration, or nil. It must not modify window.
	Detect(window []events.IterationRecord, cfg Config) *events.Signal
}

// memoPattern is a Pattern that can share per-record work with the other
// patterns of one Analyze (memo.go). Its Detect is detect with a memo of
// its own; the result is the same either way.
type memoPattern interface {
	detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal
}

// DefaultPatterns are the three original patterns (docs/design-origins.md,
// "The three original patterns") and the ones added since.
// Analyze prefers strong evidence to weak, then the highest confidence, and
// gives ties to the earlier pattern, so the order is the last tie-break: a
// more specific diagnosis comes before a more general one that fires on the
// same evidence, and the original three keep the order they always had
// between themselves. The action is the pattern's own when its evidence is
// strong and a nudge when it is weak (evidence.go):
//
//	repetitive_output  0.90  prune_context   the whole response again
//	chanting           0.90  prune_context   a chunk repeated back to back in one response
//	                   0.80                  ... or closing consecutive responses
//	compaction_loop    0.88  decompose_task  compacting again without progress
//	monologue          0.85  nudge           tool-less restatements to the critic
//	alternating        0.85  nudge           A/B ping-pong, the workspace flipping
//	                   0.80                  ... the same without a workspace flip
//	circular_tools     0.85  prune_context   the same call and result again
//	action_error_loop  0.85  nudge           the same call failing, whatever the error says
//	no_progress        0.80  decompose_task  the same outcomes for the span
//
// circular_tools comes before action_error_loop so that a failing call
// repeated with byte-identical output keeps its original report; the error
// loop adds what it cannot see (the same call failing again under changing
// timings, paths, ids and messages).
func DefaultPatterns() []Pattern {
	return []Pattern{
		RepetitiveOutput{}, Chanting{}, CompactionLoop{}, Monologue{}, Alternating{},
		CircularTools{}, ActionErrorLoop{}, NoProgress{},
	}
}

// Analyze looks at window (oldest first; the caller keeps it) and returns the
// strongest signal or nil. It considers only the trailing records with the
// same TaskID as the newest one, and of those at most cfg.Window: a new task
// starts with a clean slate. If several patterns fire, strong evidence wins
// over weak, then the highest confidence; ties go to the earlier pattern in
// the list. A nil patterns means DefaultPatterns().
func Analyze(window []events.IterationRecord, cfg Config, patterns []Pattern) *events.Signal {
	cfg = cfg.withDefaults()
	if patterns == nil {
		patterns = DefaultPatterns()
	}
	tw := taskWindow(window, cfg.Window)
	if len(tw) == 0 {
		return nil
	}
	m := newMemo()
	var best *events.Signal
	for _, p := range patterns {
		var s *events.Signal
		if mp, ok := p.(memoPattern); ok {
			s = mp.detect(m, tw, cfg)
		} else {
			s = p.Detect(tw, cfg)
		}
		if s == nil {
			continue
		}
		if best == nil || stronger(s, best) {
			best = s
		}
	}
	return best
}

// stronger reports whether a beats b: more evidence first (what the builder
// does depends on it), then more confidence.
func stronger(a, b *events.Signal) bool {
	if wa, wb := a.Strength == events.StrengthWeak, b.Strength == events.StrengthWeak; wa != wb {
		return wb
	}
	return a.Confidence > b.Confidence
}

// ClearsWindow reports whether the evidence before s is used up once the
// builder has answered s, so that the window must be cleared and the same
// evidence cannot fire again. Strong evidence is answered by pruning or
// decomposing (or a rung above), which changes the context the evidence came
// from. Weak evidence is answered with a nudge, which leaves that context
// as it was: the evidence stays in the window, and if the nudge changes
// nothing, the next iteration adds to it and the signal comes back strong.
// That is how the detector sees "a nudge that changed nothing" without
// being told about nudges. A signal that does not say its strength (a
// pattern that does not grade) clears the window, as every signal used to.
func ClearsWindow(s *events.Signal) bool {
	return s != nil && s.Strength != events.StrengthWeak
}

// taskWindow is the trailing run of records of the newest record's task,
// capped to the last n.
func taskWindow(window []events.IterationRecord, n int) []events.IterationRecord {
	if len(window) == 0 {
		return nil
	}
	task := window[len(window)-1].TaskID
	start := len(window) - 1
	for start > 0 && window[start-1].TaskID == task {
		start--
	}
	if len(window)-start > n {
		start = len(window) - n
	}
	return window[start:]
}

// Detector keeps a window in memory for callers that see iterations one by
// one (`ralph stuck scan`, tests). It is not safe for concurrent use.
type Detector struct {
	cfg      Config
	patterns []Pattern
	window   []events.IterationRecord
}

// NewDetector returns a Detector with an empty window. A nil patterns means
// DefaultPatterns().
func NewDetector(cfg Config, patterns []Pattern) *Detector {
	if patterns == nil {
		patterns = DefaultPatterns()
	}
	return &Detector{cfg: cfg.withDefaults(), patterns: patterns}
}

// Observe adds r to the window and analyzes it. After a signal that
// ClearsWindow the window is cleared: the builder prunes or decomposes, so
// the evidence that led to the signal must not fire again on the next
// iteration. After a weak signal it is kept, for the evidence to grow.
func (d *Detector) Observe(r events.IterationRecord) *events.Signal {
	// Another task's records can never be considered again (Analyze keeps
	// only the trailing run of the newest task), so drop them now.
	if n := len(d.window); n > 0 && d.window[n-1].TaskID != r.TaskID {
		clear(d.window)
		d.window = d.window[:0]
	}
	d.window = append(d.window, r)
	if over := len(d.window) - d.cfg.Window; over > 0 {
		d.window = slices.Delete(d.window, 0, over)
	}
	s := Analyze(d.window, d.cfg, d.patterns)
	if ClearsWindow(s) {
		// clear drops references to tool outputs, which can be large.
		clear(d.window)
		d.window = d.window[:0]
	}
	return s
}
