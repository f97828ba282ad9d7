// Package stuckdetector owns stuck detection: the pure patterns that look at
// a task's most recent iterations and say whether the builder is looping or
// making no progress (detector.go, patterns.go, scan.go: no I/O, no clock),
// and the service shell that feeds them from the bus and keeps the window in
// Redis (service.go).
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
	// considered. It bounds both memory and how far back a loop can reach.
	Window int `envconfig:"STUCK_WINDOW" default:"5"`
	// RepeatThreshold is how many identical outputs or tool calls make a
	// loop; two could be a coincidence (a re-check), three is a habit.
	RepeatThreshold int `envconfig:"STUCK_REPEAT_THRESHOLD" default:"3"`
	// SimilarityThreshold is the Jaccard similarity of word 3-shingles at or
	// above which two assistant texts count as the same response. Below 1 so
	// that a changed attempt number or a reworded clause does not hide a loop.
	SimilarityThreshold float64 `envconfig:"STUCK_SIMILARITY_THRESHOLD" default:"0.9"`
}

// DefaultConfig is ADR-003's history window of five with a repeat threshold
// of three.
func DefaultConfig() Config {
	return Config{Window: 5, RepeatThreshold: 3, SimilarityThreshold: 0.9}
}

// Validate rejects settings that cannot mean anything. Zero is accepted
// everywhere and means the default.
func (c Config) Validate() error {
	switch {
	case c.Window < 0:
		return fmt.Errorf("field window: must be >= 1, got %d", c.Window)
	case c.RepeatThreshold < 0 || c.RepeatThreshold == 1:
		return fmt.Errorf("field repeat_threshold: must be >= 2 (one occurrence is no repeat), got %d", c.RepeatThreshold)
	case math.IsNaN(c.SimilarityThreshold) || c.SimilarityThreshold < 0 || c.SimilarityThreshold > 1:
		return fmt.Errorf("field similarity_threshold: must be in (0,1], got %v", c.SimilarityThreshold)
	}
	return nil
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

// DefaultPatterns are ADR-003's three patterns, strongest first so that the
// list order also documents the tie-break order.
func DefaultPatterns() []Pattern {
	return []Pattern{RepetitiveOutput{}, NoProgress{}, CircularTools{}}
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
