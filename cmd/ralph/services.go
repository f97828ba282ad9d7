package main

import (
	"context"
	"fmt"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
)

func newUpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "up",
		Short: "Run every service in one process (embedded NATS JetStream and Redis when no URL is set)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			log, err := newLogger(cfg, false)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			m, err := mesh.Start(ctx, cfg, log, mesh.Options{Embed: true, Console: cmd.OutOrStdout()})
			if err != nil {
				return err
			}
			defer m.Close()
			for _, n := range mesh.Services {
				if _, err := m.Service(n); err != nil {
					return badInput("%v", err)
				}
			}
			natsEmb, redisEmb := m.Embedded()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "NATS JetStream: %s%s\n", m.NATSURL, tag(natsEmb))
			fmt.Fprintf(out, "Redis:          %s%s\n", m.RedisURL, tag(redisEmb))
			if url, err := serveMetrics(ctx, m); err != nil {
				return err
			} else if url != "" {
				fmt.Fprintf(out, "metrics:        %s\n", url)
			}
			fmt.Fprintf(out, "services:       %v (Ctrl-C to stop)\n", mesh.Services)
			fmt.Fprintf(out, "start a session from another shell: RALPH_NATS_URL=%s ralph run PRD --workspace DIR\n", m.NATSURL)
			return m.RunServices(ctx, mesh.Services...)
		},
	}
}

func tag(embedded bool) string {
	if embedded {
		return " (embedded)"
	}
	return ""
}

func newServiceCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "service NAME",
		Short: "Run one service against external NATS and Redis (the unit of scaling)",
		Long:  "Run one service (builder, critic, stuckdetector, pruner, decomposer, summarizer or console) against RALPH_NATS_URL and RALPH_REDIS_URL.",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			name := a[0]
			if !slices.Contains(mesh.Services, name) {
				return badInput("unknown service %q (have: %v)", name, mesh.Services)
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if cfg.NATS.URL == "" || cfg.Redis.URL == "" {
				return badInput("ralph service needs RALPH_NATS_URL and RALPH_REDIS_URL (use `ralph up` for an all-in-one mesh)")
			}
			log, err := newLogger(cfg, false)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			m, err := mesh.Start(ctx, cfg, log, mesh.Options{Console: cmd.OutOrStdout()})
			if err != nil {
				return err
			}
			defer m.Close()
			url, err := serveMetrics(ctx, m)
			if err != nil {
				return err
			}
			log.Info("service running", zap.String("service", name), zap.String("metrics", url))
			return m.RunServices(ctx, name)
		},
	}
}

// serveMetrics serves /metrics on RALPH_METRICS_ADDR unless it is empty.
func serveMetrics(ctx context.Context, m *mesh.Mesh) (string, error) {
	if m.Config.MetricsAddr == "" {
		return "", nil
	}
	url, err := m.Metrics.Serve(ctx, m.Config.MetricsAddr, m.Log)
	if err != nil {
		return "", fmt.Errorf("RALPH_METRICS_ADDR: %w", err)
	}
	return url, nil
}
