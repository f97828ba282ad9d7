package console

import (
	"context"
	"fmt"
	"io"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Name is the service name.
const Name = "console"

// Watcher is what the console needs of the bus.
type Watcher interface {
	Watch(ctx context.Context, fn func(events.Envelope)) error
}

// Deps are the console's collaborators.
type Deps struct {
	Bus Watcher
	Out io.Writer
}

// Service prints every session's progress as it happens. It uses an
// ephemeral ordered consumer, so every replica prints everything: it is a
// view, not a stage.
type Service struct{ d Deps }

// New builds the service.
func New(d Deps) *Service { return &Service{d: d} }

// Run prints events until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.d.Bus.Watch(ctx, func(env events.Envelope) {
		if line := Render(env); line != "" {
			fmt.Fprintln(s.d.Out, line)
		}
	})
}
