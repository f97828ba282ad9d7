package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/console"
	"github.com/ralphmesh/ralph/services/critic"
	"github.com/ralphmesh/ralph/services/decomposer"
	"github.com/ralphmesh/ralph/services/pruner"
	"github.com/ralphmesh/ralph/services/stuckdetector"
	"github.com/ralphmesh/ralph/services/summarizer"
)

// Contract is what one party of the mesh does on the bus: the event types
// it handles (one durable consumer each), the types it publishes, and
// whether it follows sessions (reads them with ordered consumers, as the
// console and `ralph run` do). The services are held to their contracts at
// run time (contractBus), and the NATS permissions (permissions.go) are
// generated from the same table, so the two cannot drift apart.
type Contract struct {
	Consumes  []events.Type
	Publishes []events.Type
	Follows   bool
	// SupervisesDeadLetters: the party reads the dead-letter stream (the
	// builder ends the session a dead letter blocks).
	SupervisesDeadLetters bool
	// KeepsIndex: the party writes the session index (the builder).
	KeepsIndex bool
	// Notifies: the party sends notices about the sessions it works on
	// (its model calls being retried).
	Notifies bool
}

// RunClient names the contract of the commands that start, watch and stop
// sessions: `ralph run`, `ralph resume`, `ralph replay`, `ralph watch`,
// `ralph cancel`, `ralph sessions` and `ralph status`.
const RunClient = "run"

// Contracts are every party's contract: each service by name, and
// RunClient.
var Contracts = map[string]Contract{
	builder.Name: {
		Consumes: []events.Type{events.SessionStarted, events.IterationRequested, events.IterationAnalyzed, events.CritiqueCompleted,
			events.PruneCompleted, events.TaskDecomposed, events.SessionResumed, events.CompactionCompleted, events.CancelRequested},
		Publishes: []events.Type{events.TaskStarted, events.IterationRequested, events.IterationCompleted, events.CritiqueRequested,
			events.PruneRequested, events.DecomposeRequested, events.CompactionRequested, events.TaskCompleted,
			events.SessionCompleted, events.SessionFailed, events.SessionEscalated, events.SessionCancelled},
		SupervisesDeadLetters: true, KeepsIndex: true, Notifies: true,
	},
	critic.Name:        {Consumes: []events.Type{events.CritiqueRequested}, Publishes: []events.Type{events.CritiqueCompleted}, Notifies: true},
	stuckdetector.Name: {Consumes: []events.Type{events.IterationCompleted}, Publishes: []events.Type{events.IterationAnalyzed}},
	pruner.Name:        {Consumes: []events.Type{events.PruneRequested}, Publishes: []events.Type{events.PruneCompleted}, Notifies: true},
	decomposer.Name:    {Consumes: []events.Type{events.DecomposeRequested}, Publishes: []events.Type{events.TaskDecomposed}, Notifies: true},
	summarizer.Name: {Consumes: []events.Type{events.CompactionRequested, events.TaskCompleted},
		Publishes: []events.Type{events.CompactionCompleted, events.MemoryUpdated}, Notifies: true},
	// The console serves the HTTP API, which starts, resumes and cancels
	// sessions for the teams whose tokens it knows.
	console.Name: {Publishes: []events.Type{events.SessionStarted, events.SessionResumed, events.CancelRequested}, Follows: true},
	RunClient:    {Publishes: []events.Type{events.SessionStarted, events.SessionResumed, events.CancelRequested}, Follows: true},
}

// ErrOutsideContract is wrapped when a service publishes or handles an
// event type its contract does not list: a bug, which a NATS server
// enforcing the generated permissions would refuse anyway.
var ErrOutsideContract = errors.New("outside the service's contract (internal/mesh/contract.go)")

// contractBus is the bus as one service sees it: publishing a type the
// contract does not list fails, and so does running handlers for other
// types than the contract's. The mesh hands every service one, so a
// service that changes what it does without its contract (and with it the
// NATS permissions) fails in every test that runs it.
type contractBus struct {
	*bus.Bus
	service string
	c       Contract
}

func (m *Mesh) contractBus(service string) *contractBus {
	return &contractBus{Bus: m.Bus, service: service, c: Contracts[service]}
}

// Publish publishes env if the contract lists its type.
func (b *contractBus) Publish(ctx context.Context, env events.Envelope) error {
	if !slices.Contains(b.c.Publishes, env.Type) {
		return bus.Permanent(fmt.Errorf("%s publishes %s: %w", b.service, env.Type, ErrOutsideContract))
	}
	return b.Bus.Publish(ctx, env)
}

// Run runs handlers if they are for exactly the contract's types.
func (b *contractBus) Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error {
	var extra, missing []string
	for typ := range handlers {
		if !slices.Contains(b.c.Consumes, typ) {
			extra = append(extra, string(typ))
		}
	}
	for _, typ := range b.c.Consumes {
		if _, ok := handlers[typ]; !ok {
			missing = append(missing, string(typ))
		}
	}
	if service != b.service || len(extra) > 0 || len(missing) > 0 {
		slices.Sort(extra)
		return fmt.Errorf("%s runs as %s, handling [%s] and not [%s]: %w", b.service, service,
			strings.Join(extra, " "), strings.Join(missing, " "), ErrOutsideContract)
	}
	return b.Bus.Run(ctx, service, handlers, o)
}

// HandledBy is the service that handles each event type a service
// handles: who a session waiting on an event of that type waits for.
func HandledBy() map[events.Type]string {
	out := map[events.Type]string{}
	for _, name := range Services {
		for _, typ := range Contracts[name].Consumes {
			out[typ] = name
		}
	}
	return out
}
