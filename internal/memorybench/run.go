package memorybench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/services/console"
)

// DefaultTasks is how many tasks a run has unless told otherwise.
const DefaultTasks = 6

// Options tune a benchmark run.
type Options struct {
	// Tasks is the session's length (DefaultTasks when 0).
	Tasks int
	// Modes are the memory settings to run, in order (off, then on, when
	// empty).
	Modes []memory.Switch
	// Session prefixes the session ids (one per mode), so that runs on a
	// shared mesh do not meet.
	Session string
	// Timeout bounds each session (5 minutes when 0).
	Timeout time.Duration
	Log     *zap.Logger
}

// Result is one session of the benchmark.
type Result struct {
	Memory  memory.Switch
	Session string
	// Outcome is the session's end; Reason says why when it failed.
	Outcome events.Type
	Reason  string
	// Iterations are the builder's iterations, in all and per task (in
	// task order).
	Iterations     int
	TaskIterations []int
	// Usage is the session's model usage by role, as the store counts it:
	// "builder:calls", "builder:input", "summarizer:output", ...
	Usage map[string]int64
	// Memory holds what the session's memory says at the end: its size,
	// its bound, the re-summaries, and each update (memory.updated).
	MemoryTokens, MemoryMax, Resummaries int
	MemoryUpdates                        []events.MemoryUpdatedData
	// FirstContexts are the messages of each task's first builder request,
	// by task id: what the task started with.
	FirstContexts map[string][]scriptllm.Message
	Elapsed       time.Duration
}

// Tokens are the tokens (input and output) the role's calls used.
func (r Result) Tokens(role string) int64 { return r.Usage[role+":input"] + r.Usage[role+":output"] }

// Calls are the role's model calls.
func (r Result) Calls(role string) int64 { return r.Usage[role+":calls"] }

// AllTokens are every role's tokens.
func (r Result) AllTokens() int64 {
	var n int64
	for _, role := range []string{"builder", "critic", "summarizer", "pruner", "decomposer"} {
		n += r.Tokens(role)
	}
	return n
}

// Completed reports whether every task was approved.
func (r Result) Completed() bool { return r.Outcome == events.SessionCompleted }

