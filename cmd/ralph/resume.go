package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

func newResumeCmd() *cobra.Command {
	var (
		message string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   `resume SESSION --message "..."`,
		Short: "Give an escalated session guidance and follow it until it ends again",
		Long: `Resume a session that was escalated (paused for a person): the message is added to the stuck
task's context as an instruction, the loop goes on, and the session is followed live as with run.
Needs the mesh the session ran on (RALPH_NATS_URL and RALPH_REDIS_URL); a session that ran on
run's in-process mesh ended with that process.
Exit 0: every task completed; 1: the session failed or was escalated again; 2: bad input.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			session := a[0]
			if err := events.ValidSession(session); err != nil {
				return exitError{code: 2, err: err}
			}
			if strings.TrimSpace(message) == "" {
				return badInput("--message is required: the guidance the builder gets")
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if cfg.NATS.URL == "" {
				return badInput("resume needs the mesh session %s ran on: set RALPH_NATS_URL (a session run on an in-process mesh ended with it)", session)
			}
			log, err := newLogger(cfg, true)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			begin := time.Now()
			m, err := mesh.Start(ctx, cfg, log, mesh.Options{})
			if err != nil {
				return err
			}
			defer m.Close()
			esc, err := escalation(ctx, m, session, cfg.NATS.URL)
			if err != nil {
				return err
			}
			resumed, err := events.New(events.SessionResumed, session, esc.Task, esc.Step, time.Now(), events.SessionResumedData{Message: message})
			if err != nil {
				return exitError{code: 2, err: err}
			}
			if err := m.Bus.Publish(ctx, resumed); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(out, "session %s resumed at task %s with guidance; following it on %s\n", session, esc.Task, cfg.NATS.URL)
			}
			_, err = followSession(ctx, cfg, m, session, resumed.ID, out, asJSON, false, begin)
			return err
		},
	}
	cmd.Flags().StringVar(&message, "message", "", "guidance for the builder (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one event per line as JSON")
	return cmd
}

// escalation finds the event that paused the session, or says why the
// session cannot be resumed.
func escalation(ctx context.Context, m *mesh.Mesh, session, url string) (events.Envelope, error) {
	var last events.Envelope
	resumedAfter := false
	err := m.Bus.Replay(ctx, session, func(env events.Envelope) error {
		switch {
		case env.Type.Terminal():
			last, resumedAfter = env, false
		case env.Type == events.SessionResumed:
			resumedAfter = true
		}
		return nil
	})
	switch {
	case errors.Is(err, bus.ErrNoSession):
		return events.Envelope{}, badInput("session %s: no events on %s", session, url)
	case err != nil:
		return events.Envelope{}, err
	case last.Type == "":
		return events.Envelope{}, badInput("session %s is still running, not escalated", session)
	case last.Type != events.SessionEscalated:
		return events.Envelope{}, badInput("session %s is not escalated: it ended with %s", session, last.Type)
	case resumedAfter:
		return events.Envelope{}, badInput("session %s was already resumed after its escalation and is running", session)
	}
	return last, nil
}
