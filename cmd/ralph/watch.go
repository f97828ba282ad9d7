package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/watch"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/services/console"
)

// position is where a follower starts, from --since and --from-seq.
type position struct {
	since   time.Duration
	fromSeq uint64
}

func (p *position) flags(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&p.since, "since", 0, "start with the events of the last DURATION (e.g. 10m)")
	cmd.Flags().Uint64Var(&p.fromSeq, "from-seq", 0, "start at stream sequence N (the seq a follower stopped after, plus one)")
}

// from is the start the flags ask for, or def.
func (p position) from(def bus.From) (bus.From, error) {
	switch {
	case p.since < 0:
		return def, badInput("--since %s: must be positive", p.since)
	case p.since > 0 && p.fromSeq > 0:
		return def, badInput("--since and --from-seq: give one")
	case p.since > 0:
		return bus.From{Since: time.Now().Add(-p.since)}, nil
	case p.fromSeq > 0:
		return bus.From{Seq: p.fromSeq}, nil
	}
	return def, nil
}

func newWatchCmd() *cobra.Command {
	var (
		asJSON bool
		pos    position
	)
	cmd := &cobra.Command{
		Use:   "watch [SESSION] [--since DURATION | --from-seq N] [--json]",
		Short: "Follow a session of the team live (or every session of the team), saying stalls and retries",
		Long: `Follow SESSION of the team RALPH_TEAM: every event from its start (or --since / --from-seq), then live
until it ends, as run shows it. Ctrl-C stops watching, not the session; watch again to pick it up (the
events so far are replayed, then it goes on live). Without SESSION, every session of the team, live
from now (or --since / --from-seq), until Ctrl-C.
Besides the events it says what no event says: a stage that leaves work waiting with nobody taking it
("critic: 1 review waiting for 30s; is a critic running?") and model calls being retried
("builder: model answered 429; retry 2 of 5 in 8 s").
Exit 0: the session completed (or Ctrl-C); 1: it failed, was escalated or cancelled; 2: bad input.`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			session := ""
			if len(a) == 1 {
				session = a[0]
			}
			def := bus.From{New: session == ""}
			from, err := pos.from(def)
			if err != nil {
				return err
			}
			return follow(cmd, session, from, true, printer{out: cmd.OutOrStdout(), json: asJSON, times: true, seqs: true})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print one event per line as JSON (with its "seq"), and {"notice": ...} lines`)
	pos.flags(cmd)
	return cmd
}

// follow prints session's events (every session of the team when
// session is "") from from: live when live, else up to the last one
// stored. Following one session live ends when it ends; its outcome is the
// exit status.
func follow(cmd *cobra.Command, session string, from bus.From, live bool, p printer) error {
	if session != "" {
		if err := events.ValidSession(session); err != nil {
			return exitError{code: 2, err: err}
		}
	}
	cfg, m, err := meshFor(cmd, "ralph "+cmd.Name())
	if err != nil {
		return err
	}
	defer m.Close()
	w, err := watcher(cfg, m)
	if err != nil {
		return err
	}
	b := w.Bus.(*bus.Bus)
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if session != "" {
		if exists, err := b.SessionExists(ctx, session); err != nil {
			return err
		} else if !exists {
			return badInput("session %s: no events of team %s's sessions on %s", session, cfg.Team, settings.MaskURL(cfg.NATS.URL))
		}
	}
	var last bus.Stored
	var final events.Envelope
	onEvent := func(ev bus.Stored) (bool, error) {
		p.event(ev)
		last = ev
		if !live {
			return ev.Pending == 0, nil
		}
		if session != "" && ev.Type.Terminal() && ev.Pending == 0 {
			final = ev.Envelope
			return true, nil
		}
		return false, nil
	}
	onSay := func(s watch.Say) { p.say(s) }
	if !live {
		onSay = func(watch.Say) {}
		// A replay ends at the last event stored; with none from the
		// start asked for, it has nothing to wait for.
		if n, err := b.Count(ctx, session, from); err != nil || n == 0 {
			return err
		}
	}
	err = w.Run(ctx, session, from, onEvent, onSay)
	if ctx.Err() != nil {
		// Ctrl-C: the session goes on; say where to pick it up.
		if !p.json {
			again := "ralph watch"
			if session != "" {
				again += " " + session
			}
			if last.Seq > 0 {
				fmt.Fprintf(p.out, "stopped watching after event %d; pick up with `%s --from-seq %d` (or watch again from the start)\n", last.Seq, again, last.Seq+1)
			} else {
				fmt.Fprintln(p.out, "stopped watching")
			}
		}
		return nil
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	switch final.Type {
	case "", events.SessionCompleted:
		return nil
	}
	return exitError{code: 1, err: fmt.Errorf("session %s %s", session, ending(final))}
}

// ending says how a session ended, with the reason.
func ending(env events.Envelope) string {
	p, err := env.Payload()
	if err != nil {
		return "ended with " + string(env.Type)
	}
	switch d := p.(type) {
	case events.SessionFailedData:
		return "failed: " + console.Escape(d.Reason)
	case events.SessionEscalatedData:
		return "escalated: " + console.Escape(d.Reason)
	case events.SessionCancelledData:
		return "was cancelled: " + console.Escape(d.Reason)
	}
	return "ended with " + string(env.Type)
}
