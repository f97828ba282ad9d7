package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/console"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

func newReplayCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "replay SESSION",
		Short: "Print every event of a session, in order, from JetStream",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := events.ValidSession(a[0]); err != nil {
				return exitError{code: 2, err: err}
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if cfg.NATS.URL == "" {
				return badInput("replay reads the mesh at RALPH_NATS_URL, which is not set")
			}
			log, err := newLogger(cfg, true)
			if err != nil {
				return err
			}
			m, err := mesh.Start(cmd.Context(), cfg, log, mesh.Options{BusOnly: true})
			if err != nil {
				return err
			}
			defer m.Close()
			out := cmd.OutOrStdout()
			err = m.Bus.Replay(cmd.Context(), a[0], func(env events.Envelope) error {
				if asJSON {
					b, _ := json.Marshal(env)
					_, err := fmt.Fprintln(out, string(b))
					return err
				}
				if line := console.Render(env); line != "" {
					_, err := fmt.Fprintf(out, "%s %s\n", env.Time.Format("15:04:05.000"), line)
					return err
				}
				return nil
			})
			if errors.Is(err, bus.ErrNoSession) {
				return exitError{code: 2, err: fmt.Errorf("session %s: no events on %s", a[0], cfg.NATS.URL)}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one event per line as JSON")
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
			if err := stuckdetector.Scan(f, cmd.OutOrStdout(), cfg, stuckdetector.DefaultPatterns()); err != nil {
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
precision, recall and the iterations from loop onset to detection, then the misses and false positives.
Exit 1 when a target is missed: a false positive on a healthy trajectory, recall under 95%, or a
detection more than 3 iterations after onset.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := stuckConfig(0)
			if err != nil {
				return err
			}
			var c stuckdetector.Corpus
			if corpus == "" {
				c, err = stuckdetector.ShippedCorpus()
			} else {
				c, err = stuckdetector.LoadCorpus(os.DirFS(corpus))
			}
			if err != nil {
				return badInput("corpus %s: %v", corpusName(corpus), err)
			}
			r := stuckdetector.Evaluate(c, cfg, nil)
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
	bench.Flags().StringVar(&corpus, "corpus", "", "directory of a labelled corpus (default: the shipped one)")
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
	return &cobra.Command{
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
}
