package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

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
			cfg := stuckdetector.DefaultConfig()
			if window != 0 {
				cfg.Window = window
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
	scan.Flags().IntVar(&window, "window", 0, "iterations in the detection window (default 5)")
	stuck.AddCommand(scan)
	return stuck
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
