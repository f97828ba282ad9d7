package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/stuckbench"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

func newReplayCmd() *cobra.Command {
	var (
		asJSON, live bool
		pos          position
	)
	cmd := &cobra.Command{
		Use:   "replay SESSION [--follow] [--since DURATION | --from-seq N] [--json]",
		Short: "Print every event of a session of the team, in order, from JetStream (--follow: then live)",
		Long: `Print every event of SESSION (of the team RALPH_TEAM) from JetStream, in order, up to the last one
stored; with --since or --from-seq, from there. --follow goes on live until the session ends, as
` + "`ralph watch SESSION`" + ` does.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			from, err := pos.from(bus.From{})
			if err != nil {
				return err
			}
			return follow(cmd, a[0], from, live, printer{out: cmd.OutOrStdout(), json: asJSON, times: true, seqs: live})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one event per line as JSON")
	cmd.Flags().BoolVar(&live, "follow", false, "go on live until the session ends (as ralph watch SESSION)")
	pos.flags(cmd)
	return cmd
}

func newStuckCmd() *cobra.Command {
	stuck := &cobra.Command{Use: "stuck", Short: "Stuck detection tools"}
	var window int
	scan := &cobra.Command{
		Use:   "scan [--window N] FILE",
		Short: "Run the stuck detector over a JSONL file of IterationRecords",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			cfg, err := stuckConfig(window)
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return badInput("--window: %v", err)
			}
			f, err := os.Open(a[0])
			if err != nil {
				return badInput("%v", err)
			}
			defer f.Close()
			if err := stuckbench.Scan(f, cmd.OutOrStdout(), cfg, stuckdetector.DefaultPatterns()); err != nil {
				return badInput("%s: %v", a[0], err)
			}
			return nil
		},
	}
	scan.Flags().IntVar(&window, "window", 0, "iterations in the detection window (default: RALPH_STUCK_WINDOW, 8)")
	var corpus string
	bench := &cobra.Command{
		Use:   "bench [--corpus DIR]",
		Short: "Precision, recall and detection delay of the stuck detector on a labelled corpus",
		Long: `Run the stuck detector, with the RALPH_STUCK_* settings, over every trajectory of a labelled corpus
(the one shipped in the binary, or DIR with a labels.json and its JSONL files) and print, per pattern,
precision, recall and the iterations from loop onset to detection; per look-alike kind of the healthy
trajectories, how many there are and the false positives raised on them; then the misses and false positives.
Exit 1 when a target is missed: a false positive on a healthy trajectory, recall under 95%, or a
detection more than 3 iterations after onset.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := stuckConfig(0)
			if err != nil {
				return err
			}
			var c stuckbench.Corpus
			if corpus == "" {
				c, err = stuckbench.ShippedCorpus()
			} else {
				c, err = stuckbench.LoadCorpus(os.DirFS(corpus))
			}
			if err != nil {
				return badInput("corpus %s: %v", corpusName(corpus), err)
			}
			r := stuckbench.Evaluate(c, cfg, nil)
			if err := r.Write(cmd.OutOrStdout()); err != nil {
				return err
			}
			var missed []string
			if r.Total.FalsePositives > 0 {
				missed = append(missed, fmt.Sprintf("%d false positive(s)", r.Total.FalsePositives))
			}
			if rec, ok := r.Total.Recall(); !ok || rec < 0.95 {
				missed = append(missed, fmt.Sprintf("recall %.2f under 0.95", rec))
			}
			if r.Total.MaxLatency > 3 {
				missed = append(missed, fmt.Sprintf("a detection %d iterations after onset", r.Total.MaxLatency))
			}
			if len(missed) > 0 {
				return exitError{code: 1, err: fmt.Errorf("targets missed: %s", strings.Join(missed, "; "))}
			}
			return nil
		},
	}
	bench.Flags().StringVar(&corpus, "corpus", "", "directory of a labelled corpus (default: the one shipped in the binary, from internal/stuckbench/corpus)")
	stuck.AddCommand(scan, bench)
	return stuck
}

func corpusName(dir string) string {
	if dir == "" {
		return "(shipped)"
	}
	return dir
}

// stuckConfig is the detector's configuration from RALPH_STUCK_*, with the
// window overridden when window is not 0.
func stuckConfig(window int) (stuckdetector.Config, error) {
	c, err := loadConfig()
	if err != nil {
		return stuckdetector.Config{}, err
	}
	cfg := mesh.StuckConfig(c)
	if err := cfg.Validate(); err != nil {
		return cfg, badInput("RALPH_STUCK_*: %v", err)
	}
	if window != 0 {
		cfg.Window = window
		if err := cfg.Validate(); err != nil {
			return cfg, badInput("--window: %v", err)
		}
	}
	return cfg, nil
}

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print every setting, its default and its current value (secrets masked)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			return config.Print(cmd.OutOrStdout(), cfg)
		},
	}
	var teamUsers []string
	nats := &cobra.Command{
		Use:   "nats [--team TEAM]...",
		Short: "Print the nats-server authorization block that gives each service and `ralph run` its own user",
		Long: `Print the authorization block of a nats-server configuration for RALPH_PREFIX: one user per
service, allowed to publish only the events it publishes and to work only its own consumers; a
"run" user for ralph run, resume and replay, allowed to publish only session.started and
session.resumed; an "admin" user that creates the streams. Passwords are read from the
environment when the server loads it (RALPH_NATS_PASSWORD_<USER>). Each --team TEAM adds a user
"team-TEAM" for that team's people: it may start, resume, cancel and read the team's sessions only
(its commands run with RALPH_TEAM=TEAM). See docs/nats-permissions.md.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			for _, t := range teamUsers {
				if err := events.ValidTeam(t); err != nil {
					return badInput("--team: %v", err)
				}
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), mesh.PermissionsConfig(cfg.Prefix, teamUsers...))
			return err
		},
	}
	nats.Flags().StringArrayVar(&teamUsers, "team", nil, "add a user for this team (repeat for several)")
	cmd.AddCommand(nats)
	return cmd
}
