package stuckdetector

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ralphmesh/ralph/pkg/events"
)

const monologueConfidence = 0.85

// Monologue fires when the last MonologueTurns iterations made no tool calls
// and every one after the first said little that had not been said earlier
// in the window: at most MonologueNovelty of its content words are new.
//
// In this system a turn without tool calls is a completion claim (the
// builder sets ClaimedDone and hands it to the critic), so consecutive
// tool-less turns mean the critic turned each claim down and the model
// answered with words instead of work: restating, apologising, insisting.
// The definition rests on the missing tool calls, not on ClaimedDone, so it
// reads hand-written records that leave the flag out the same way. The first
// turn of the run may be a genuine summary; only what follows it has to be
// a restatement. Turns without text are not talk and break the run.
//
// Novelty is counted in content words (stop words and words under three
// letters dropped) rather than in shingles, because a restatement rewords:
// "I implemented the retry" and "the retry is implemented" share no
// 3-shingle but say the same. A revised answer to a writing task, where the
// text is the work, brings new words and does not fire.
//
// The action is a nudge: the model is not short of context but of the
// realisation that the critic's objection needs an action, and telling it
// so is the cheapest thing that can work; the builder escalates if it does
// not (a turn more of the same is strong evidence, and the builder never
// nudges a task twice).
type Monologue struct{}

// Name implements Pattern.
func (Monologue) Name() string { return "monologue" }

// Detect implements Pattern.
func (p Monologue) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	return p.detect(newMemo(), window, cfg)
}

func (p Monologue) detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	n := min(cfg.MonologueTurns, cfg.Window)
	// A window of one cannot hold a monologue, only a claim.
	if n < 2 {
		return nil
	}
	most, ok := restatements(m, window, n, cfg.MonologueNovelty)
	if !ok {
		return nil
	}
	turns := longestRun(n, len(window), func(k int) bool {
		r, ok := restatements(m, window, k, cfg.MonologueNovelty)
		if ok {
			most = r
		}
		return ok
	})
	recent := window[len(window)-turns:]
	newest := recent[len(recent)-1]
	evidence := iterationsOf(recent)
	return graded(&events.Signal{
		Iteration:  newest.Iteration,
		Pattern:    p.Name(),
		Confidence: monologueConfidence,
		Diagnosis: fmt.Sprintf("%s made no tool calls (%d completion claims in a row) and restated earlier text, at most %.0f%% of their words new: %q",
			formatIterations(evidence), turns, most*100, truncate(strings.TrimSpace(newest.AssistantText))),
		Evidence: evidence,
	}, events.ActionNudge, turns, n, countOf(turns, "turn")+" without tool calls")
}

// restatements reports whether the last n records of window made no tool
// calls and each after the first said at most novelty of its content words
// for the first time in the window, and the largest such share.
func restatements(m *memo, window []events.IterationRecord, n int, novelty float64) (most float64, ok bool) {
	if len(window) < n {
		return 0, false
	}
	turns := window[len(window)-n:]
	for _, r := range turns {
		if len(r.ToolCalls) > 0 || len(m.contentWords(r.AssistantText)) == 0 {
			return 0, false
		}
	}
	said := map[string]bool{}
	for _, r := range window[:len(window)-n+1] {
		for w := range m.contentWords(r.AssistantText) {
			said[w] = true
		}
	}
	for _, r := range turns[1:] {
		words := m.contentWords(r.AssistantText)
		fresh := 0
		for w := range words {
			if !said[w] {
				fresh++
			}
		}
		share := float64(fresh) / float64(len(words))
		if share > novelty {
			return 0, false
		}
		most = max(most, share)
		for w := range words {
			said[w] = true
		}
	}
	return most, true
}

// contentWords is the set of words of s that carry meaning: textTokens
// without stop words, numbers and words under three letters.
func contentWords(s string) map[string]bool { return contentWordsOf(textTokens(s)) }

// contentWordsOf is the content words of tokens (textTokens).
func contentWordsOf(tokens []string) map[string]bool {
	set := map[string]bool{}
	for _, t := range tokens {
		if utf8.RuneCountInString(t) < 3 || stopWords[t] || strings.Trim(t, "0") == "" {
			continue
		}
		set[t] = true
	}
	return set
}

// stopWords are English function words: rewording a claim shuffles them
// freely, so they say nothing about whether the claim is new.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		about above after again against all also and any are because been before being below
		between both but can could did does doing done down during each few for from further
		had has have having her here hers herself him himself his how into its itself just let
		more most much must myself nor not now off once only other our ours ourselves out over
		own same she should some such than that the their theirs them themselves then there
		these they this those through too under until very was were what when where which
		while who whom why will with would you your yours yourself yourselves already still
		yes indeed well okay sure`) {
		m[w] = true
	}
	return m
}()
