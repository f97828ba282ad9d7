package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/events"
)

// ErrNoSession is returned by Replay for a session with no events.
var ErrNoSession = errors.New("no events for session")

// From says where a follower starts reading. The zero From is the first
// event.
type From struct {
	// Seq starts at this stream sequence (to go on after the event of
	// sequence N, Seq is N+1).
	Seq uint64
	// Since starts at the first event stored at or after this time.
	Since time.Time
	// New starts with the events stored from now on.
	New bool
}

// deliver is the consumer's start for f.
func (f From) deliver() (jetstream.DeliverPolicy, uint64, *time.Time) {
	switch {
	case f.Seq > 0:
		return jetstream.DeliverByStartSequencePolicy, f.Seq, nil
	case !f.Since.IsZero():
		t := f.Since
		return jetstream.DeliverByStartTimePolicy, 0, &t
	case f.New:
		return jetstream.DeliverNewPolicy, 0, nil
	}
	return jetstream.DeliverAllPolicy, 0, nil
}

// Stored is an event as the stream keeps it: with its stream sequence
// (what a follower resumes after, the id of a server-sent event) and the
// number of events of the filter still stored after it.
type Stored struct {
	events.Envelope
	Seq     uint64
	Time    time.Time
	Pending uint64
}

// teamFilter is the team token of the bus's filters: its team, or any.
func (b *Bus) teamFilter() string {
	if b.team == "" {
		return events.AnyTeam
	}
	return b.team
}

// sessionFilter is where session's events are: under its team, or, for a
// session recorded before teams (a bus of the default team or of every
// team reads those), the layout without a team. The legacy layout is
// looked up only when the team layout has nothing, so a session costs one
// lookup once it has any event.
func (b *Bus) sessionFilter(ctx context.Context, session string) (filter string, exists bool, err error) {
	if err := events.ValidSession(session); err != nil {
		return "", false, err
	}
	filter = events.SessionFilter(b.prefix, b.teamFilter(), session)
	if exists, err = b.anyStored(ctx, filter); err != nil || exists {
		return filter, exists, err
	}
	if b.team != "" && b.team != events.DefaultTeam {
		return filter, false, nil
	}
	legacy := events.LegacySessionFilter(b.prefix, session)
	if found, err := b.anyStored(ctx, legacy); err != nil || found {
		return legacy, found, err
	}
	return filter, false, nil
}

