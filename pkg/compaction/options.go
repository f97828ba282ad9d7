package compaction

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Mode selects the planning policy.
type Mode string

// Modes.
const (
	// ModeLegacy: one LLM summary of everything but the system prompt, the
	// task and the most recent turn, re-merging any earlier summary. Kept
	// as the baseline the others are measured against.
	ModeLegacy Mode = "legacy"
	// ModeTiered: pressure tiers, lanes and harm ordering with the static
	// default ratios.
	ModeTiered Mode = "tiered"
	// ModeTieredAdaptive: tiered plus the feasibility gate from realised
	// ratios, the anti-thrash controls (call budget, cooldown, no-gain
	// floor, cache) and the optional advisor.
	ModeTieredAdaptive Mode = "tiered_adaptive"
)

// Options are the planner's knobs. DefaultOptions gives safe values; the
// zero value is not valid.
type Options struct {
	Mode Mode
	// PressureRatio and CriticalRatio are the shares of LimitTokens at
	// which the context is under pressure (compaction starts) and critical
	// (protected lanes may be touched as a last resort).
	PressureRatio, CriticalRatio float64
	// TargetRatio is the share of LimitTokens a plan aims for. It is below
	// PressureRatio so that a compaction buys several turns before the next.
	TargetRatio float64
	// RecentTurns: units used in the last RecentTurns turns stay raw.
	RecentTurns int
	// MaxCallsPerIteration bounds the compactor LLM calls per iteration,
	// counting those History says were already made (adaptive mode).
	MaxCallsPerIteration int
	// MinGainTokens: an op saving fewer tokens is not worth doing (adaptive
	// mode; tiered only refuses ops that save nothing). Ops without an LLM
	// call (pointers) need a quarter of it.
	MinGainTokens int
	// OvershootLimit consecutive overshoots of a label start a cooldown of
	// CooldownIterations iterations for it (adaptive mode).
	OvershootLimit, CooldownIterations int
	// MinFeasibleRatio is the smallest output/input ratio believed
	// achievable until History has realised ratios for a label.
	MinFeasibleRatio float64
	// MaxUsefulRatio: an LLM op expected to keep more than this share of
	// its input is not worth its call (unachievable_ratio).
	MaxUsefulRatio float64
	// MaxOutputTokens is the largest output one compactor call is asked
	// for; it also bounds how much one checkpoint merge takes in.
	MaxOutputTokens int
	// PointerTokens is the size of a pointer with its digest.
	PointerTokens int
	// MinTargetShare: when a plan cannot reach the target, its compactor
	// calls must cover at least this share of the way there or they are not
	// made (adaptive mode; unachievable_ratio; at the critical tier only
	// when the free ops alone leave the context under pressure).
	MinTargetShare float64
	// CheckpointOverheadTokens is what a checkpoint costs whatever it
	// merges: its header, section headings and the facts it must name.
	CheckpointOverheadTokens int
	// AdvisorEpsilon is the relative score difference within which
	// candidates count as tied; AdvisorTopK how many of them the advisor
	// may reorder (below 2 disables it); AdvisorTimeout how long it may take.
	AdvisorEpsilon float64
	AdvisorTopK    int
	AdvisorTimeout time.Duration
	// Model and PromptVersion identify the compactor in cache keys: a
	// result of another model or prompt is not reused.
	Model, PromptVersion string
}

// DefaultOptions are the defaults the Summarizer starts from and `ralph
// compact plan` uses.
func DefaultOptions() Options {
	return Options{
		Mode:                     ModeTieredAdaptive,
		PressureRatio:            0.70,
		CriticalRatio:            0.90,
		TargetRatio:              0.50,
		RecentTurns:              2,
		MaxCallsPerIteration:     4,
		MinGainTokens:            150,
		OvershootLimit:           2,
		CooldownIterations:       3,
		MinFeasibleRatio:         0.05,
		MaxUsefulRatio:           0.80,
		MaxOutputTokens:          1024,
		PointerTokens:            60,
		CheckpointOverheadTokens: 120,
		MinTargetShare:           0.25,
		AdvisorEpsilon:           0.05,
		AdvisorTopK:              4,
		AdvisorTimeout:           5 * time.Second,
		PromptVersion:            "v1",
	}
}

