package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/services/console"
)

func newDLQCmd() *cobra.Command {
	dlq := &cobra.Command{
		Use:   "dlq",
		Short: "The dead letters: events a service gave up on (list, show, replay, purge)",
		Long: `The dead-letter stream keeps every event a service gave up on (a panic, an invalid payload, a failure
on its last delivery), with why and who: the Ralph-Reason, Ralph-Service, Ralph-Consumer, Ralph-Subject,
Ralph-Deliveries and Ralph-Stack headers. Each dead letter is named by its sequence in that stream.
These are an operator's tools across teams: they need a NATS user that may read the dead-letter stream
and publish any session's events (the admin user of docs/nats-permissions.md).`,
	}
	var asJSON, yes bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the dead letters, oldest first",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, m, err := meshFor(cmd, "ralph dlq")
			if err != nil {
				return err
			}
			defer m.Close()
			dls, err := m.Bus.DeadLetters(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				views := make([]deadLetterView, len(dls))
				for i, dl := range dls {
					views[i] = viewOf(dl)
				}
				return writeJSON(out, map[string]any{"dead_letters": views})
			}
			if len(dls) == 0 {
				fmt.Fprintln(out, "no dead letters")
				return nil
			}
			printDeadLetters(out, dls, time.Now())
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the dead letters as JSON")
	show := &cobra.Command{
		Use:   "show ID [--json]",
		Short: "Show one dead letter: the event, why it was given up on, by whom, the stack of a panic",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			seq, err := dlqID(a[0])
			if err != nil {
				return err
			}
			_, m, err := meshFor(cmd, "ralph dlq")
			if err != nil {
				return err
			}
			defer m.Close()
			dl, _, err := m.Bus.DeadLetterAt(cmd.Context(), seq)
			if errors.Is(err, bus.ErrNoDeadLetter) {
				return badInput("dead letter %d: no such dead letter (ralph dlq list shows them)", seq)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), viewOf(dl))
			}
			printDeadLetter(cmd.OutOrStdout(), dl)
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print the dead letter as JSON")
	replay := &cobra.Command{
		Use:   "replay ID",
		Short: "Publish a dead letter's event again, as it was, after a fix; then remove the dead letter",
		Long: `Publish the event of dead letter ID again to the subject it was published on, with a fresh message id
(the server would drop the event's own id as a duplicate within its duplicate window), and remove the
dead letter. Do it once whatever made it fail is fixed. A stage acts only on what its session awaits:
an event whose session was ended (escalated or failed) when it was dead-lettered is acknowledged and
left; go on with such a session with ralph resume.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			seq, err := dlqID(a[0])
			if err != nil {
				return err
			}
			_, m, err := meshFor(cmd, "ralph dlq")
			if err != nil {
				return err
			}
			defer m.Close()
			dl, subject, err := m.Bus.ResubmitDeadLetter(cmd.Context(), seq)
			switch {
			case errors.Is(err, bus.ErrNoDeadLetter):
				return badInput("dead letter %d: no such dead letter (ralph dlq list shows them)", seq)
			case errors.Is(err, bus.ErrNotResubmittable):
				return badInput("%v", err)
			case err != nil:
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), console.Escape(fmt.Sprintf("published %s of session %s (team %s) at step %d again to %s; dead letter %d removed",
				dl.Type, dl.Session, dl.Team, dl.Event.Step, subject, seq)))
			return nil
		},
	}
	purge := &cobra.Command{
		Use:   "purge [--yes]",
		Short: "Remove every dead letter for good",
		Long: `Remove every dead letter. At a terminal it asks first; anywhere else (a script, CI) it asks nothing
and needs --yes.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, m, err := meshFor(cmd, "ralph dlq")
			if err != nil {
				return err
			}
			defer m.Close()
			dls, err := m.Bus.DeadLetters(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(dls) == 0 {
				fmt.Fprintln(out, "no dead letters")
				return nil
			}
			if !yes {
				in := cmd.InOrStdin()
				f, ok := in.(*os.File)
				if !ok || !term.IsTerminal(int(f.Fd())) {
					return badInput("purge removes %d dead letters for good; run it again with --yes", len(dls))
				}
				fmt.Fprintf(out, "remove %d dead letters for good? [y/N] ", len(dls))
				answer, _ := bufio.NewReader(in).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					fmt.Fprintln(out, "nothing removed")
					return nil
				}
			}
			n, err := m.Bus.PurgeDeadLetters(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "removed %d dead letters\n", n)
			return nil
		},
	}
	purge.Flags().BoolVar(&yes, "yes", false, "remove them without asking")
	dlq.AddCommand(list, show, replay, purge)
	return dlq
}

