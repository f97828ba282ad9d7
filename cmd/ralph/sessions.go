package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
	"github.com/ralphmesh/ralph/services/console"
)

// meshFor connects to the mesh at RALPH_NATS_URL for a command that reads
// or acts on sessions (what: the command, for the message when the URL is
// not set). Only NATS: the session index and the events are all it needs.
func meshFor(cmd *cobra.Command, what string) (config.Config, *mesh.Mesh, error) {
	cfg, err := loadConfig()
	if err != nil {
		return cfg, nil, err
	}
	if cfg.NATS.URL == "" {
		return cfg, nil, badInput("%s reads the mesh at RALPH_NATS_URL, which is not set", what)
	}
	log, err := newLogger(cfg, true)
	if err != nil {
		return cfg, nil, err
	}
	m, err := mesh.Start(cmd.Context(), cfg, log, mesh.Options{BusOnly: true})
	if err != nil {
		return cfg, nil, err
	}
	return cfg, m, nil
}

func newSessionsCmd() *cobra.Command {
	var (
		asJSON, all bool
		team        string
	)
	cmd := &cobra.Command{
		Use:   "sessions [--team TEAM | --all] [--json]",
		Short: "List the sessions of the team (RALPH_TEAM), newest first",
		Long: `List the sessions of the team RALPH_TEAM (or --team), newest first, from the session index: id,
state (running, completed, failed, escalated, cancelled), current task, iterations, builder tokens, age
and when it last changed. --all lists every team's, which needs a NATS user that may read them all.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all && team != "" {
				return badInput("--team and --all: give one")
			}
			cfg, m, err := meshFor(cmd, "ralph sessions")
			if err != nil {
				return err
			}
			defer m.Close()
			if team == "" && !all {
				team = cfg.Team
			}
			if team != "" {
				if err := events.ValidTeam(team); err != nil {
					return badInput("--team: %v", err)
				}
			}
			list, err := m.Index.List(cmd.Context(), team)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				sums := make([]sessionindex.Summary, len(list))
				for i, e := range list {
					sums[i] = e.Summary
				}
				return writeJSON(out, map[string]any{"sessions": sums})
			}
			if len(list) == 0 {
				who := "team " + team
				if all {
					who = "any team"
				}
				fmt.Fprintf(out, "no sessions of %s on this mesh\n", who)
				return nil
			}
			printSessions(out, list, time.Now())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"sessions": [...]} as the HTTP API does`)
	cmd.Flags().StringVar(&team, "team", "", "the team whose sessions to list (default RALPH_TEAM)")
	cmd.Flags().BoolVar(&all, "all", false, "list every team's sessions")
	return cmd
}

// printSessions is the table of ralph sessions.
func printSessions(w io.Writer, list []sessionindex.Entry, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tTEAM\tSTATE\tTASK\tITERATIONS\tTOKENS\tAGE\tUPDATED")
	for _, e := range list {
		task := e.CurrentTask
		if task == "" {
			task = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s ago\n", e.ID, e.Team, e.State, console.Escape(task), e.Iterations, e.Tokens,
			age(now.Sub(e.StartedAt)), age(now.Sub(e.UpdatedAt)))
	}
	_ = tw.Flush()
}

// age is a duration as a list shows it: 45s, 12m, 3h10m, 2d4h.
func age(d time.Duration) string {
	switch d = max(d, 0); {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(console.EscapeJSON(b)))
	return err
}

func newStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status SESSION [--json]",
		Short: "Show one session of the team: state, task tree, limits, model usage",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := events.ValidSession(a[0]); err != nil {
				return exitError{code: 2, err: err}
			}
			cfg, m, err := meshFor(cmd, "ralph status")
			if err != nil {
				return err
			}
			defer m.Close()
			ctl, err := controlOf(cfg, m)
			if err != nil {
				return err
			}
			e, err := ctl.Get(cmd.Context(), cfg.Team, a[0])
			if err != nil {
				return refused(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), e)
			}
			printStatus(cmd.OutOrStdout(), e, time.Now())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session as the HTTP API does")
	return cmd
}

