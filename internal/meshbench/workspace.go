package meshbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

// The workspace check's cost on a big repository: one session whose every
// step runs one command (the sandbox, the command, the workspace check),
// on an empty workspace and on one of WorkspaceFiles files, twice each,
// alternating. The difference between the two is what the workspace check
// costs per step on that many files.
const (
	// DefaultWorkspaceFiles is the big workspace's size.
	DefaultWorkspaceFiles = 11000
	// wsTasks tasks of wsSteps steps each: wsSteps-1 commands, then done.
	wsTasks = 4
	wsSteps = 6
	// wsTitle marks the tasks the script answers with commands.
	wsTitle = "workspace step"
	// wsRounds is how many sessions of each workspace run, alternating.
	wsRounds = 2
)

// wsScript is the builder's part of the script for the workspace
// sessions: turns 1 to wsSteps-1 of a task each run one command whose
// output and effect differ from the turn before (healthy work to the stuck
// detector), then the model says it is done.
func wsScript() string {
	return turnRules("ws", wsTitle, wsSteps, func(turn int) string {
		return fmt.Sprintf(`{content: "step %d", tool_calls: [{name: run, arguments: {command: "echo %d > out.txt && echo wrote %d"}}]}`, turn, turn, turn)
	})
}

// WorkspaceResult is the workspace check's figures.
type WorkspaceResult struct {
	Files int
	// Watch is RALPH_BUILDER_HASH_WATCH of the run.
	Watch string
	// Empty and Large are the step times on the empty workspace and the big
	// one: the first step of each task, which walks everything (a review
	// ran before it), and the later steps that ran a command.
	Empty, Large WorkspaceSteps
}

// WorkspaceSteps are the medians of one workspace's steps.
type WorkspaceSteps struct {
	First, Later time.Duration
	N            int // steps measured
}

// Extra is what a later step that ran one command costs on the big
// workspace over the empty one (medians).
func (w WorkspaceResult) Extra() time.Duration { return w.Large.Later - w.Empty.Later }

// ExtraFirst is the same for the first step of a task.
func (w WorkspaceResult) ExtraFirst() time.Duration { return w.Large.First - w.Empty.First }

// runWorkspace measures the workspace check on files files.
func runWorkspace(ctx context.Context, o Options, srv *servers, dir string, files int) (WorkspaceResult, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	empty := filepath.Join(dir, "ws-empty")
	large := filepath.Join(dir, "ws-large")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		return WorkspaceResult{}, err
	}
	if err := os.WriteFile(filepath.Join(empty, "main.go"), []byte("package main\n"), 0o644); err != nil {
		return WorkspaceResult{}, err
	}
	if err := makeLargeWorkspace(large, files); err != nil {
		return WorkspaceResult{}, err
	}
	// A repository's files are older than the racy margin of the
	// workspace check (2 s: a file younger than that is re-read at every
	// walk, see pkg/tools.Hasher); these were just written.
	select {
	case <-time.After(2500 * time.Millisecond):
	case <-ctx.Done():
		return WorkspaceResult{}, ctx.Err()
	}

	cfg := benchConfig(o.Config, srv)
	m, err := mesh.Start(ctx, cfg, o.Log, mesh.Options{})
	if err != nil {
		return WorkspaceResult{}, err
	}
	defer m.Close()
	defer removeState(cfg.Prefix, m)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.RunServices(runCtx, Services...) }()
	defer func() { stop(); <-done }()

	var emptySteps, largeSteps []wsStep
	for round := range wsRounds {
		for _, ws := range []struct {
			root string
			into *[]wsStep
		}{{empty, &emptySteps}, {large, &largeSteps}} {
			session := fmt.Sprintf("%s-ws%d-%s", cfg.Prefix, round, filepath.Base(ws.root))
			steps, err := playWorkspace(ctx, m, cfg.Prefix, session, ws.root, done)
			if err != nil {
				return WorkspaceResult{}, fmt.Errorf("workspace session %s: %w", session, err)
			}
			*ws.into = append(*ws.into, steps...)
		}
	}
	return WorkspaceResult{Files: files, Watch: cfg.Builder.HashWatch, Empty: summarize(emptySteps), Large: summarize(largeSteps)}, nil
}

