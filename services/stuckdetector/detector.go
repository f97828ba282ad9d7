// Package stuckdetector owns stuck detection: the pure patterns that look at
// a task's most recent iterations and say whether the builder is looping or
// making no progress (detector.go, patterns.go and one file per newer
// pattern, scan.go: no I/O, no clock), a labelled corpus of trajectories
// with the evaluation that scores the patterns against it (corpus/,
// corpus.go, evaluate.go), and the service shell that feeds the patterns
// from the bus and keeps the window in Redis (service.go).
package stuckdetector

import (
	"fmt"
	"math"
	"slices"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Config tunes detection. Zero fields take their defaults, so a Config that
// sets only what an operator overrode (e.g. `ralph stuck scan --window 8`)
// still behaves.
type Config struct {
	// Window is how many of a task's most recent iterations are kept and
	// considered. It bounds both memory and how far back a loop can reach,
	// so every span below is capped to it. Eight leaves room for an A/B
	// ping-pong and a compaction cycle on either side of it.
	Window int `envconfig:"STUCK_WINDOW" default:"8"`
	// RepeatThreshold is how many identical outputs, tool calls or failures
	// make a loop; two could be a coincidence (a re-check), three is a habit.
	RepeatThreshold int `envconfig:"STUCK_REPEAT_THRESHOLD" default:"3"`
	// SimilarityThreshold is the Jaccard similarity of word 3-shingles at or
	// above which two assistant texts count as the same response. Below 1 so
	// that a changed attempt number or a reworded clause does not hide a loop.
	SimilarityThreshold float64 `envconfig:"STUCK_SIMILARITY_THRESHOLD" default:"0.9"`
	// NoProgressSpan is how many iterations in a row must show no progress
	// (an unchanged workspace, or the same failing tests or error despite
	// different attempts) before no_progress fires. It is ADR-003's history
	// window of five, kept apart from Window so that a longer memory does not
	// make the detector slower to call a stall.
	NoProgressSpan int `envconfig:"STUCK_NO_PROGRESS_SPAN" default:"5"`
	// AlternatingSteps is how many trailing iterations must ping-pong between
	// two states (A/B/A/B) before alternating fires. Four is two full cycles:
	// A/B/A alone is a re-check, and a fifth step would let circular_tools
	// fire first on any ping-pong of reads.
	AlternatingSteps int `envconfig:"STUCK_ALTERNATING_STEPS" default:"4"`
	// MonologueTurns is how many consecutive iterations without tool calls
	// (each one a completion claim the critic turned down) make a monologue.
	MonologueTurns int `envconfig:"STUCK_MONOLOGUE_TURNS" default:"3"`
	// MonologueNovelty is the largest share of a turn's content words not
	// said earlier in the window for which the turn still counts as a
	// restatement. A third lets a restatement reword itself; a revised
	// answer that adds substance is well above it.
	MonologueNovelty float64 `envconfig:"STUCK_MONOLOGUE_NOVELTY" default:"0.34"`
	// ChantRepeats is how many times one chunk (a sentence or line) must
	// recur, in one response or in consecutive responses, to be chanting.
	ChantRepeats int `envconfig:"STUCK_CHANT_REPEATS" default:"3"`
	// ChantMinWords is the shortest chunk, in words, that counts: stock
	// phrases such as "Running the tests." are how terse models narrate.
	ChantMinWords int `envconfig:"STUCK_CHANT_MIN_WORDS" default:"8"`
	// CompactionRepeats is how many compactions with no progress between them
	// make a compaction loop. Two: a compaction that the builder has to
	// repeat without having gained anything is already a loop.
	CompactionRepeats int `envconfig:"STUCK_COMPACTION_REPEATS" default:"2"`
}

// DefaultConfig is ADR-003's repeat threshold of three and no-progress span
// of five, in a window of eight that leaves room for the newer patterns.
func DefaultConfig() Config {
	return Config{
		Window:              8,
		RepeatThreshold:     3,
		SimilarityThreshold: 0.9,
		NoProgressSpan:      5,
		AlternatingSteps:    4,
		MonologueTurns:      3,
		MonologueNovelty:    0.34,
		ChantRepeats:        3,
		ChantMinWords:       8,
		CompactionRepeats:   2,
	}
}

// Validate rejects settings that cannot mean anything. Zero is accepted
// everywhere and means the default.
func (c Config) Validate() error {
	switch {
	case c.Window < 0:
		return fmt.Errorf("field window: must be >= 1, got %d", c.Window)
	case c.RepeatThreshold < 0 || c.RepeatThreshold == 1:
		return fmt.Errorf("field repeat_threshold: must be >= 2 (one occurrence is no repeat), got %d", c.RepeatThreshold)
	case !validFraction(c.SimilarityThreshold):
		return fmt.Errorf("field similarity_threshold: must be in (0,1], got %v", c.SimilarityThreshold)
	case c.NoProgressSpan < 0 || c.NoProgressSpan == 1:
		return fmt.Errorf("field no_progress_span: must be >= 2 (one quiet iteration is no stall), got %d", c.NoProgressSpan)
	case c.AlternatingSteps < 0 || (c.AlternatingSteps > 0 && c.AlternatingSteps < 4):
		return fmt.Errorf("field alternating_steps: must be >= 4 (two full A/B cycles), got %d", c.AlternatingSteps)
	case c.MonologueTurns < 0 || c.MonologueTurns == 1:
		return fmt.Errorf("field monologue_turns: must be >= 2 (one turn is no monologue), got %d", c.MonologueTurns)
	case !validFraction(c.MonologueNovelty):
		return fmt.Errorf("field monologue_novelty: must be in (0,1], got %v", c.MonologueNovelty)
	case c.ChantRepeats < 0 || c.ChantRepeats == 1:
		return fmt.Errorf("field chant_repeats: must be >= 2 (one occurrence is no repeat), got %d", c.ChantRepeats)
	case c.ChantMinWords < 0:
		return fmt.Errorf("field chant_min_words: must be >= 1, got %d", c.ChantMinWords)
	case c.CompactionRepeats < 0 || c.CompactionRepeats == 1:
		return fmt.Errorf("field compaction_repeats: must be >= 2 (one compaction is no loop), got %d", c.CompactionRepeats)
	}
	return nil
}

// validFraction accepts 0 (the default) and (0,1].
func validFraction(f float64) bool {
	return !math.IsNaN(f) && f >= 0 && f <= 1
}

// withDefaults fills zero fields, and replaces values Validate would reject,
// with the defaults: the core never fails on configuration, the edges
// (CLI, service start-up) validate and report.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Window < 1 {
		c.Window = d.Window
	}
	if c.RepeatThreshold < 2 {
		c.RepeatThreshold = d.RepeatThreshold
	}
	if math.IsNaN(c.SimilarityThreshold) || c.SimilarityThreshold <= 0 || c.SimilarityThreshold > 1 {
		c.SimilarityThreshold = d.SimilarityThreshold
	}
	if c.NoProgressSpan < 2 {
		c.NoProgressSpan = d.NoProgressSpan
	}
	if c.AlternatingSteps < 4 {
		c.AlternatingSteps = d.AlternatingSteps
	}
	if c.MonologueTurns < 2 {
		c.MonologueTurns = d.MonologueTurns
	}
	if math.IsNaN(c.MonologueNovelty) || c.MonologueNovelty <= 0 || c.MonologueNovelty > 1 {
		c.MonologueNovelty = d.MonologueNovelty
	}
	if c.ChantRepeats < 2 {
		c.ChantRepeats = d.ChantRepeats
	}
	if c.ChantMinWords < 1 {
		c.ChantMinWords = d.ChantMinWords
	}
	if c.CompactionRepeats < 2 {
		c.CompactionRepeats = d.CompactionRepeats
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

// DefaultPatterns are ADR-003's three patterns and the ones added since.
// Analyze keeps the highest confidence and gives ties to the earlier
// pattern, so the order is the tie-break: a more specific diagnosis comes
// before a more general one that fires on the same evidence, and the
// original three keep the order they always had between themselves.
//
//	repetitive_output  0.90  prune_context   the whole response again
//	chanting           0.90  prune_context   a chunk repeated inside one response
//	                   0.80                  ... or appended to consecutive responses
//	compaction_loop    0.88  decompose_task  compacting again without progress
//	monologue          0.85  nudge           tool-less restatements to the critic
//	alternating        0.85  nudge           A/B ping-pong, the workspace flipping
//	                   0.80                  ... the same without a workspace flip
//	circular_tools     0.85  prune_context   the same call and result again
//	action_error_loop  0.85  nudge           the same call failing the same way
//	no_progress        0.80  decompose_task  nothing changes for the span
//
// circular_tools comes before action_error_loop so that a failing call
// repeated with byte-identical output keeps its original report; the error
// loop adds what it cannot see (the same failure under changing timings,
// paths and ids).
func DefaultPatterns() []Pattern {
	return []Pattern{
		RepetitiveOutput{}, Chanting{}, CompactionLoop{}, Monologue{}, Alternating{},
		CircularTools{}, ActionErrorLoop{}, NoProgress{},
	}
}

// Analyze looks at window (oldest first; the caller keeps it) and returns the
// strongest signal or nil. It considers only the trailing records with the
// same TaskID as the newest one, and of those at most cfg.Window: a new task
// starts with a clean slate. If several patterns fire, the highest confidence
// wins; ties go to the earlier pattern in the list. A nil patterns means
// DefaultPatterns().
func Analyze(window []events.IterationRecord, cfg Config, patterns []Pattern) *events.Signal {
	cfg = cfg.withDefaults()
	if patterns == nil {
		patterns = DefaultPatterns()
	}
	tw := taskWindow(window, cfg.Window)
	if len(tw) == 0 {
		return nil
	}
	var best *events.Signal
	for _, p := range patterns {
		s := p.Detect(tw, cfg)
		if s != nil && (best == nil || s.Confidence > best.Confidence) {
			best = s
		}
	}
	return best
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

// Observe adds r to the window and analyzes it. After a signal fires the
// window is cleared: the builder intervenes (prunes, decomposes, ...), so the
// evidence that led to the signal must not fire again on the next iteration.
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
	if s != nil {
		// clear drops references to tool outputs, which can be large.
		clear(d.window)
		d.window = d.window[:0]
	}
	return s
}
