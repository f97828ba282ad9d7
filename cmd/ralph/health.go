package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/health"
)

// newHealthCmd is the probe for places without an HTTP client: the image's
// HEALTHCHECK and compose health checks (the image has no curl).
func newHealthCmd() *cobra.Command {
	var (
		probeURL string
		live     bool
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health [SERVICE]",
		Short: "Ask a local service (or `ralph up`) whether it is ready: exit 0 when its /readyz answers 200, 1 otherwise",
		Long: "Asks /readyz (with --live, /healthz) of the `ralph service SERVICE` (no SERVICE: `ralph up`) on this host, at " +
			"RALPH_METRICS_ADDR as that process reads it (without a port there, the service's own), or at --url. " +
			"Prints what was checked; exit 0 when ready (alive), 1 when not or when nothing answers, with why.",
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			service := ""
			if len(a) == 1 {
				service = a[0]
				if !slices.Contains(mesh.Services, service) {
					return badInput("unknown service %q (have: %v)", service, mesh.Services)
				}
			}
			if timeout <= 0 {
				return badInput("--timeout %v: must be positive", timeout)
			}
			path := "/readyz"
			if live {
				path = "/healthz"
			}
			if probeURL == "" {
				cfg, err := loadConfig()
				if err != nil {
					return err
				}
				if probeURL, err = localProbeURL(cfg.MetricsAddr, service, path); err != nil {
					return badInput("%v", err)
				}
			} else if u, err := url.Parse(probeURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return badInput("--url %q: not an http:// or https:// URL", probeURL)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rep, err := health.Probe(ctx, http.DefaultClient, probeURL)
			if err != nil {
				return exitError{code: 1, err: fmt.Errorf("no answer from %s: %w", probeURL, err)}
			}
			if !rep.OK() {
				return exitError{code: 1, err: fmt.Errorf("%s: %s (%s)", rep.Status, rep.Failing(), probeURL)}
			}
			names := make([]string, len(rep.Checks))
			for i, c := range rep.Checks {
				names[i] = c.Name
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", rep.Status, strings.Join(names, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&probeURL, "url", "", "the probe's URL (default: from RALPH_METRICS_ADDR and SERVICE, on this host)")
	cmd.Flags().BoolVar(&live, "live", false, "ask /healthz (alive) instead of /readyz (ready)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return cmd
}

// localProbeURL is path on the listener the process of service ("" for
// `ralph up`) opens for RALPH_METRICS_ADDR=addr, reached from this host: an
// address that listens on every interface is asked on loopback.
func localProbeURL(addr, service, path string) (string, error) {
	if addr == "" {
		return "", fmt.Errorf("RALPH_METRICS_ADDR is empty, so no process here serves %s; set it as the service has it, or pass --url", path)
	}
	hostPort, err := config.MetricsAddr(addr, mesh.MetricsPort(service))
	if err != nil {
		return "", fmt.Errorf("RALPH_METRICS_ADDR: %w", err)
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return "", fmt.Errorf("RALPH_METRICS_ADDR %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