// Run runs the scenario once per mode on a mesh built from cfg (its NATS
// and Redis, or embedded ones when it names none) against a scripted model
// on 127.0.0.1, whatever endpoints cfg names.
func Run(ctx context.Context, cfg config.Config, o Options) (Report, error) {
	if o.Tasks == 0 {
		o.Tasks = DefaultTasks
	}
	if len(o.Modes) == 0 {
		o.Modes = []memory.Switch{memory.Off, memory.On}
	}
	if o.Session == "" {
		o.Session = fmt.Sprintf("memory-bench-%d", time.Now().UnixNano())
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	rep := Report{Tasks: o.Tasks, MaxTokens: cfg.Memory.MemoryMaxTokens}
	for _, mode := range o.Modes {
		r, err := runOnce(ctx, cfg, o, mode)
		if err != nil {
			return rep, fmt.Errorf("memory %s: %w", mode, err)
		}
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

func runOnce(ctx context.Context, cfg config.Config, o Options, mode memory.Switch) (Result, error) {
	res := Result{Memory: mode, Session: o.Session + "-" + string(mode), FirstContexts: map[string][]scriptllm.Message{}}
	srv := scriptllm.New(Script(o.Tasks))
	url, err := srv.Start()
	if err != nil {
		return res, err
	}
	defer srv.Close()
	dir, err := os.MkdirTemp("", "ralph-memory-bench-")
	if err != nil {
		return res, fmt.Errorf("benchmark directory: %w", err)
	}
	defer os.RemoveAll(dir)
	ws := filepath.Join(dir, "workspace")
	if err := Workspace(ws); err != nil {
		return res, err
	}

	cfg.Memory.Memory = mode
	cfg.LLM.BaseURL, cfg.LLM.APIKey = url, ""
	for _, r := range []*config.Role{&cfg.Builder.Role, &cfg.Critic.Role, &cfg.Summarizer, &cfg.Pruner.Role, &cfg.Decomposer.Role} {
		r.BaseURL, r.APIKey = "", ""
	}
	cfg.Builder.Model, cfg.Critic.Model, cfg.Summarizer.Model = BuilderModel, CriticModel, SummarizerModel
	m, err := mesh.Start(ctx, cfg, o.Log, mesh.Options{Embed: true, RandomPorts: true})
	if err != nil {
		return res, err
	}
	defer m.Close()
	var names []string
	for _, n := range mesh.Services {
		if n != console.Name {
			names = append(names, n)
		}
	}
	svcCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.RunServices(svcCtx, names...) }()
	defer func() {
		stop()
		<-done
	}()

	begin := time.Now()
	start, err := events.New(events.SessionStarted, res.Session, "", 0, begin, events.SessionStartedData{PRD: PRD(o.Tasks), Workspace: ws})
	if err != nil {
		return res, err
	}
	if err := m.Bus.Publish(ctx, start); err != nil {
		return res, err
	}
	perTask := map[string]int{}
	followCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	err = m.Bus.Follow(followCtx, res.Session, func(env events.Envelope) (bool, error) {
		switch env.Type {
		case events.IterationCompleted:
			res.Iterations++
			perTask[env.Task]++
		case events.SessionFailed:
			if d, err := events.DecodeAs[events.SessionFailedData](env); err == nil {
				res.Reason = d.Reason
			}
		case events.SessionEscalated:
			if d, err := events.DecodeAs[events.SessionEscalatedData](env); err == nil {
				res.Reason = d.Reason
			}
		}
		if env.Type.Terminal() {
			res.Outcome = env.Type
		}
		return env.Type.Terminal(), nil
	})
	res.Elapsed = time.Since(begin)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return res, fmt.Errorf("session %s did not end within %s", res.Session, o.Timeout)
		}
		return res, fmt.Errorf("follow session %s: %w", res.Session, err)
	}
	if res.Completed() && mode == memory.On {
		// The memory of the last task lands after the session ends: the
		// figures include it once it is in.
		if err := waitForMemory(ctx, m, res.Session, o.Tasks, cfg.Memory.MemoryWait); err != nil {
			return res, err
		}
	}
	for k := 1; k <= o.Tasks; k++ {
		res.TaskIterations = append(res.TaskIterations, perTask[taskID(k)])
	}
	if res.Usage, err = m.Store.Usage(ctx, res.Session); err != nil {
		return res, err
	}
	var mem memory.Memory
	if _, err := m.Store.LoadMemory(ctx, res.Session, &mem); err != nil {
		return res, err
	}
	res.MemoryTokens, res.MemoryMax, res.Resummaries = mem.Tokens, cfg.Memory.MemoryMaxTokens, mem.Resummaries
	if mode == memory.On {
		if res.MemoryUpdates, err = memoryUpdates(ctx, m, res.Session); err != nil {
			return res, err
		}
	}
	for _, r := range srv.Requests() {
		if r.Model != BuilderModel || r.Turn != 1 {
			continue
		}
		for _, msg := range r.Messages {
			if msg.Role == "user" {
				if id, _, ok := strings.Cut(strings.TrimPrefix(msg.Content, "Task "), ":"); ok && strings.HasPrefix(msg.Content, "Task ") {
					if _, seen := res.FirstContexts[id]; !seen {
						res.FirstContexts[id] = r.Messages
					}
				}
				break
			}
		}
	}
	return res, nil
}

// waitForMemory waits, up to wait, for the memory to hold every task.
func waitForMemory(ctx context.Context, m *mesh.Mesh, session string, tasks int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		var mem memory.Memory
		if _, err := m.Store.LoadMemory(ctx, session, &mem); err != nil {
			return err
		}
		if len(mem.Tasks) >= tasks || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// memoryUpdates are the session's memory.updated events, from the stream
// (the last one lands after the session's end).
func memoryUpdates(ctx context.Context, m *mesh.Mesh, session string) ([]events.MemoryUpdatedData, error) {
	var out []events.MemoryUpdatedData
	err := m.Bus.Replay(ctx, session, func(env events.Envelope) error {
		if env.Type != events.MemoryUpdated {
			return nil
		}
		d, err := events.DecodeAs[events.MemoryUpdatedData](env)
		if err != nil {
			return err
		}
		if d.How != "already" {
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the memory updates of %s: %w", session, err)
	}
	return out, nil
}
