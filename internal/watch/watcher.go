package watch

import (
	"context"
	"sync"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// Say is something the watcher says besides the events: a service's
// notice, or a stall it found.
type Say struct {
	Session string    `json:"session"`
	Service string    `json:"service"`
	Kind    string    `json:"kind"`
	Text    string    `json:"text"`
	Time    time.Time `json:"time"`
}

// KindStall is the kind of a Say about a stalled stage; notices keep
// their own kind (bus.NoticeRetry).
const KindStall = "stall"

// Bus is what the watcher needs of the bus (a team's, bus.ForTeam).
type Bus interface {
	FollowFrom(ctx context.Context, session string, from bus.From, fn func(bus.Stored) (bool, error)) error
	FollowAll(ctx context.Context, from bus.From, fn func(bus.Stored) (bool, error)) error
	Notices(ctx context.Context, session string, fn func(bus.Notice)) error
	ConsumerState(ctx context.Context, consumer string) (bus.ConsumerState, error)
}

// Watcher follows sessions for a person.
type Watcher struct {
	Bus Bus
	// HandledBy is the service that handles each event type.
	HandledBy map[events.Type]string
	// StallAfter is how long a stage may leave work waiting before it is
	// said (30 s by default); Every is how often waits are checked (5 s).
	StallAfter, Every time.Duration
	Clock             func() time.Time
	// BeforeFollow, when set, runs once the notices are heard and before
	// the events are read: a command that publishes what it then follows
	// (ralph run's start, ralph resume's resume) publishes here, so that
	// no notice about it is missed. Its error ends Run.
	BeforeFollow func() error
}

// Run follows session ("" for every session of the bus's team) from
// from, calling onEvent with each event and onSay with each notice and
// stall, never both at once, until onEvent says stop, fails, or ctx ends.
func (w *Watcher) Run(ctx context.Context, session string, from bus.From, onEvent func(bus.Stored) (bool, error), onSay func(Say)) error {
	after, every, clock := w.StallAfter, w.Every, w.Clock
	if after <= 0 {
		after = 30 * time.Second
	}
	if every <= 0 {
		every = 5 * time.Second
	}
	if clock == nil {
		clock = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	waits := NewWaits(w.HandledBy)
	err := w.Bus.Notices(ctx, session, func(n bus.Notice) {
		mu.Lock()
		defer mu.Unlock()
		onSay(Say{Session: n.Session, Service: n.Service, Kind: n.Kind, Text: n.Text, Time: n.Time})
	})
	if err != nil {
		return err
	}
	if w.BeforeFollow != nil {
		if err := w.BeforeFollow(); err != nil {
			return err
		}
	}
	var checks sync.WaitGroup
	checks.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.check(ctx, &mu, waits, clock, after, onSay)
			}
		}
	})
	defer checks.Wait()
	defer cancel()
	fn := func(ev bus.Stored) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		waits.Saw(ev.Envelope)
		return onEvent(ev)
	}
	if session == "" {
		return w.Bus.FollowAll(ctx, from, fn)
	}
	return w.Bus.FollowFrom(ctx, session, from, fn)
}

// check says the stalls among the waits due: each wait's consumer state is
// read (outside the lock: it is a request to the server) and judged.
func (w *Watcher) check(ctx context.Context, mu *sync.Mutex, waits *Waits, clock func() time.Time, after time.Duration, onSay func(Say)) {
	mu.Lock()
	due := waits.Due(clock(), after)
	mu.Unlock()
	states := map[string]bus.ConsumerState{}
	for _, d := range due {
		st, ok := states[d.Service]
		if !ok {
			var err error
			if st, err = w.Bus.ConsumerState(ctx, bus.ConsumerName(d.Service)); err != nil {
				continue
			}
			states[d.Service] = st
		}
		now := clock()
		text, stalled := Stall(d.Wait, d.Service, st, now, after)
		if !stalled {
			continue
		}
		mu.Lock()
		if waits.Said(d, now) {
			onSay(Say{Session: d.Session, Service: d.Service, Kind: KindStall, Text: text, Time: now})
		}
		mu.Unlock()
	}
}