// makeLargeWorkspace writes files small files in nested directories, as in
// pkg/tools' BenchmarkHashLargeWorkspace.
func makeLargeWorkspace(root string, files int) error {
	for i := range files {
		p := filepath.Join(root, fmt.Sprintf("pkg%02d/sub%02d/file%05d.go", i%40, (i/40)%12, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(strings.Repeat(fmt.Sprintf("// line of file %d\n", i), 1+i%40)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// wsStep is one step of a workspace session as the stream shows it.
type wsStep struct {
	took    time.Duration
	first   bool // the first step of its task
	command bool // it ran a command
}

func summarize(steps []wsStep) WorkspaceSteps {
	var first, later []time.Duration
	for _, s := range steps {
		switch {
		case s.first && s.command:
			first = append(first, s.took)
		case s.command:
			later = append(later, s.took)
		}
	}
	slices.Sort(first)
	slices.Sort(later)
	return WorkspaceSteps{First: percentile(first, 0.5), Later: percentile(later, 0.5), N: len(first) + len(later)}
}

// playWorkspace runs one workspace session to its end and returns its
// steps.
func playWorkspace(ctx context.Context, m *mesh.Mesh, prefix, session, root string, servicesDone <-chan error) ([]wsStep, error) {
	w := &wsWatch{session: session, done: make(chan struct{}), requested: map[int]time.Time{}, steps: map[int]*wsStep{}}
	base := prefix + ".s.*." + session + "." // any team: events.Subject
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	nc := m.Bus.Conn()
	for _, t := range []events.Type{events.TaskStarted, events.IterationRequested, events.IterationCompleted, events.IterationAnalyzed} {
		sub, err := nc.Subscribe(base+string(t), w.handle)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
	}
	sub, err := nc.Subscribe(base+"session.>", w.handle)
	if err != nil {
		return nil, err
	}
	subs = append(subs, sub)
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	p := prd.PRD{Title: "workspace bench"}
	for i := range wsTasks {
		p.Tasks = append(p.Tasks, prd.Task{ID: fmt.Sprintf("W%d", i+1), Title: fmt.Sprintf("%s %d", wsTitle, i+1), AcceptanceCriteria: []string{"done"}})
	}
	env, err := events.New(events.SessionStarted, session, "", 0, time.Now(), events.SessionStartedData{PRD: p, Workspace: root})
	if err != nil {
		return nil, err
	}
	if err := m.Bus.Publish(ctx, env); err != nil {
		return nil, err
	}
	select {
	case <-w.done:
	case err := <-servicesDone:
		return nil, fmt.Errorf("services ended: %w", err)
	case <-ctx.Done():
		return nil, fmt.Errorf("not ended: %w", ctx.Err())
	}
	return w.result()
}

// wsWatch follows one workspace session.
type wsWatch struct {
	session string
	done    chan struct{}

	mu        sync.Mutex
	next      bool // the next requested step is a task's first
	requested map[int]time.Time
	steps     map[int]*wsStep
	ended     events.Type
	reason    string
}

type wsFields struct {
	Type events.Type `json:"type"`
	Step int         `json:"step"`
	Time time.Time   `json:"time"`
	Data struct {
		ToolCalls []json.RawMessage `json:"tool_calls"`
		Reason    string            `json:"reason"`
	} `json:"data"`
}

func (w *wsWatch) handle(msg *nats.Msg) {
	var f wsFields
	if err := json.Unmarshal(msg.Data, &f); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch f.Type {
	case events.TaskStarted:
		w.next = true
	case events.IterationRequested:
		if _, seen := w.requested[f.Step]; !seen {
			w.requested[f.Step] = f.Time
			w.steps[f.Step] = &wsStep{first: w.next}
			w.next = false
		}
	case events.IterationCompleted:
		if s := w.steps[f.Step]; s != nil {
			s.command = len(f.Data.ToolCalls) > 0
		}
	case events.IterationAnalyzed:
		if s, at := w.steps[f.Step], w.requested[f.Step]; s != nil && s.took == 0 {
			s.took = f.Time.Sub(at)
		}
	default:
		if f.Type.Terminal() && w.ended == "" {
			w.ended, w.reason = f.Type, f.Data.Reason
			close(w.done)
		}
	}
}

func (w *wsWatch) result() ([]wsStep, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended != events.SessionCompleted {
		return nil, fmt.Errorf("the session did not complete: %s %s", w.ended, w.reason)
	}
	var out []wsStep
	commands := 0
	for _, s := range w.steps {
		if s.took > 0 {
			out = append(out, *s)
			if s.command {
				commands++
			}
		}
	}
	if want := wsTasks * (wsSteps - 1); commands != want {
		return nil, fmt.Errorf("%d steps ran a command, want %d (the stuck detector or the script changed the session's course)", commands, want)
	}
	return out, nil
}

// WriteText prints w for people.
func (w WorkspaceResult) WriteText(out io.Writer) error {
	_, err := fmt.Fprintf(out, `workspace check (RALPH_BUILDER_HASH_WATCH=%s): one command per step, a one-file workspace against %d files (medians of %d and %d steps)
  a task's first step   %.2f ms against %.2f ms: %+.2f ms (a review came before)
  its later steps       %.2f ms against %.2f ms: %+.2f ms
`, w.Watch, w.Files, w.Empty.N, w.Large.N, ms(w.Large.First), ms(w.Empty.First), ms(w.ExtraFirst()),
		ms(w.Large.Later), ms(w.Empty.Later), ms(w.Extra()))
	return err
}