// DefaultRatio is the output/input token ratio an LLM op is expected to
// reach before any has been realised. ADR-003 asks summaries for 20% of the
// original; a single tool output or message keeps more of its substance.
func DefaultRatio(op OpKind) float64 {
	switch op {
	case OpCompactToolArgs:
		return 0.30
	case OpCompactToolOutput:
		return 0.25
	case OpCompactHistorical:
		return 0.35
	case OpCheckpointMerge:
		return 0.20
	default:
		return 1
	}
}

// ErrInvalidOptions is wrapped by every Options.Validate error.
var ErrInvalidOptions = errors.New("invalid compaction options")

// Validate names every knob that is out of range.
func (o Options) Validate() error {
	var errs []string
	bad := func(knob, format string, a ...any) {
		errs = append(errs, knob+": "+fmt.Sprintf(format, a...))
	}
	switch o.Mode {
	case ModeLegacy, ModeTiered, ModeTieredAdaptive:
	default:
		bad("Mode", "unknown mode %q (want legacy, tiered or tiered_adaptive)", o.Mode)
	}
	if !(o.PressureRatio > 0 && o.PressureRatio < 1) {
		bad("PressureRatio", "must be in (0, 1), got %g", o.PressureRatio)
	}
	// Equal to PressureRatio is allowed: no pressure tier, straight to critical.
	if !(o.CriticalRatio >= o.PressureRatio && o.CriticalRatio <= 1) {
		bad("CriticalRatio", "must be in [PressureRatio, 1], got %g", o.CriticalRatio)
	}
	if !(o.TargetRatio > 0 && o.TargetRatio < o.PressureRatio) {
		bad("TargetRatio", "must be in (0, PressureRatio), got %g", o.TargetRatio)
	}
	nonNegative := []struct {
		knob string
		v    int
	}{
		{"RecentTurns", o.RecentTurns}, {"MaxCallsPerIteration", o.MaxCallsPerIteration},
		{"MinGainTokens", o.MinGainTokens}, {"CooldownIterations", o.CooldownIterations}, {"AdvisorTopK", o.AdvisorTopK},
	}
	for _, k := range nonNegative {
		if k.v < 0 {
			bad(k.knob, "must not be negative, got %d", k.v)
		}
	}
	if o.OvershootLimit < 1 {
		bad("OvershootLimit", "must be at least 1, got %d", o.OvershootLimit)
	}
	if !(o.MinFeasibleRatio >= 0 && o.MinFeasibleRatio < 1) {
		bad("MinFeasibleRatio", "must be in [0, 1), got %g", o.MinFeasibleRatio)
	}
	if !(o.MaxUsefulRatio > o.MinFeasibleRatio && o.MaxUsefulRatio <= 1) {
		bad("MaxUsefulRatio", "must be in (MinFeasibleRatio, 1], got %g", o.MaxUsefulRatio)
	}
	if o.MaxOutputTokens < 1 {
		bad("MaxOutputTokens", "must be at least 1, got %d", o.MaxOutputTokens)
	}
	if math.IsNaN(o.MinTargetShare) || o.MinTargetShare < 0 || o.MinTargetShare > 1 {
		bad("MinTargetShare", "must be in [0,1], got %v", o.MinTargetShare)
	}
	if o.CheckpointOverheadTokens < 0 {
		bad("CheckpointOverheadTokens", "must be at least 0, got %d", o.CheckpointOverheadTokens)
	}
	if o.PointerTokens < 1 {
		bad("PointerTokens", "must be at least 1, got %d", o.PointerTokens)
	}
	if !(o.AdvisorEpsilon >= 0) {
		bad("AdvisorEpsilon", "must not be negative, got %g", o.AdvisorEpsilon)
	}
	if o.AdvisorTopK >= 2 && o.AdvisorTimeout <= 0 {
		bad("AdvisorTimeout", "must be positive when the advisor is enabled (AdvisorTopK %d), got %s", o.AdvisorTopK, o.AdvisorTimeout)
	}
	if len(errs) == 0 {
		return nil
	}
	// One line, every bad knob: `ralph config` and the CLI print it as is.
	return fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(errs, "; "))
}