// dlqID reads a dead letter's id: its sequence in the dead-letter stream.
func dlqID(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, badInput("dead letter %q: an id is a whole number (ralph dlq list shows them)", s)
	}
	return n, nil
}

// deadLetterView is a dead letter as --json shows it.
type deadLetterView struct {
	ID         uint64          `json:"id"`
	Time       time.Time       `json:"time"`
	Service    string          `json:"service"`
	Consumer   string          `json:"consumer"`
	Subject    string          `json:"subject"`
	Team       string          `json:"team"`
	Session    string          `json:"session"`
	Type       string          `json:"type"`
	Step       int             `json:"step"`
	Deliveries int             `json:"deliveries"`
	Reason     string          `json:"reason"`
	Stack      string          `json:"stack,omitempty"`
	Invalid    string          `json:"invalid,omitempty"`
	Event      json.RawMessage `json:"event,omitempty"`
}

func viewOf(dl bus.DeadLetter) deadLetterView {
	v := deadLetterView{ID: dl.Seq, Time: dl.Time, Service: dl.Service, Consumer: dl.Consumer, Subject: dl.Subject, Team: dl.Team,
		Session: dl.Session, Type: string(dl.Type), Step: dl.Event.Step, Deliveries: dl.Deliveries, Reason: dl.Reason, Stack: dl.Stack}
	if dl.Invalid != nil {
		v.Invalid = dl.Invalid.Error()
	}
	if b, err := json.Marshal(dl.Event); err == nil {
		v.Event = b
	}
	return v
}

func printDeadLetters(w io.Writer, dls []bus.DeadLetter, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAGE\tSERVICE\tTYPE\tTEAM\tSESSION\tSTEP\tDELIVERIES\tREASON")
	for _, dl := range dls {
		reason := dl.Reason
		if r := []rune(reason); len(r) > 80 {
			reason = string(r[:79]) + "…"
		}
		fmt.Fprintln(tw, console.Escape(fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s", dl.Seq, age(now.Sub(dl.Time)), dl.Service, dl.Type,
			dl.Team, dl.Session, dl.Event.Step, dl.Deliveries, reason)))
	}
	_ = tw.Flush()
}

func printDeadLetter(w io.Writer, dl bus.DeadLetter) {
	p := func(format string, a ...any) { fmt.Fprintln(w, console.Escape(fmt.Sprintf(format, a...))) }
	p("dead letter %d, %s", dl.Seq, dl.Time.Local().Format(time.DateTime))
	p("  given up by: %s (consumer %s) after %d deliveries", dl.Service, dl.Consumer, dl.Deliveries)
	p("  reason:      %s", dl.Reason)
	p("  event:       %s of session %s (team %s) at step %d, on %s", dl.Type, dl.Session, dl.Team, dl.Event.Step, dl.Subject)
	if dl.Invalid != nil {
		p("  invalid:     %v", dl.Invalid)
	}
	if dl.Stack != "" {
		p("  stack:       %s", dl.Stack)
	}
	if dl.Event.ID != "" {
		p("  id:          %s", dl.Event.ID)
	}
	if len(dl.Event.Data) > 0 {
		p("  payload:     %s", string(dl.Event.Data))
	}
}