// printStatus shows one session for people.
func printStatus(w io.Writer, e sessionindex.Entry, now time.Time) {
	p := func(format string, a ...any) { fmt.Fprintln(w, console.Escape(fmt.Sprintf(format, a...))) }
	p("session %s (team %s): %s", e.ID, e.Team, e.State)
	if e.Reason != "" {
		p("  reason:     %s", e.Reason)
	}
	p("  workspace:  %s", e.Workspace)
	p("  started:    %s (%s ago); last change %s ago", e.StartedAt.Local().Format(time.DateTime), age(now.Sub(e.StartedAt)), age(now.Sub(e.UpdatedAt)))
	p("  progress:   %d iterations, %d builder tokens, step %d (%s)", e.Iterations, e.Tokens, e.Step, e.Phase)
	l := e.Limits
	p("  limits:     %d iterations, %d turns per task, %d tokens, context window %d, compaction at %d",
		l.MaxIterations, l.MaxTurnsPerTask, l.MaxTotalTokens, l.ContextWindow, l.CompactAt)
	p("  tasks:")
	for _, t := range e.Tasks {
		mark := " "
		if t.ID == e.CurrentTask {
			mark = "▶"
		}
		p("   %s %s%s %s: %s (%d turns, %d reviews)", mark, strings.Repeat("  ", t.Depth), t.ID, t.Status, t.Title, t.Turns, t.Attempts)
	}
	if len(e.Usage) > 0 {
		roles := make([]string, 0, len(e.Usage))
		for r := range e.Usage {
			roles = append(roles, r)
		}
		sort.Strings(roles)
		p("  models:")
		for _, r := range roles {
			u := e.Usage[r]
			p("    %-11s %d calls, %d input / %d output tokens", r+":", u.Calls, u.InputTokens, u.OutputTokens)
		}
	}
}

func newCancelCmd() *cobra.Command {
	var (
		reason string
		wait   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "cancel SESSION [--reason TEXT] [--wait 1m]",
		Short: "Stop a running (or escalated) session of the team; it can be resumed later",
		Long: `Ask the builder to stop a session of the team RALPH_TEAM that runs or is escalated, and wait until it
says it stopped (session.cancelled). The step in flight, if any, finishes (its tool calls are journaled
as always) and its result is not applied: the session stays where it was, cancelled. Go on with
` + "`ralph resume SESSION --message \"...\"`" + `.
Exit 0: cancelled; 1: the session ended otherwise, or the builder did not answer within --wait; 2: bad input.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			session := a[0]
			if err := events.ValidSession(session); err != nil {
				return exitError{code: 2, err: err}
			}
			if wait <= 0 {
				return badInput("--wait %s: must be positive", wait)
			}
			cfg, m, err := meshFor(cmd, "ralph cancel")
			if err != nil {
				return err
			}
			defer m.Close()
			ctl, err := controlOf(cfg, m)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			req, err := ctl.Cancel(ctx, cfg.Team, session, reason)
			if err != nil {
				return refused(err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "cancel of session %s asked; waiting for the builder\n", session)
			end, err := awaitEnd(ctx, m, cfg.Team, session, req.ID, wait)
			if err != nil {
				return err
			}
			if end.Type != events.SessionCancelled {
				return exitError{code: 1, err: fmt.Errorf("session %s ended with %s before the cancel took", session, end.Type)}
			}
			fmt.Fprintf(out, "%s\nresume it with `ralph resume %s --message \"...\"`\n", console.Render(end), session)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for whoever reads the session later")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for the builder to stop the session")
	return cmd
}

// awaitEnd follows session until the first end after the event of id
// (the cancel), within wait.
func awaitEnd(ctx context.Context, m *mesh.Mesh, team, session, id string, wait time.Duration) (events.Envelope, error) {
	b, err := m.Bus.ForTeam(team)
	if err != nil {
		return events.Envelope{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var end events.Envelope
	seen := false
	err = b.FollowFrom(ctx, session, bus.From{}, func(ev bus.Stored) (bool, error) {
		if ev.ID == id {
			seen = true
		}
		if seen && ev.Type.Terminal() {
			end = ev.Envelope
			return true, nil
		}
		return false, nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return end, exitError{code: 1, err: fmt.Errorf("the builder did not stop session %s within %s; is a builder running? (the cancel stays asked)", session, wait)}
	}
	return end, err
}
