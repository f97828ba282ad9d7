package watch

import (
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Wait is a session waiting for a stage to handle its last event.
type Wait struct {
	Session string
	Type    events.Type
	Step    int
	// Since is when the event was published.
	Since time.Time
	// Said is when the stall was last said (zero: never).
	Said time.Time
}

// Waits keeps, for each session followed, the event it waits on: its last
// one, if a stage handles it. A later event of the session ends the wait;
// an end of the session (or a pause) leaves nothing to wait for.
type Waits struct {
	handledBy map[events.Type]string
	open      map[string]*Wait
}

// NewWaits follows waits on the stages of handledBy (the service that
// handles each event type).
func NewWaits(handledBy map[events.Type]string) *Waits {
	return &Waits{handledBy: handledBy, open: map[string]*Wait{}}
}

// Saw records env, the session's latest event.
func (w *Waits) Saw(env events.Envelope) {
	if _, handled := w.handledBy[env.Type]; !handled || env.Type.Terminal() {
		delete(w.open, env.Session)
		return
	}
	w.open[env.Session] = &Wait{Session: env.Session, Type: env.Type, Step: env.Step, Since: env.Time}
}

// Due are the waits that have lasted after or more and were not said in the
// last after, each with the service it waits for. A wait found stalled is
// marked with Said, so that it is said again only after another after.
func (w *Waits) Due(now time.Time, after time.Duration) []Due {
	var out []Due
	for _, wt := range w.open {
		if now.Sub(wt.Since) < after || (!wt.Said.IsZero() && now.Sub(wt.Said) < after) {
			continue
		}
		out = append(out, Due{Wait: *wt, Service: w.handledBy[wt.Type]})
	}
	return out
}

// Said marks d's wait said at now and reports true, if the session still
// waits on the same event (no event came meanwhile).
func (w *Waits) Said(d Due, now time.Time) bool {
	wt, ok := w.open[d.Session]
	if !ok || wt.Type != d.Type || wt.Step != d.Step || !wt.Since.Equal(d.Since) {
		return false
	}
	wt.Said = now
	return true
}

// Due is a wait long enough to check, and the service it waits for.
type Due struct {
	Wait
	Service string
}
