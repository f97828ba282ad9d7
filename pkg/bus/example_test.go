package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

// A service runs its handlers with Bus.Run. The runner wraps each one in
// its Recoverer and Heartbeat, then in RunOptions.Middlewares; a handler
// may carry its own, like GiveUp here, which turns a request the model
// refused into a failure event the session can act on instead of a silent
// dead letter.
func Example() {
	url, shutdown := jetStreamServer()
	defer shutdown()
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, "example", zap.NewNop())
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.Bootstrap(ctx, bus.StreamConfig{}); err != nil {
		log.Fatal(err)
	}

	// The handler: the critic model refuses the request, which no
	// redelivery can change.
	review := func(ctx context.Context, env events.Envelope) error {
		return bus.Permanent(errors.New("critic model: 401 invalid api key"))
	}
	// Its give-up policy: say so in an event. The real critic publishes
	// critique.completed with the error; the event is then acked.
	settled := make(chan struct{})
	noVerdict := bus.GiveUp(func(ctx context.Context, env events.Envelope, err error) error {
		defer close(settled)
		fmt.Printf("no verdict on %s: %v\n", env.ID, err)
		return nil
	})
	// A middleware for every handler of the service.
	traced := func(h bus.Handler) bus.Handler {
		return func(ctx context.Context, env events.Envelope) error {
			fmt.Printf("handling %s of %s\n", env.Type, env.Session)
			return h(ctx, env)
		}
	}

	done := make(chan error, 1)
	go func() {
		done <- b.Run(ctx, "critic", map[events.Type]bus.Handler{
			events.CritiqueRequested: bus.Chain(review, noVerdict),
		}, bus.RunOptions{Middlewares: []bus.Middleware{traced}})
	}()
	task := prd.Task{ID: "T1", Title: "greet", AcceptanceCriteria: []string{"prints hello"}}
	if err := b.Publish(ctx, events.Must(events.CritiqueRequested, "s1", "T1", 4, time.Now(),
		events.CritiqueRequestedData{Task: task, Workspace: "/work/s1", Attempt: 1})); err != nil {
		log.Fatal(err)
	}
	<-settled
	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// handling critique.requested of s1
	// no verdict on s1/4/critique.requested/T1: critic model: 401 invalid api key
}

// jetStreamServer runs an embedded NATS server with JetStream for the
// example, as a deployment would run nats-server.
func jetStreamServer() (url string, shutdown func()) {
	dir, err := os.MkdirTemp("", "ralph-bus-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server did not start")
	}
	return srv.ClientURL(), func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}
