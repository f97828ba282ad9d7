package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/meshbench"
)

func newBenchCmd() *cobra.Command {
	bench := &cobra.Command{
		Use:   "bench",
		Short: "Measure the platform (see also `ralph compact bench`, `ralph memory bench`, `ralph stuck bench`)",
	}
	bench.AddCommand(newBenchMeshCmd())
	return bench
}

func newBenchMeshCmd() *cobra.Command {
	var (
		sessions       []int
		steps          int
		taskSteps      int
		natsServer     string
		out            string
		timeout        time.Duration
		cpuProfile     string
		workspaceFiles int
	)
	cmd := &cobra.Command{
		Use:   "mesh [--sessions 1,10,100,500] [--steps K] [--task-steps T] [--nats-server PATH] [--out docs/performance.md]",
		Short: "Measure one step of the whole mesh against one JetStream server and Redis, for N concurrent sessions",
		Long: `Run the builder, the critic and the stuck detector in this process against one JetStream server and
one Redis, with the scripted model answering instantly from a process of its own (this binary's
` + "`scriptllm serve`" + `), for each N of --sessions concurrent sessions of --steps steps each, in tasks of
--task-steps steps (1 by default: every step is a task of its own, with its start and its review; with
T > 1 a task's first T-1 steps each read a file). For each N print
iterations/s, the step's p50 and p99 (iteration.requested -> iteration.analyzed) and its two parts (up to
iteration.completed, and from there to iteration.analyzed), CPU milliseconds per
iteration of each process (this one, nats-server, redis-server, the model), allocations and Redis round
trips per step, the longest gap between consecutive analyzed steps, and the floor measured on the same
servers right after (one JetStream publish -> durable consumer -> ack, as many Redis round trips as the
step made, one HTTP call to the model) with the ratio step p50 / floor; each N ends with one line:

  mesh sessions=100 its_per_s=1234 step_p50_ms=1.20 step_p99_ms=3.40 floor_ms=0.90 ratio=1.33 cpu_ms_per_it=0.95

(cpu_ms_per_it: this process + nats-server + Redis.) Then the workspace check on a big workspace: one
session whose every step runs one command, on a one-file workspace and on one of --workspace-files files
(11,000; 0 skips it), twice each, and the difference of their step medians, for a task's first step
(every file lstat'ed) and its later ones (only what the kernel reported changed). Then issue 13's targets,
each met or MISSED (they do not change the exit code).

Servers (nothing is downloaded): --nats-server PATH starts that nats-server binary (2.10 or newer, e.g.
go build -o /tmp/nats-server github.com/nats-io/nats-server/v2); without it, the NATS at RALPH_NATS_URL
is used (its CPU is then not measured), else a nats-server found on PATH is started. Redis is the one at
RALPH_REDIS_URL (its CPU is measured when its process is on this host), else a redis-server found on
PATH is started without persistence. Each N runs on a fresh prefix, removed afterwards.

Nothing is written unless --out is given (the repository's report is docs/performance.md: run from the
repository's top with --out docs/performance.md). Exit 2: bad flags or no server to use; 1: a run failed.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if natsServer != "" {
				if _, err := exec.LookPath(natsServer); err != nil {
					return badInput("--nats-server %s: %v", natsServer, err)
				}
			} else if cfg.NATS.URL == "" {
				natsServer, _ = exec.LookPath("nats-server")
			}
			var redisServer string
			if cfg.Redis.URL == "" {
				redisServer, _ = exec.LookPath("redis-server")
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this binary to run the model server: %w", err)
			}
			log, err := newLogger(cfg, true)
			if err != nil {
				return err
			}
			o := meshbench.Options{
				Config: cfg, Sessions: sessions, Steps: steps, TaskSteps: taskSteps, NATSServer: natsServer, RedisServer: redisServer, Timeout: timeout,
				Progress: cmd.OutOrStdout(), Log: log, CPUProfile: cpuProfile, WorkspaceFiles: workspaceFiles,
				Model: func(script string) *exec.Cmd {
					return exec.Command(exe, "scriptllm", "serve", "--script", script, "--addr", "127.0.0.1:0")
				},
			}
			if timeout <= 0 {
				return badInput("--timeout %s: must be positive", timeout)
			}
			if taskSteps < 1 {
				// (Options take 0 for one; the flag says it.)
				return badInput("--task-steps %d: must be between 1 and %d", taskSteps, meshbench.MaxTaskSteps)
			}
			if err := o.Validate(); err != nil {
				return exitError{code: 2, err: err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep, err := meshbench.Run(ctx, o)
			if err != nil {
				return fmt.Errorf("mesh benchmark: %w", err)
			}
			if err := rep.WriteTargets(cmd.OutOrStdout()); err != nil {
				return err
			}
			if out != "" {
				rep.Command = "ralph " + strings.Join(os.Args[1:], " ")
				if err := rep.WriteFile(out); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "report written to %s\n", out)
			}
			return nil
		},
	}
	cmd.Flags().IntSliceVar(&sessions, "sessions", meshbench.DefaultSessions, "numbers of concurrent sessions, one run each (comma-separated)")
	cmd.Flags().IntVar(&steps, "steps", meshbench.DefaultSteps, "steps each session takes")
	cmd.Flags().IntVar(&taskSteps, "task-steps", 1, fmt.Sprintf("steps each task takes (1 to %d; --steps must be a multiple): all but the last read a file", meshbench.MaxTaskSteps))
	cmd.Flags().StringVar(&natsServer, "nats-server", "", "nats-server binary to start (default: RALPH_NATS_URL, else nats-server on PATH)")
	cmd.Flags().StringVar(&out, "out", "", "also write the report as Markdown to this file (docs/performance.md in the repository)")
	cmd.Flags().IntVar(&workspaceFiles, "workspace-files", meshbench.DefaultWorkspaceFiles, "files of the big workspace the workspace check is measured on, after the sessions (0: skip it)")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the mesh over each N's measured run to FILE.<N> (go tool pprof)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "longest one N's run may take")
	return cmd
}
