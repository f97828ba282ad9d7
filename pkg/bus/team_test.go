package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// teamBus is b limited to team.
func teamBus(t *testing.T, b *testBus, team string) *bus.Bus {
	t.Helper()
	tb, err := b.ForTeam(team)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// A team's bus reads only its team's sessions and publishes only its
// team's events; the bus of every team reads them all.
func TestTeamBus(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	web, ops := teamBus(t, b, "web"), teamBus(t, b, "ops")
	if web.Team() != "web" || b.Team() != "" {
		t.Fatalf("teams %q and %q", web.Team(), b.Team())
	}
	if _, err := b.ForTeam("a.b"); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("ForTeam of an invalid team: %v", err)
	}
	if err := web.Publish(ctxT(t), iteration("w1", 1).For("web")); err != nil {
		t.Fatal(err)
	}
	if err := ops.Publish(ctxT(t), iteration("o1", 1).For("ops")); err != nil {
		t.Fatal(err)
	}
	err := web.Publish(ctxT(t), iteration("w2", 1).For("ops"))
	if !errors.Is(err, bus.ErrOtherTeam) || !bus.IsPermanent(err) {
		t.Errorf("web published an event of team ops: %v", err)
	}
	for _, c := range []struct {
		b       *bus.Bus
		session string
		exists  bool
	}{{web, "w1", true}, {web, "o1", false}, {ops, "o1", true}, {ops, "w1", false}, {b.Bus, "w1", true}, {b.Bus, "o1", true}} {
		if got, err := c.b.SessionExists(ctxT(t), c.session); err != nil || got != c.exists {
			t.Errorf("team %q: SessionExists(%s) = %v %v, want %v", c.b.Team(), c.session, got, err, c.exists)
		}
		// Session ids are one namespace: every team sees that it is taken.
		if taken, err := c.b.SessionTaken(ctxT(t), c.session); err != nil || !taken {
			t.Errorf("team %q: SessionTaken(%s) = %v %v", c.b.Team(), c.session, taken, err)
		}
	}
	if err := web.Replay(ctxT(t), "o1", func(events.Envelope) error { return nil }); !errors.Is(err, bus.ErrNoSession) {
		t.Errorf("web replays ops's session: %v", err)
	}
	var seen []string
	if err := web.Replay(ctxT(t), "w1", func(env events.Envelope) error { seen = append(seen, env.ID+" "+env.Team); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != "w1/1/iteration.completed/t1 web" {
		t.Errorf("web replays %v", seen)
	}
	if _, found, err := b.LastEvent(ctxT(t), "o1", events.IterationCompleted); !found || err != nil {
		t.Errorf("LastEvent of a session of any team: %v %v", found, err)
	}
	if _, found, _ := web.LastEvent(ctxT(t), "o1", events.IterationCompleted); found {
		t.Error("web looks up ops's event")
	}

	// FollowAll of a team sees its sessions only; of every team, all.
	b.publish(t, iteration("w3", 1).For("web"), iteration("o2", 1).For("ops"))
	if got := collect(t, web, 3); strings.Join(got, " ") != "w1 w3" {
		t.Errorf("web follows %v", got)
	}
	if got := collect(t, b.Bus, 4); strings.Join(got, " ") != "w1 o1 w3 o2" {
		t.Errorf("every team follows %v", got)
	}
}

// collect reads the sessions of what FollowAll delivers from the start
// until it has seen the stream's events up to seq last.
func collect(t *testing.T, b *bus.Bus, last uint64) []string {
	t.Helper()
	var got []string
	err := b.FollowAll(ctxT(t), bus.From{}, func(ev bus.Stored) (bool, error) {
		got = append(got, ev.Session)
		return ev.Pending == 0 || ev.Seq >= last, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A follower starts where it is told: a stream sequence (to resume after
// an event it saw), a time, or the events to come; each event comes with
// its sequence.
func TestFollowFrom(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	b.publish(t, iteration("s1", 1), iteration("other", 1), iteration("s1", 2))
	mid := time.Now()
	time.Sleep(10 * time.Millisecond)
	b.publish(t, iteration("s1", 3))

	read := func(from bus.From, n int) []bus.Stored {
		var got []bus.Stored
		ctx, cancel := context.WithTimeout(ctxT(t), waitDeadline)
		defer cancel()
		err := b.FollowFrom(ctx, "s1", from, func(ev bus.Stored) (bool, error) {
			got = append(got, ev)
			return len(got) == n, nil
		})
		if err != nil {
			t.Fatalf("FollowFrom %+v: %v (got %d)", from, err, len(got))
		}
		return got
	}
	all := read(bus.From{}, 3)
	if all[0].Step != 1 || all[0].Seq != 1 || all[1].Seq != 3 || all[2].Seq != 4 || all[2].Pending != 0 || all[0].Pending != 2 {
		t.Fatalf("from the start: %+v", all)
	}
	if all[0].Time.IsZero() {
		t.Error("no time on a stored event")
	}
	after := read(bus.From{Seq: all[1].Seq + 1}, 1)
	if after[0].Step != 3 {
		t.Errorf("after the second event: step %d", after[0].Step)
	}
	since := read(bus.From{Since: mid}, 1)
	if since[0].Step != 3 {
		t.Errorf("since a time: step %d", since[0].Step)
	}
	// From{New} sees what comes next only.
	got := make(chan bus.Stored, 1)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	started := make(chan struct{})
	go func() {
		close(started)
		_ = b.FollowFrom(ctx, "s1", bus.From{New: true}, func(ev bus.Stored) (bool, error) { got <- ev; return true, nil })
	}()
	<-started
	waitFor(t, "the follower of new events", func() bool {
		// Publish until the follower, once in place, sees one; it must be
		// no older event.
		b.publish(t, iteration("s1", 10+int(time.Now().UnixNano()%1000)))
		select {
		case ev := <-got:
			if ev.Step < 10 {
				t.Errorf("a follower of new events got step %d", ev.Step)
			}
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
}

// Sessions recorded before teams, under <prefix>.s.<session>.<type>, stay
// replayable by the default team and by every team, not by another team.
func TestLegacySessionReplays(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	for step := 1; step <= 2; step++ {
		env := iteration("old", step)
		if _, err := b.JetStream().Publish(ctxT(t), b.prefix+".s.old."+string(env.Type), env.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	for _, rb := range []*bus.Bus{b.Bus, teamBus(t, b, events.DefaultTeam)} {
		n := 0
		if err := rb.Replay(ctxT(t), "old", func(events.Envelope) error { n++; return nil }); err != nil || n != 2 {
			t.Errorf("team %q replays %d events of the legacy session: %v", rb.Team(), n, err)
		}
	}
	if exists, _ := teamBus(t, b, "web").SessionExists(ctxT(t), "old"); exists {
		t.Error("team web sees a session of before teams")
	}
	if taken, _ := teamBus(t, b, "web").SessionTaken(ctxT(t), "old"); !taken {
		t.Error("the id of a session of before teams is free for team web")
	}
}

// An envelope that names another team or session than its subject is
// refused at once (dead-lettered), never handled: a team's user may
// publish only under its team.
func TestRunRefusesAnEnvelopeOfAnotherRoute(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	handled := newCalls()
	startRun(t, b, svc, only(func(_ context.Context, env events.Envelope) error {
		handled.add(env.ID)
		return nil
	}), bus.RunOptions{AckWait: time.Second})
	claimsWeb := iteration("s1", 1).For("web")
	if _, err := b.JetStream().Publish(ctxT(t), events.Subject(b.prefix, "ops", "s1", claimsWeb.Type), claimsWeb.Marshal()); err != nil {
		t.Fatal(err)
	}
	dl := b.deadLetter(t, iterConsumer)
	if r := dl.Header.Get("Ralph-Reason"); !strings.Contains(r, "team web's session s1") || !strings.Contains(r, ".s.ops.s1.") {
		t.Errorf("dead-letter reason %q", r)
	}
	otherSession := iteration("s2", 1)
	if _, err := b.JetStream().Publish(ctxT(t), events.Subject(b.prefix, events.DefaultTeam, "s3", otherSession.Type), otherSession.Marshal()); err != nil {
		t.Fatal(err)
	}
	good := iteration("s4", 1).For("web")
	b.publish(t, good)
	waitFor(t, "the event of its own route", func() bool { return handled.get(good.ID) == 1 })
	waitFor(t, "the second dead letter", func() bool { return b.dlqMsgs(t) == 2 })
	if handled.total() != 1 {
		t.Errorf("%d events handled, want only the one whose envelope matches its subject", handled.total())
	}
}

// A handler's context says which event it handles.
func TestHandling(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	if _, ok := bus.Handling(context.Background()); ok {
		t.Error("a plain context handles an event")
	}
	got := make(chan events.Envelope, 1)
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		h, ok := bus.Handling(ctx)
		if !ok {
			t.Error("no event in the handler's context")
		}
		got <- h
		return nil
	}), bus.RunOptions{})
	env := iteration("s1", 1).For("web")
	b.publish(t, env)
	select {
	case h := <-got:
		if h.ID != env.ID || h.Team != "web" {
			t.Errorf("Handling = %s of %q", h.ID, h.Team)
		}
	case <-time.After(waitDeadline):
		t.Fatal("the handler never ran")
	}
}

// Notices reach the followers of their session (or of every session of
// the team), not another team's.
func TestNotices(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var mu sync.Mutex
	heard := map[string][]string{}
	listen := func(name string, lb *bus.Bus, session string) {
		if err := lb.Notices(ctx, session, func(n bus.Notice) {
			mu.Lock()
			heard[name] = append(heard[name], n.Session+":"+n.Text)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	listen("s1", teamBus(t, b, "web"), "s1")
	listen("web", teamBus(t, b, "web"), "")
	listen("ops", teamBus(t, b, "ops"), "")
	listen("all", b.Bus, "")
	for _, n := range []bus.Notice{
		{Team: "web", Session: "s1", Service: "builder", Kind: bus.NoticeRetry, Text: "a"},
		{Team: "web", Session: "s2", Text: "b"},
		{Session: "s3", Text: "c"},
	} {
		if err := b.Notify(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Notify(bus.Notice{Team: "web", Session: "a.b"}); err == nil {
		t.Error("a notice about an invalid session was sent")
	}
	want := map[string]string{"s1": "[s1:a]", "web": "[s1:a s2:b]", "ops": "[]", "all": "[s1:a s2:b s3:c]"}
	waitFor(t, "the notices", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard["all"]) == 3 && len(heard["web"]) == 2 && len(heard["s1"]) == 1
	})
	time.Sleep(50 * time.Millisecond) // a stray notice to ops would have arrived
	mu.Lock()
	defer mu.Unlock()
	for name, w := range want {
		if got := "[" + strings.Join(heard[name], " ") + "]"; got != w {
			t.Errorf("%s heard %s, want %s", name, got, w)
		}
	}
}

// ConsumerState tells a consumer nobody pulls from one being pulled, and a
// service that never ran.
func TestConsumerState(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	if st, err := b.ConsumerState(ctxT(t), iterConsumer); err != nil || st.Exists {
		t.Fatalf("before the service ran: %+v %v", st, err)
	}
	r := startRun(t, b, svc, only(func(context.Context, events.Envelope) error { return nil }), bus.RunOptions{})
	waitFor(t, "a pull request", func() bool {
		st, err := b.ConsumerState(ctxT(t), iterConsumer)
		return err == nil && st.Exists && st.Waiting > 0
	})
	r.stop(t)
	b.publish(t, iteration("s1", 1))
	waitFor(t, "a pending event nobody pulls", func() bool {
		st, _ := b.ConsumerState(ctxT(t), iterConsumer)
		return st.Exists && st.Pending == 1 && st.Waiting == 0
	})
}
