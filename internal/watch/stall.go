// Package watch owns following sessions for people: the events of one
// session, or of every session of a team, as they come, with what no event
// says: notices (a model call being retried) and stalls (a stage has work
// waiting and nobody takes it). `ralph run`, `ralph resume` and `ralph
// watch` follow through it. Which event waits for which stage, and what a
// stall is, are pure functions (waits.go, stall.go).
package watch

import (
	"fmt"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// nouns name the work an event is for its stage, singular and plural.
var nouns = map[events.Type][2]string{
	events.SessionStarted:      {"session to start", "sessions to start"},
	events.IterationRequested:  {"step", "steps"},
	events.IterationCompleted:  {"iteration to analyse", "iterations to analyse"},
	events.CritiqueRequested:   {"review", "reviews"},
	events.PruneRequested:      {"prune", "prunes"},
	events.DecomposeRequested:  {"decomposition", "decompositions"},
	events.CompactionRequested: {"compaction", "compactions"},
	events.SessionResumed:      {"resume", "resumes"},
	events.CancelRequested:     {"cancel", "cancels"},
}

// noun is n of the work typ is for: "1 review", "3 reviews".
func noun(typ events.Type, n uint64) string {
	w, ok := nouns[typ]
	if !ok {
		w = [2]string{"event", "events"}
	}
	if n == 1 {
		return "1 " + w[0]
	}
	return fmt.Sprintf("%d %s", n, w[1])
}

// Stall says what is wrong when the session has waited since w.Since for
// its stage (service, whose consumer is in state c) and waited at least
// after: nobody pulls the consumer that has the work (no replica runs), or
// every replica is busy with other work. ok is false while the stage is at
// work on it or takes it (someone pulls), or has nothing pending (the event
// was taken: it is being handled, or was lost, which the builder's
// watchdog says).
func Stall(w Wait, service string, c bus.ConsumerState, now time.Time, after time.Duration) (string, bool) {
	waited := now.Sub(w.Since)
	if waited < after {
		return "", false
	}
	long := waited.Round(time.Second)
	switch {
	case !c.Exists:
		return fmt.Sprintf("%s: %s waiting for %s; is a %s running? (none has run on this mesh)", service, noun(w.Type, 1), long, service), true
	case c.Pending == 0 || c.Waiting > 0:
		return "", false
	case c.AckPending > 0:
		return fmt.Sprintf("%s: %s waiting for %s behind %d in progress; every %s is busy (more replicas would take them)",
			service, noun(w.Type, c.Pending), long, c.AckPending, service), true
	}
	return fmt.Sprintf("%s: %s waiting for %s; is a %s running?", service, noun(w.Type, c.Pending), long, service), true
}
