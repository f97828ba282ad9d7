package stuckdetector

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

// repetitiveOutputConfidence comes from the original patterns (docs/design-origins.md): repetition of the whole response
// is the surest sign of a loop.
const repetitiveOutputConfidence = 0.9

// RepetitiveOutput fires when the last RepeatThreshold responses are the same
// response: near-identical assistant text and the same tool calls with the
// same results. The model is cycling through what it already said, so the
// context (not the task) is the problem: prune it, once the evidence is
// strong (more than RepeatThreshold of them in a row); at the threshold,
// nudge.
type RepetitiveOutput struct{}

// Name implements Pattern.
func (RepetitiveOutput) Name() string { return "repetitive_output" }

// Detect implements Pattern.
func (p RepetitiveOutput) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	return p.detect(newMemo(), window, cfg)
}

func (p RepetitiveOutput) detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	n := cfg.RepeatThreshold
	if len(window) < n {
		return nil
	}
	newest := window[len(window)-1]
	newestShingles := m.textShingles(newest.AssistantText)
	if len(newestShingles) == 0 {
		return nil
	}
	// Results are part of the response being repeated: the same "Checking
	// the build status." over a poll whose output changes is the model
	// reacting to a changing world, not a loop.
	newestCalls := m.callFingerprint(newest.ToolCalls)
	minSim := 1.0
	run := 1
	for i := len(window) - 2; i >= 0; i-- {
		r := window[i]
		sh := m.textShingles(r.AssistantText)
		if len(sh) == 0 {
			break
		}
		sim := jaccard(sh, newestShingles)
		if sim < cfg.SimilarityThreshold || !slices.Equal(m.callFingerprint(r.ToolCalls), newestCalls) {
			break
		}
		minSim = min(minSim, sim)
		run++
	}
	if run < n {
		return nil
	}
	recent := window[len(window)-run:]

	similarity := "the same"
	if minSim < 1 {
		similarity = fmt.Sprintf("near-identical (similarity %.2f)", minSim)
	}
	calls := "no tool calls"
	if len(newest.ToolCalls) > 0 {
		calls = "the same tool calls and results: " + describeCalls(newest.ToolCalls)
	}
	evidence := iterationsOf(recent)
	return graded(&events.Signal{
		Iteration:  newest.Iteration,
		Pattern:    p.Name(),
		Confidence: repetitiveOutputConfidence,
		Diagnosis: fmt.Sprintf("%s assistant text %d times in %s (%q) with %s",
			similarity, run, formatIterations(evidence), truncate(strings.TrimSpace(newest.AssistantText)), calls),
		Evidence: evidence,
	}, events.ActionPrune, run, n, countOf(run, "identical response"))
}
