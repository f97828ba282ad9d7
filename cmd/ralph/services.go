package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/metrics"
	"github.com/ralphmesh/ralph/pkg/settings"
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
			if err := keepBothOrNeither(cfg); err != nil {
				return err
			}
			log, err := newLogger(cfg, false)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			consoleURL := func(url string) { fmt.Fprintf(out, "console:        %s/ (HTTP API at %s/api/v1)\n", url, url) }
			m, err := mesh.Start(ctx, cfg, log, mesh.Options{Embed: true, Console: out, ConsoleURL: consoleURL})
			var taken *mesh.ListenError
			if errors.As(err, &taken) {
				// A port another process has is a setting to change, not a
				// failure of the mesh.
				return exitError{code: 2, err: err}
			}
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
			fmt.Fprintf(out, "NATS JetStream: %s%s\n", settings.MaskURL(m.NATSURL), tag(natsEmb))
			fmt.Fprintf(out, "Redis:          %s%s\n", settings.MaskURL(m.RedisURL), tag(redisEmb))
			fmt.Fprintf(out, "state:          %s\n", keeping(cfg))
			// The endpoint outlives the signal: /readyz says "stopping"
			// while the services drain.
			srvCtx, srvStop := context.WithCancel(context.WithoutCancel(ctx))
			defer srvStop()
			if url, err := serveMetrics(srvCtx, m, ""); err != nil {
				return err
			} else if url != "" {
				fmt.Fprintf(out, "metrics:        %s\n", url)
				fmt.Fprintf(out, "probes:         %s and /readyz\n", probeURL(url, "/healthz"))
			}
			fmt.Fprintf(out, "services:       %v (Ctrl-C to stop)\n", mesh.Services)
			fmt.Fprintf(out, "start a session from another shell:\n  export %s\n  ralph run PRD --workspace DIR\n", strings.Join(meshExports(m), " "))
			return m.RunServices(ctx, mesh.Services...)
		},
	}
}

// keepBothOrNeither refuses a `ralph up` that would keep a session's events
// but not its state, or the other way round: after a restart the events
// would remain while the state is gone (every session would fail with
// "session state is gone"). The embedded Redis keeps nothing on disk, so
// events that are kept (RALPH_UP_STORE_DIR, or a NATS server of one's own)
// need a Redis of one's own with persistence.
func keepBothOrNeither(cfg config.Config) error {
	eventsKept := cfg.NATS.URL != "" || cfg.Up.StoreDir != ""
	stateKept := cfg.Redis.URL != ""
	switch {
	case eventsKept && !stateKept:
		setting, what := "RALPH_UP_STORE_DIR", "keeps the embedded JetStream's events on disk"
		if cfg.NATS.URL != "" {
			setting, what = "RALPH_NATS_URL", "keeps the session events on a NATS server that outlives ralph up"
		}
		return badInput("%s %s, but the embedded Redis keeps session state in memory only: after a restart every session's events would remain "+
			"with its state gone. Keep both or neither: set RALPH_REDIS_URL to a Redis with persistence (appendonly yes), or unset %s",
			setting, what, setting)
	case !eventsKept && stateKept:
		return badInput("RALPH_REDIS_URL keeps session state in a Redis that outlives ralph up, but the embedded JetStream keeps its events in a " +
			"temporary directory: after a restart every session's state would remain without its events. Keep both or neither: " +
			"set RALPH_UP_STORE_DIR (or RALPH_NATS_URL), or unset RALPH_REDIS_URL")
	}
	return nil
}

// keeping says what survives a restart of `ralph up`.
func keeping(cfg config.Config) string {
	if cfg.Redis.URL == "" {
		return "in memory, lost when ralph up stops (to keep sessions: RALPH_UP_STORE_DIR or RALPH_NATS_URL, and RALPH_REDIS_URL with persistence)"
	}
	where := "RALPH_UP_STORE_DIR=" + cfg.Up.StoreDir
	if cfg.NATS.URL != "" {
		where = "the NATS server"
	}
	return "kept across restarts: events in " + where + ", session state in Redis (which must persist: appendonly yes)"
}

// meshExports are the settings another shell needs to use this mesh, as
// NAME=value: the NATS and Redis URLs (passwords masked: the user supplies
// them), and the prefix when it is not the default.
func meshExports(m *mesh.Mesh) []string {
	exports := []string{"RALPH_NATS_URL=" + settings.MaskURL(m.NATSURL), "RALPH_REDIS_URL=" + settings.MaskURL(m.RedisURL)}
	if def, err := config.Defaults(); err == nil && m.Config.Prefix != def.Prefix {
		exports = append(exports, "RALPH_PREFIX="+m.Config.Prefix)
	}
	return exports
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
			if cfg.NATS.URL == "" {
				return badInput("ralph service %s needs RALPH_NATS_URL, which is not set (use `ralph up` for an all-in-one mesh)", name)
			}
			if mesh.NeedsRedis(name) && cfg.Redis.URL == "" {
				return badInput("ralph service %s needs RALPH_REDIS_URL, which is not set (use `ralph up` for an all-in-one mesh)", name)
			}
			log, err := newLogger(cfg, false)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			var metricsURL string
			running := func(string) {
				log.Info("service running", zap.String("service", name), zap.String("metrics", metricsURL))
			}
			consoleURL := func(url string) { log.Info("console serving", zap.String("url", url)) }
			m, err := mesh.Start(ctx, cfg, log, mesh.Options{Console: cmd.OutOrStdout(), BusOnly: !mesh.NeedsRedis(name), Ready: running, ConsoleURL: consoleURL})
			if err != nil {
				return err
			}
			defer m.Close()
			// A service that cannot be built (a model without an endpoint)
			// is misconfigured: bad input, before anything runs.
			if _, err := m.Service(name); err != nil {
				return badInput("%v", err)
			}
			srvCtx, srvStop := context.WithCancel(context.WithoutCancel(ctx))
			defer srvStop()
			if metricsURL, err = serveMetrics(srvCtx, m, name); err != nil {
				return err
			}
			return m.RunServices(ctx, name)
		},
	}
}

// serveMetrics serves /metrics, /healthz and /readyz on RALPH_METRICS_ADDR
// unless it is empty; without a port there, on service's own port ("" for
// `ralph up`). It returns the /metrics URL.
func serveMetrics(ctx context.Context, m *mesh.Mesh, service string) (string, error) {
	if m.Config.MetricsAddr == "" {
		return "", nil
	}
	addr, err := config.MetricsAddr(m.Config.MetricsAddr, mesh.MetricsPort(service))
	if err != nil {
		return "", badInput("RALPH_METRICS_ADDR: %v", err)
	}
	url, err := m.Metrics.Serve(ctx, addr, m.Log,
		metrics.Route{Path: "/healthz", Handler: m.Health.LiveHandler()},
		metrics.Route{Path: "/readyz", Handler: m.Health.ReadyHandler()})
	if err != nil {
		return "", badInput("RALPH_METRICS_ADDR: %v; set it to a free host:port (127.0.0.1:0 picks a random port), or to empty to serve no metrics", err)
	}
	return url, nil
}

// probeURL is the URL of path on the listener that serves metricsURL.
func probeURL(metricsURL, path string) string {
	return strings.TrimSuffix(metricsURL, "/metrics") + path
}
