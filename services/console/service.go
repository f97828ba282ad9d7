package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

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
	// API, when set, is served on Config.Addr (NewAPI).
	API    http.Handler
	Config Config
	// Bound, when set, is told the API's URL once it listens.
	Bound func(url string)
	Log   *zap.Logger
}

// Service prints every session's progress as it happens and serves the
// HTTP API (and the web page). It reads the stream through an ephemeral
// ordered consumer, so every replica prints everything and serves every
// session: it is a view, not a stage. It goes on across disconnections and
// restarts of the NATS server (bus.Watch), from the event after the last
// one it printed.
type Service struct{ d Deps }

// New builds the service.
func New(d Deps) *Service {
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	return &Service{d: d}
}

// shutdownGrace bounds how long open API calls (event streams) may take to
// end once the service stops.
const shutdownGrace = 5 * time.Second

// Run prints events, and serves the API when it has one and an address,
// until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return s.d.Bus.Watch(ctx, func(env events.Envelope) {
			if line := Render(env); line != "" {
				fmt.Fprintln(s.d.Out, line)
			}
		})
	})
	if s.d.API != nil && s.d.Config.Addr != "" {
		ln, err := net.Listen("tcp", s.d.Config.Addr)
		if err != nil {
			return fmt.Errorf("console API on %s (RALPH_CONSOLE_ADDR): %w", s.d.Config.Addr, err)
		}
		srv := &http.Server{Handler: s.d.API, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
		url := "http://" + ln.Addr().String()
		s.d.Log.Info("console API listening", zap.String("url", url))
		if s.d.Bound != nil {
			s.d.Bound(url)
		}
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("console API: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	return g.Wait()
}
