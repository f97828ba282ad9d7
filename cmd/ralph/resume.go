package main

import (
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/settings"
)

func newResumeCmd() *cobra.Command {
	var (
		message string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   `resume SESSION --message "..."`,
		Short: "Give an escalated or cancelled session guidance and follow it until it ends again",
		Long: `Resume a session that was escalated (paused for a person) or cancelled: the message is added to
the current task's context as an instruction, the loop goes on, and the session is followed live as
with run. The session must be of the team RALPH_TEAM.
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
			ctl, err := controlOf(cfg, m)
			if err != nil {
				return err
			}
			// The session is paused until the resume is published, so the
			// usage now is what the parts before the resume used.
			before, err := m.Store.Usage(ctx, session)
			if err != nil {
				return fmt.Errorf("read the model usage of session %s: %w", session, err)
			}
			out := cmd.OutOrStdout()
			from := &resumePoint{Usage: before}
			publish := func() error {
				resumed, err := ctl.Resume(ctx, cfg.Team, session, message)
				if err != nil {
					return refused(err)
				}
				from.EventID = resumed.ID
				if !asJSON {
					fmt.Fprintf(out, "session %s resumed at task %s with guidance; following it on %s\n", session, resumed.Task, settings.MaskURL(cfg.NATS.URL))
				}
				return nil
			}
			_, err = followSession(ctx, cfg, m, session, publish, from, out, asJSON, false, begin)
			return err
		},
	}
	cmd.Flags().StringVar(&message, "message", "", "guidance for the builder (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one event per line as JSON")
	return cmd
}
