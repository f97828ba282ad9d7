package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ralphmesh/ralph/pkg/events"
)

// ConsumerState is what a service's durable consumer holds, as a follower
// reads it to tell a stage that is slow from one nobody runs.
type ConsumerState struct {
	// Exists is false when the service never started on this mesh.
	Exists bool
	// Pending are events not yet delivered; AckPending delivered and being
	// handled (or held by a replica that died, until AckWait).
	Pending, AckPending uint64
	// Waiting counts the pull requests open on it: replicas asking for
	// work. None while events are pending means nobody pulls.
	Waiting int
}

// ConsumerState reads the state of the durable consumer of the session
// stream named consumer (ConsumerName of a service).
func (b *Bus) ConsumerState(ctx context.Context, consumer string) (ConsumerState, error) {
	c, err := b.js.Consumer(ctx, events.StreamName(b.prefix), consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return ConsumerState{}, nil
	}
	if err != nil {
		return ConsumerState{}, fmt.Errorf("consumer %s: %w", consumer, err)
	}
	info := c.CachedInfo()
	return ConsumerState{Exists: true, Pending: info.NumPending, AckPending: uint64(info.NumAckPending), Waiting: info.NumWaiting}, nil
}
