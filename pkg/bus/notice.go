package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Notice is something a service says about a session while it works on it
// that is no event of the session: a model call being retried, say. Notices
// travel as plain NATS messages (events.NoticeSubject), not in the stream:
// they matter to whoever follows the session at that moment (ralph run,
// ralph watch) and to nobody later, and no service acts on them, so they
// have no place in the event registry or the replay.
type Notice struct {
	Team    string    `json:"team"`
	Session string    `json:"session"`
	Service string    `json:"service"`
	Kind    string    `json:"kind"`
	Text    string    `json:"text"`
	Time    time.Time `json:"time"`
}

// NoticeRetry is the kind of a notice that a model call is being retried.
const NoticeRetry = "retry"

// Notify sends n to the followers of its session. Nobody listening is no
// error: a notice is said, not kept.
func (b *Bus) Notify(n Notice) error {
	if n.Team == "" {
		n.Team = events.DefaultTeam
	}
	if n.Time.IsZero() {
		n.Time = time.Now().UTC()
	}
	if err := events.ValidTeam(n.Team); err != nil {
		return fmt.Errorf("notice: %w", err)
	}
	if err := events.ValidSession(n.Session); err != nil {
		return fmt.Errorf("notice: %w", err)
	}
	data, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("notice: %w", err)
	}
	if err := b.nc.Publish(events.NoticeSubject(b.prefix, n.Team, n.Session), data); err != nil {
		return fmt.Errorf("notice about %s: %w", n.Session, err)
	}
	return nil
}

// Notices calls fn with every notice about session ("" for every session of
// the bus's team, or of every team) until ctx ends. fn runs on the
// connection's delivery goroutine of the subscription, one notice at a
// time.
func (b *Bus) Notices(ctx context.Context, session string, fn func(Notice)) error {
	team, s := b.teamFilter(), session
	if s == "" {
		s = "*"
	}
	sub, err := b.nc.Subscribe(events.NoticeFilter(b.prefix, team, s), func(m *nats.Msg) {
		var n Notice
		if json.Unmarshal(m.Data, &n) == nil {
			fn(n)
		}
	})
	if err != nil {
		return fmt.Errorf("notices of %s: %w", session, err)
	}
	// The subscription is in place once the server has it, so a notice
	// sent after Notices returned is not missed.
	if err := b.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("notices of %s: %w", session, err)
	}
	go func() {
		<-ctx.Done()
		_ = sub.Unsubscribe()
	}()
	return nil
}
