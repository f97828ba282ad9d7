package watch

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nats-io/nats.go"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func TestStall(t *testing.T) {
	review := Wait{Session: "s1", Type: events.CritiqueRequested, Step: 7, Since: t0}
	step := Wait{Session: "s1", Type: events.IterationRequested, Step: 3, Since: t0}
	for _, c := range []struct {
		name    string
		w       Wait
		c       bus.ConsumerState
		waited  time.Duration
		want    string
		stalled bool
	}{
		{"nobody pulls", review, bus.ConsumerState{Exists: true, Pending: 1}, 30 * time.Second, "critic: 1 review waiting for 30s; is a critic running?", true},
		{"several", review, bus.ConsumerState{Exists: true, Pending: 3}, time.Minute, "critic: 3 reviews waiting for 1m0s; is a critic running?", true},
		{"never ran", step, bus.ConsumerState{}, 45 * time.Second, "critic: 1 step waiting for 45s; is a critic running? (none has run on this mesh)", true},
		{"all busy", review, bus.ConsumerState{Exists: true, Pending: 2, AckPending: 16}, time.Minute, "critic: 2 reviews waiting for 1m0s behind 16 in progress; every critic is busy", true},
		{"too soon", review, bus.ConsumerState{Exists: true, Pending: 1}, 29 * time.Second, "", false},
		{"someone pulls", review, bus.ConsumerState{Exists: true, Pending: 1, Waiting: 1}, time.Minute, "", false},
		{"in progress", review, bus.ConsumerState{Exists: true, AckPending: 1}, time.Hour, "", false},
	} {
		got, stalled := Stall(c.w, "critic", c.c, t0.Add(c.waited), 30*time.Second)
		if stalled != c.stalled || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q %v, want %q %v", c.name, got, stalled, c.want, c.stalled)
		}
	}
}

func TestWaits(t *testing.T) {
	w := NewWaits(map[events.Type]string{events.CritiqueRequested: "critic", events.IterationRequested: "builder", events.CritiqueCompleted: "builder"})
	at := func(typ events.Type, session string, step int, since time.Time) events.Envelope {
		return events.Envelope{Type: typ, Session: session, Step: step, Time: since}
	}
	w.Saw(at(events.CritiqueRequested, "s1", 7, t0))
	w.Saw(at(events.IterationRequested, "s2", 3, t0.Add(20*time.Second)))
	w.Saw(at(events.SessionEscalated, "s3", 1, t0)) // an end: nothing to wait for
	due := w.Due(t0.Add(40*time.Second), 30*time.Second)
	if len(due) != 1 || due[0].Session != "s1" || due[0].Service != "critic" || due[0].Step != 7 {
		t.Fatalf("due %+v", due)
	}
	if !w.Said(due[0], t0.Add(40*time.Second)) {
		t.Fatal("Said of an open wait")
	}
	// Said once, it is due again only after another period.
	if d := w.Due(t0.Add(60*time.Second), 30*time.Second); len(d) != 1 || d[0].Session != "s2" {
		t.Errorf("after saying s1: due %+v", d)
	}
	if d := w.Due(t0.Add(71*time.Second), 30*time.Second); len(d) != 2 {
		t.Errorf("a period later: due %+v", d)
	}
	// The answer ends the wait; a stall found before it came is not said.
	stale := w.Due(t0.Add(200*time.Second), 30*time.Second)
	w.Saw(at(events.CritiqueCompleted, "s1", 7, t0.Add(201*time.Second)))
	for _, d := range stale {
		if d.Session == "s1" && w.Said(d, t0.Add(202*time.Second)) {
			t.Error("a wait that ended was said")
		}
	}
	w.Saw(at(events.SessionCompleted, "s1", 9, t0))
	w.Saw(at(events.TaskStarted, "s2", 3, t0)) // handled by nobody: no wait
	if d := w.Due(t0.Add(time.Hour), 30*time.Second); len(d) != 0 {
		t.Errorf("after the ends: due %+v", d)
	}
}

// Watching a session whose review waits with no critic on the mesh says so,
// along with the session's events and the notices about it.
func TestWatcherSaysAStall(t *testing.T) {
	prefix := meshtest.Prefix(t)
	nc, err := nats.Connect(meshtest.NATSURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, prefix, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Bootstrap(ctx, bus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	web, _ := b.ForTeam("web")
	asked := events.Must(events.CritiqueRequested, "s1", "T1", 7, time.Now().Add(-time.Minute), events.CritiqueRequestedData{
		Task: prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}}, Workspace: "/ws", Attempt: 1}).For("web")
	if err := web.Publish(ctx, asked); err != nil {
		t.Fatal(err)
	}
	w := &Watcher{Bus: web, HandledBy: map[events.Type]string{events.CritiqueRequested: "critic"}, Every: 10 * time.Millisecond}
	var mu sync.Mutex
	var seen []string
	said := make(chan Say, 4)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w.Run(wctx, "s1", bus.From{}, func(ev bus.Stored) (bool, error) {
			mu.Lock()
			seen = append(seen, string(ev.Type))
			mu.Unlock()
			return false, nil
		}, func(s Say) { said <- s })
	}()
	var stall Say
	select {
	case stall = <-said:
	case <-ctx.Done():
		t.Fatal("no stall said")
	}
	if stall.Kind != KindStall || stall.Session != "s1" || !strings.HasPrefix(stall.Text, "critic: 1 review waiting for 1m") ||
		!strings.Contains(stall.Text, "is a critic running?") {
		t.Errorf("said %+v", stall)
	}
	if err := b.Notify(bus.Notice{Team: "web", Session: "s1", Service: "builder", Kind: bus.NoticeRetry, Text: "model answered 429; retry 1 of 5 in 1 s"}); err != nil {
		t.Fatal(err)
	}
	for heard := false; !heard; {
		select {
		case s := <-said:
			if s.Kind == bus.NoticeRetry {
				heard = true
				if s.Service != "builder" || !strings.Contains(s.Text, "429") {
					t.Errorf("notice %+v", s)
				}
			}
		case <-ctx.Done():
			t.Fatal("the notice was not said")
		}
	}
	stop()
	if err := <-done; err != nil && err != context.Canceled {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != string(events.CritiqueRequested) {
		t.Errorf("events %v", seen)
	}
}