// anyStored reports whether the stream holds an event on filter.
func (b *Bus) anyStored(ctx context.Context, filter string) (bool, error) {
	stream, err := b.js.Stream(ctx, events.StreamName(b.prefix))
	if err != nil {
		return false, fmt.Errorf("stream: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return false, fmt.Errorf("stream info: %w", err)
	}
	return len(info.State.Subjects) > 0, nil
}

// Replay calls fn with every event of session in stream order and returns
// when it has seen the last one stored at the time of the call.
func (b *Bus) Replay(ctx context.Context, session string, fn func(events.Envelope) error) error {
	filter, exists, err := b.sessionFilter(ctx, session)
	if err != nil {
		return fmt.Errorf("replay %s: %w", session, err)
	}
	if !exists {
		return fmt.Errorf("replay %s: %w", session, ErrNoSession)
	}
	return b.follow(ctx, filter, From{}, true, func(ev Stored) (bool, error) {
		return ev.Pending == 0, fn(ev.Envelope)
	})
}

// SessionExists reports whether the stream holds any event of session (of
// the bus's team; of any team for a bus of every team).
func (b *Bus) SessionExists(ctx context.Context, session string) (bool, error) {
	_, exists, err := b.sessionFilter(ctx, session)
	return exists, err
}

// SessionTaken reports whether session has events under any team, or the
// layout before teams: session ids are unique across teams, since the
// session's state in Redis is keyed by its id alone. A NATS user limited
// to its team may ask (stream info is a lookup), though it cannot read the
// other team's events.
func (b *Bus) SessionTaken(ctx context.Context, session string) (bool, error) {
	if err := events.ValidSession(session); err != nil {
		return false, err
	}
	for _, f := range []string{events.SessionFilter(b.prefix, events.AnyTeam, session), events.LegacySessionFilter(b.prefix, session)} {
		if found, err := b.anyStored(ctx, f); err != nil || found {
			return found, err
		}
	}
	return false, nil
}

// LastEvent is the newest event of type typ of session in the stream;
// found is false when there is none. It is one lookup by subject, not a
// scan, so a service can ask it per session (the builder's watchdog asks
// whether a session was already ended by an event its state never saw).
// The session's team need not be known: the lookup is of any team.
func (b *Bus) LastEvent(ctx context.Context, session string, typ events.Type) (env events.Envelope, found bool, err error) {
	stream, err := b.js.Stream(ctx, events.StreamName(b.prefix))
	if err != nil {
		return env, false, fmt.Errorf("last %s of %s: stream: %w", typ, session, err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, events.Subject(b.prefix, b.teamFilter(), session, typ))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return env, false, nil
	}
	if err != nil {
		return env, false, fmt.Errorf("last %s of %s: %w", typ, session, err)
	}
	if env, err = events.Decode(msg.Data); err != nil {
		return env, false, fmt.Errorf("last %s of %s: %w", typ, session, err)
	}
	return env, true, nil
}

// Follow calls fn with every event of session from the first one on, live,
// until fn says stop, fn fails or ctx ends. A disconnection or a restart
// of the server does not end it: it goes on from the event after the last
// one it gave fn, once the server is back.
func (b *Bus) Follow(ctx context.Context, session string, fn func(events.Envelope) (stop bool, err error)) error {
	return b.FollowFrom(ctx, session, From{}, func(ev Stored) (bool, error) { return fn(ev.Envelope) })
}

// FollowFrom is Follow from a position, with each event's place in the
// stream. A session without events yet is followed under its team's
// layout, so its first event is seen when it comes.
func (b *Bus) FollowFrom(ctx context.Context, session string, from From, fn func(Stored) (stop bool, err error)) error {
	filter, _, err := b.sessionFilter(ctx, session)
	if err != nil {
		return fmt.Errorf("follow %s: %w", session, err)
	}
	return b.follow(ctx, filter, from, false, fn)
}

// FollowAll calls fn with the events of every session of the bus's team
// (of every team, for a bus of every team) from a position, live, until fn
// says stop, fn fails or ctx ends, across disconnections and server
// restarts.
func (b *Bus) FollowAll(ctx context.Context, from From, fn func(Stored) (stop bool, err error)) error {
	filter := events.AllSessions(b.prefix)
	if b.team != "" {
		filter = events.TeamFilter(b.prefix, b.team)
	}
	return b.follow(ctx, filter, from, false, fn)
}

// Watch calls fn with every new event of every session (of the bus's
// team) until ctx ends, across disconnections and server restarts.
func (b *Bus) Watch(ctx context.Context, fn func(events.Envelope)) error {
	err := b.FollowAll(ctx, From{New: true}, func(ev Stored) (bool, error) { fn(ev.Envelope); return false, nil })
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// followPause is how long follow waits before asking again after an error
// the iterator did not recover from by itself.
const followPause = time.Second

// follow reads the stream through one long-lived ordered consumer and its
// message iterator: the server pushes batches, and the consumer recreates
// itself from the last sequence seen when the server restarts, the
// connection drops or heartbeats stop. (Next on an ordered consumer would
// create a consumer per event.) It ends only when fn says stop or fails,
// ctx ends, or the connection is closed for good.
//
// replay says that the reader stops at the last event stored when it
// started (fn sees the number still pending), even when that event cannot
// be decoded.
func (b *Bus) follow(ctx context.Context, filter string, from From, replay bool, fn func(Stored) (bool, error)) error {
	cons, err := b.orderedConsumer(ctx, filter, from)
	if err != nil {
		return err
	}
	// Heartbeats every followHeartbeat: two missed and the ordered consumer
	// makes itself again from the next event. On a NATS cluster the server
	// holding it may have stopped (a stream leader change), and the default
	// heartbeat would leave the follower waiting half a minute.
	it, err := cons.Messages(jetstream.PullHeartbeat(followHeartbeat))
	if err != nil {
		return fmt.Errorf("follow %s: %w", filter, err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return fmt.Errorf("follow %s: %w", filter, err)
		}
		if err != nil {
			b.log.Warn("following the stream: will try again", zap.String("filter", filter), zap.Error(err))
			if !sleep(ctx, followPause) {
				return ctx.Err()
			}
			continue
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("follow %s: metadata: %w", filter, err)
		}
		env, err := events.Decode(msg.Data())
		if err != nil {
			b.log.Warn("skipping undecodable event", zap.String("subject", msg.Subject()), zap.Error(err))
			if replay && meta.NumPending == 0 {
				// Replay ends at the last stored event even when that one
				// cannot be read.
				return nil
			}
			continue
		}
		stop, err := fn(Stored{Envelope: env, Seq: meta.Sequence.Stream, Time: meta.Timestamp, Pending: meta.NumPending})
		if err != nil || stop {
			return err
		}
	}
}

// orderedConsumer creates the ordered consumer of filter, waiting for a
// server that is away (restarting) until ctx ends.
func (b *Bus) orderedConsumer(ctx context.Context, filter string, from From) (jetstream.Consumer, error) {
	policy, seq, since := from.deliver()
	for {
		cons, err := b.js.OrderedConsumer(ctx, events.StreamName(b.prefix), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{filter},
			DeliverPolicy:  policy,
			OptStartSeq:    seq,
			OptStartTime:   since,
		})
		if err == nil {
			return cons, nil
		}
		if d := b.denied("$JS.API.CONSUMER.CREATE." + events.StreamName(b.prefix) + "."); d != nil {
			return nil, fmt.Errorf("follow %s: %w (this NATS user may not read these sessions: docs/nats-permissions.md)", filter, d)
		}
		if !natsUnavailable(ctx, err) {
			return nil, fmt.Errorf("follow %s: consumer: %w", filter, err)
		}
		b.log.Warn("following the stream: server unavailable, will try again", zap.String("filter", filter), zap.Error(err))
		if !sleep(ctx, followPause) {
			return nil, fmt.Errorf("follow %s: consumer: %w", filter, err)
		}
	}
}

// followHeartbeat is how often the server holding a follower's consumer
// says it is alive while no event comes.
const followHeartbeat = 2 * time.Second

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Count is how many events of session ("" for every session of the bus's
// team) are stored from from on: what a replay from there would read
// before it is live.
func (b *Bus) Count(ctx context.Context, session string, from From) (uint64, error) {
	filter := events.AllSessions(b.prefix)
	if b.team != "" {
		filter = events.TeamFilter(b.prefix, b.team)
	}
	if session != "" {
		var err error
		if filter, _, err = b.sessionFilter(ctx, session); err != nil {
			return 0, fmt.Errorf("count %s: %w", session, err)
		}
	}
	cons, err := b.orderedConsumer(ctx, filter, from)
	if err != nil {
		return 0, err
	}
	info := cons.CachedInfo()
	// The consumer goes when its inactivity threshold passes; deleting
	// it now spares the server.
	_ = b.js.DeleteConsumer(ctx, events.StreamName(b.prefix), info.Name)
	return info.NumPending, nil
}
