package mesh

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// Every service has a contract, every event type has exactly one
// publisher, or is a person's request, which the commands (the run client)
// and the console's HTTP API publish and nobody else; every type a service
// handles is published by someone.
func TestContractsCoverTheCatalogue(t *testing.T) {
	for _, name := range Services {
		if _, ok := Contracts[name]; !ok {
			t.Errorf("service %s has no contract", name)
		}
	}
	if len(Contracts) != len(Services)+1 {
		t.Errorf("%d contracts for %d services and the run client", len(Contracts), len(Services))
	}
	publishers := map[events.Type][]string{}
	for name, c := range Contracts {
		for _, typ := range c.Publishes {
			publishers[typ] = append(publishers[typ], name)
		}
	}
	requests := []events.Type{events.SessionStarted, events.SessionResumed, events.CancelRequested}
	for _, typ := range events.AllTypes {
		got := publishers[typ]
		slices.Sort(got)
		if slices.Contains(requests, typ) {
			if !slices.Equal(got, []string{"console", RunClient}) {
				t.Errorf("%s is published by %v, want the console and the run client", typ, got)
			}
		} else if len(got) != 1 {
			t.Errorf("%s is published by %v, want exactly one party", typ, got)
		}
	}
	for name, c := range Contracts {
		for _, typ := range c.Consumes {
			if len(publishers[typ]) == 0 {
				t.Errorf("%s handles %s, which nobody publishes", name, typ)
			}
		}
	}
}

// A service is held to its contract: it cannot publish another type or
// handle other events than its contract's.
func TestContractBusHoldsAServiceToItsContract(t *testing.T) {
	b := &contractBus{service: "critic", c: Contracts["critic"]}
	forged := events.Must(events.SessionCompleted, "s1", "", 1, time.Now(), events.SessionCompletedData{})
	if err := b.Publish(context.Background(), forged); !errors.Is(err, ErrOutsideContract) || !bus.IsPermanent(err) {
		t.Errorf("critic publishing session.completed: %v, want a permanent ErrOutsideContract", err)
	}
	noop := func(context.Context, events.Envelope) error { return nil }
	for name, handlers := range map[string]map[events.Type]bus.Handler{
		"another type":  {events.CritiqueRequested: noop, events.PruneRequested: noop},
		"a missing one": {},
	} {
		if err := b.Run(context.Background(), "critic", handlers, bus.RunOptions{}); !errors.Is(err, ErrOutsideContract) {
			t.Errorf("%s: Run = %v, want ErrOutsideContract", name, err)
		}
	}
	if err := b.Run(context.Background(), "builder", map[events.Type]bus.Handler{events.CritiqueRequested: noop}, bus.RunOptions{}); !errors.Is(err, ErrOutsideContract) {
		t.Errorf("running as another service: %v, want ErrOutsideContract", err)
	}
}

// Each service may publish exactly its contract's event subjects; the run
// client only session.started, session.resumed and cancel.requested; only
// the administrator may manage streams.
func TestPermissionsFollowTheContracts(t *testing.T) {
	perms := map[string]UserPermissions{}
	for _, p := range Permissions("ralph") {
		perms[p.User] = p
	}
	eventSubjects := func(p UserPermissions) []string {
		var out []string
		for _, s := range p.Publish {
			if len(s) > len("ralph.s.") && s[:len("ralph.s.")] == "ralph.s." {
				out = append(out, s)
			}
		}
		return out
	}
	if got := eventSubjects(perms[RunClient]); !slices.Equal(got, []string{"ralph.s.*.*.session.started", "ralph.s.*.*.session.resumed", "ralph.s.*.*.cancel.requested"}) {
		t.Errorf("run may publish %v", got)
	}
	if got := eventSubjects(perms["critic"]); !slices.Equal(got, []string{"ralph.s.*.*.critique.completed"}) {
		t.Errorf("critic may publish %v", got)
	}
	for user, p := range perms {
		for _, s := range p.Publish {
			if user != AdminUser && (s == "$JS.API.>" || slices.Contains([]string{"$JS.API.STREAM.CREATE.RALPH", "$JS.API.STREAM.UPDATE.RALPH"}, s)) {
				t.Errorf("%s may manage streams (%s)", user, s)
			}
		}
	}
	if !slices.Contains(perms[RunClient].DenyPublish, "$JS.API.CONSUMER.MSG.NEXT.RALPH.critic") {
		t.Error("run may take the critic's events from its consumer")
	}
}
