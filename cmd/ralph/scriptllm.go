package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

func newScriptLLMCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "scriptllm",
		Short: "The scripted OpenAI-compatible model server (for tests, demos and deployments without a model)",
	}
	var script, addr string
	serve := &cobra.Command{
		Use:   "serve --script FILE [--addr HOST:PORT]",
		Short: "Serve a model script (pkg/scriptllm's format) over HTTP until SIGINT or SIGTERM",
		Long: `Serve the scripted model as an OpenAI-compatible endpoint: POST /v1/chat/completions
answers from the first matching rule of the script, GET /v1/models lists its models.
Point RALPH_LLM_BASE_URL at http://HOST:PORT/v1. A container deployment's tests run it
as the model so that a whole session runs with no network. Exit 2: the script or the
address is unusable.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if script == "" {
				return badInput("--script is required")
			}
			s, err := scriptllm.LoadScript(script)
			if err != nil {
				return exitError{code: 2, err: err}
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return badInput("--addr %s: %v", addr, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return serveScript(ctx, ln, scriptllm.New(s), len(s.Rules), script, cmd.OutOrStdout())
		},
	}
	serve.Flags().StringVar(&script, "script", "", "script file, YAML or JSON (required)")
	serve.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (:8080 in a container)")
	root.AddCommand(serve)
	return root
}

// serveScript serves srv on ln until ctx ends, then lets requests in
// flight finish for a moment.
func serveScript(ctx context.Context, ln net.Listener, srv *scriptllm.Server, rules int, script string, out io.Writer) error {
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	fmt.Fprintf(out, "scriptllm: %d rules from %s on http://%s/v1\n", rules, script, ln.Addr())
	select {
	case err := <-done:
		return fmt.Errorf("scriptllm: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("scriptllm: shut down: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("scriptllm: serve on %s: %w", ln.Addr(), err)
	}
	return nil
}
