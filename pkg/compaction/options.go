package compaction

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ralphmesh/ralph/pkg/settings"
)

// Mode selects the planning policy.
type Mode string

// Modes.
const (
	// ModeOff: the builder never asks for compaction. The planner does not
	// plan in it; a summarizer configured with it plans with the default
	// mode should it be asked anyway.
	ModeOff Mode = "off"
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

// Options are the planner's knobs. Their tags are the one home of their
// defaults (RALPH_COMPACTION_*, through the summarizer's Config and
// pkg/config); DefaultOptions reads them. The zero value is not valid.
type Options struct {
	Mode Mode `split_words:"true" default:"tiered_adaptive" desc:"off, legacy (one summary of everything), tiered or tiered_adaptive"`
	// PressureRatio and CriticalRatio are the shares of LimitTokens at
	// which the context is under pressure (compaction starts) and critical
	// (protected lanes may be touched as a last resort).
	PressureRatio float64 `split_words:"true" default:"0.70" desc:"share of the builder's context window at which it asks for compaction"`
	CriticalRatio float64 `split_words:"true" default:"0.90" desc:"share at which protected lanes may be compacted as a last resort"`
	// TargetRatio is the share of LimitTokens a plan aims for. It is well
	// below PressureRatio, half of it by default: a hysteresis, so that a
	// compaction is done deep and seldom. Each one breaks the provider's
	// prompt cache from its first rewritten unit on, and buys as many
	// turns as the gap between the two leaves.
	TargetRatio float64 `split_words:"true" default:"0.35" desc:"share of the window a compaction aims for, well below the pressure ratio so that compaction is deep and seldom"`
	// RecentTurns: units used in the last RecentTurns turns stay raw.
	RecentTurns int `split_words:"true" default:"2" desc:"units used in this many recent turns stay raw"`
	// MaxCallsPerIteration bounds the compactor LLM calls per iteration,
	// counting those History says were already made (adaptive mode).
	MaxCallsPerIteration int `split_words:"true" default:"4" desc:"compactor LLM calls one iteration may spend"`
	// MinGainTokens: an op saving fewer tokens is not worth doing (adaptive
	// mode; tiered only refuses ops that save nothing). Ops without an LLM
	// call (pointers) need a quarter of it.
	MinGainTokens int `split_words:"true" default:"150" desc:"a compactor call saving fewer tokens is skipped (no_gain); a quarter of it for pointers"`
	// CooldownIterations is how long a label rests after OvershootLimit
	// consecutive overshoots (adaptive mode).
	CooldownIterations int `split_words:"true" default:"3" desc:"iterations a label rests after repeated overshoot"`
	// AdvisorTimeout is how long the advisor may take; AdvisorEpsilon the
	// relative score difference within which candidates count as tied;
	// AdvisorTopK how many of them the advisor may reorder (below 2
	// disables it).
	AdvisorTimeout time.Duration `split_words:"true" default:"5s" desc:"how long the advisor may take"`
	AdvisorEpsilon float64       `split_words:"true" default:"0.05" desc:"relative score gap within which candidates count as tied"`
	AdvisorTopK    int           `split_words:"true" default:"4" desc:"most tied candidates the advisor may reorder (below 2: never asked)"`
	// OvershootLimit consecutive overshoots of a label start a cooldown of
	// CooldownIterations iterations for it (adaptive mode).
	OvershootLimit int `split_words:"true" default:"2" desc:"consecutive outputs over their target that start a cooldown"`
	// MinFeasibleRatio is the smallest output/input ratio believed
	// achievable until History has realised ratios for a label.
	MinFeasibleRatio float64 `split_words:"true" default:"0.05" desc:"smallest output/input ratio believed achievable before any is realised"`
	// MaxUsefulRatio: an LLM op expected to keep more than this share of
	// its input is not worth its call (unachievable_ratio).
	MaxUsefulRatio float64 `split_words:"true" default:"0.80" desc:"a call expected to keep more than this share is not made (unachievable_ratio)"`
	// MinTargetShare is the least share of the way to a target it cannot
	// reach that a plan must cover to be worth carrying out (adaptive mode;
	// unachievable_ratio). At the pressure tier such a plan waits for the
	// critical tier unless the next step would otherwise overflow the limit
	// and the plan covers this share; at the critical tier its compactor
	// calls must cover this share or they are not made (only when the free
	// ops alone leave the context under pressure and the plan touches no
	// protected unit).
	MinTargetShare float64 `split_words:"true" default:"0.25" desc:"share of the way to an unreachable target a plan (at the critical tier: its calls) must cover to be carried out"`
	// MaxOutputTokens is the largest output one compactor call is asked
	// for; it also bounds how much one checkpoint merge takes in.
	MaxOutputTokens int `split_words:"true" default:"1024" desc:"largest output one compactor call is asked for"`
	// PointerTokens is the size of a pointer with its digest.
	PointerTokens int `split_words:"true" default:"60" desc:"size of a pointer with its digest"`
	// CheckpointOverhead is what a checkpoint costs, in tokens, whatever it
	// merges: its header, section headings and the facts it must name.
	CheckpointOverhead int `split_words:"true" default:"120" desc:"tokens a checkpoint costs whatever it merges (headings, facts)"`
	// Advisor: the caller will put near-tied candidates to an advisor
	// (Result.NearTies, ApplyAdvice). It is set per call by the summarizer
	// from its own setting (RALPH_COMPACTION_ADVISOR), so it is no setting
	// here.
	Advisor bool `ignored:"true"`
	// Model and PromptVersion identify the compactor in cache keys: a
	// result of another model or prompt is not reused. They are not
	// settings: the wiring takes them from the summarizer's model and prompt.
	Model         string `ignored:"true"`
	PromptVersion string `ignored:"true"`
}

// defaultPromptVersion names the default four-section summary prompt
// (docs/design-origins.md) in cache keys.
const defaultPromptVersion = "v1"

// DefaultOptions are the options at their documented defaults: what the
// Summarizer starts from and `ralph compact plan` uses.
func DefaultOptions() Options {
	o := settings.Defaults[Options]()
	o.PromptVersion = defaultPromptVersion
	return o
}

// DefaultRatio is the output/input token ratio an LLM op is expected to
// reach before any has been realised. Summaries are asked for 20% of the
// original (docs/design-origins.md, "Phase 3: memory compressed by
// meaning"); a single tool output or message keeps more of its substance.
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

// Validate names every knob that is out of range, on one line.
func (o Options) Validate() error {
	modeOK := slices.Contains([]Mode{ModeOff, ModeLegacy, ModeTiered, ModeTieredAdaptive}, o.Mode)
	err := settings.Join(
		settings.Check(modeOK, "Mode", o.Mode, "not one of off, legacy, tiered, tiered_adaptive"),
		settings.Check(o.PressureRatio > 0 && o.PressureRatio < 1, "PressureRatio", o.PressureRatio, "must be above 0 and below 1"),
		// Equal to PressureRatio is allowed: no pressure tier, straight to critical.
		settings.Check(o.CriticalRatio >= o.PressureRatio && o.CriticalRatio <= 1, "CriticalRatio", o.CriticalRatio,
			"must be at least the pressure ratio (%g) and at most 1", o.PressureRatio),
		settings.Check(o.TargetRatio > 0 && o.TargetRatio < o.PressureRatio, "TargetRatio", o.TargetRatio,
			"must be above 0 and below the pressure ratio (%g)", o.PressureRatio),
		settings.Check(o.RecentTurns >= 0, "RecentTurns", o.RecentTurns, "must not be negative"),
		settings.Check(o.MaxCallsPerIteration >= 0, "MaxCallsPerIteration", o.MaxCallsPerIteration, "must not be negative"),
		settings.Check(o.MinGainTokens >= 0, "MinGainTokens", o.MinGainTokens, "must not be negative"),
		settings.Check(o.CooldownIterations >= 0, "CooldownIterations", o.CooldownIterations, "must not be negative"),
		settings.Check(o.AdvisorTopK >= 0, "AdvisorTopK", o.AdvisorTopK, "must not be negative"),
		settings.Check(o.OvershootLimit >= 1, "OvershootLimit", o.OvershootLimit, "must be at least 1"),
		settings.Check(o.MinFeasibleRatio >= 0 && o.MinFeasibleRatio < 1, "MinFeasibleRatio", o.MinFeasibleRatio, "must be at least 0 and below 1"),
		settings.Check(o.MaxUsefulRatio > o.MinFeasibleRatio && o.MaxUsefulRatio <= 1, "MaxUsefulRatio", o.MaxUsefulRatio,
			"must be above the min feasible ratio (%g) and at most 1", o.MinFeasibleRatio),
		settings.Check(o.MaxOutputTokens >= 1, "MaxOutputTokens", o.MaxOutputTokens, "must be at least 1"),
		settings.Check(!math.IsNaN(o.MinTargetShare) && o.MinTargetShare >= 0 && o.MinTargetShare <= 1, "MinTargetShare", o.MinTargetShare,
			"must be between 0 and 1"),
		settings.Check(o.CheckpointOverhead >= 0, "CheckpointOverhead", o.CheckpointOverhead, "must not be negative"),
		settings.Check(o.PointerTokens >= 1, "PointerTokens", o.PointerTokens, "must be at least 1"),
		settings.Check(o.AdvisorEpsilon >= 0, "AdvisorEpsilon", o.AdvisorEpsilon, "must not be negative"),
		settings.Check(o.AdvisorTopK < 2 || o.AdvisorTimeout > 0, "AdvisorTimeout", o.AdvisorTimeout,
			"must be positive when the advisor may rank (advisor top k %d)", o.AdvisorTopK),
	)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return nil
}
