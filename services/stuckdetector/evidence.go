package stuckdetector

// This file is how a signal's evidence becomes its strength and its action.
// Every pattern counts something (identical calls, compactions, turns, steps
// of a ping-pong, iterations of a stall) and fires when the count reaches
// its threshold. At the threshold the evidence is weak: three identical
// reads may be a re-check, two compactions may be bad luck, and a nudge is
// cheap, while pruning or decomposing a healthy task wrecks it. Past the
// threshold (four reads; a loop that went on after the nudge, which the
// window shows because weak evidence is not cleared) it is strong, and the
// pattern's own remedy applies.

import (
	"fmt"

	"github.com/ralphmesh/ralph/pkg/events"
)

// graded sets s's Strength and Action from what the pattern counted and
// says so at the end of its diagnosis. counted is the count in words ("3
// identical calls"), count and threshold the numbers, native the pattern's
// own action for strong evidence.
func graded(s *events.Signal, native events.Action, count, threshold int, counted string) *events.Signal {
	if count > threshold {
		s.Strength = events.StrengthStrong
		s.Action = native
		s.Diagnosis += fmt.Sprintf("; evidence strong (%s, threshold %d)", counted, threshold)
		return s
	}
	s.Strength = events.StrengthWeak
	s.Action = events.ActionNudge
	s.Diagnosis += fmt.Sprintf("; evidence weak (%s, threshold %d)", counted, threshold)
	if native != events.ActionNudge {
		s.Diagnosis += fmt.Sprintf(": a nudge first, %s if it goes on", native)
	}
	return s
}

// longestRun is the largest n in [from, limit] for which holds(n) is true,
// given that holds(from) is: how far back the evidence of a pattern that
// fired at its threshold reaches. Patterns whose evidence is a trailing
// stretch of the window (a stall, a monologue, compactions without
// progress) count their evidence with it.
func longestRun(from, limit int, holds func(n int) bool) int {
	n := from
	for n < limit && holds(n+1) {
		n++
	}
	return n
}
