package meshbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/critic"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

// DefaultSessions are the session counts measured when none are given.
var DefaultSessions = []int{1, 10, 100, 500}

// DefaultSteps is how many steps each session takes by default.
const DefaultSteps = 40

// Services are the services the benchmark runs: the step and the review
// that ends each task.
var Services = []string{builder.Name, critic.Name, stuckdetector.Name}

// Script is the scripted model's script: the builder finishes its task in
// one step, the critic approves it. Every step is the same step, with no
// stuck signal and no command to run. (With --task-steps K, taskScript's
// rules come first: a task's first K-1 steps each read a file.)
const Script = `rules:
  - {name: builder, model: builder, reply: {content: "Done: nothing was needed."}}
  - {name: critic, model: critic, reply: {content: '{"approved": true, "feedback": "ok"}'}}
`

// Options say what to measure and where.
type Options struct {
	// Config is the base configuration (from the environment); the prefix,
	// the servers' URLs and the models are the benchmark's own.
	Config config.Config
	// Sessions are the numbers of concurrent sessions, one run each.
	Sessions []int
	// Steps is the steps every session takes.
	Steps int
	// TaskSteps is the steps each task takes (0 or 1: one): the first
	// TaskSteps-1 each read a file of the workspace, the last says the
	// task is done and the critic reviews it. Steps/TaskSteps tasks.
	TaskSteps int
	// NATSServer is a nats-server binary to start; empty: the NATS at
	// Config.NATS.URL.
	NATSServer string
	// RedisServer is a redis-server binary to start when Config.Redis.URL
	// is empty.
	RedisServer string
	// Model is the command that serves the scripted model from the script
	// file it is given, printing "... on http://HOST:PORT/v1" once it
	// listens (`ralph scriptllm serve`).
	Model func(script string) *exec.Cmd
	// Timeout bounds one N's run.
	Timeout time.Duration
	// Progress, when set, is where each N's figures are printed as soon as
	// they are measured (Result.WriteText).
	Progress io.Writer
	Log      *zap.Logger
	// CPUProfile, when set, is where a CPU profile of this process over
	// each N's measured run is written: CPUProfile.<N> (go tool pprof).
	CPUProfile string
	// WorkspaceFiles is the big workspace of the workspace check's
	// measurement (runWorkspace); 0 skips it.
	WorkspaceFiles int
}

// Validate says what is wrong with o.
func (o Options) Validate() error {
	if len(o.Sessions) == 0 {
		return errors.New("--sessions: give at least one number of sessions")
	}
	for _, n := range o.Sessions {
		if n < 1 || n > MaxSessions {
			return fmt.Errorf("--sessions %d: must be between 1 and %d", n, MaxSessions)
		}
	}
	k := o.taskSteps()
	if most := min(o.Config.Builder.MaxTurnsPerTask, MaxTaskSteps); k < 1 || k > most {
		return fmt.Errorf("--task-steps %d: must be between 1 and %d (RALPH_BUILDER_MAX_TURNS_PER_TASK bounds it, and the benchmark at %d)", o.TaskSteps, most, MaxTaskSteps)
	}
	if most := MaxSteps(o.Config, k); o.Steps < 1 || o.Steps > most {
		return fmt.Errorf("--steps %d: must be between 1 and %d (a session's PRD has one task per %d steps: RALPH_PRD_MAX_TASKS and RALPH_BUILDER_MAX_ITERATIONS bound it)", o.Steps, most, k)
	}
	if o.Steps%k != 0 {
		return fmt.Errorf("--steps %d: must be a multiple of --task-steps %d (every task takes as many steps)", o.Steps, k)
	}
	if o.WorkspaceFiles < 0 || o.WorkspaceFiles > MaxWorkspaceFiles {
		return fmt.Errorf("--workspace-files %d: must be between 0 (skip) and %d", o.WorkspaceFiles, MaxWorkspaceFiles)
	}
	if o.Model == nil {
		return errors.New("no command for the scripted model")
	}
	if o.NATSServer == "" && o.Config.NATS.URL == "" {
		return errors.New("no NATS: give --nats-server PATH (go build -o /tmp/nats-server github.com/nats-io/nats-server/v2) or set RALPH_NATS_URL")
	}
	if o.RedisServer == "" && o.Config.Redis.URL == "" {
		return errors.New("no Redis: set RALPH_REDIS_URL or put redis-server on PATH")
	}
	return nil
}

// MaxWorkspaceFiles bounds --workspace-files.
const MaxWorkspaceFiles = 1_000_000

// MaxSessions bounds --sessions: each session is a directory and a few
// hundred bytes of state in Redis per step.
const MaxSessions = 5000

// MaxSteps is the most steps a session may take under cfg, in tasks of
// taskSteps steps.
func MaxSteps(cfg config.Config, taskSteps int) int {
	return min(cfg.PRD.MaxTasks*taskSteps, cfg.Builder.MaxIterations)
}

// MaxTaskSteps bounds --task-steps: beyond the stuck detector's window,
// a task that only reads would be judged as one that makes no progress.
const MaxTaskSteps = 8

// taskSteps is o.TaskSteps, 1 when unset.
func (o Options) taskSteps() int {
	if o.TaskSteps == 0 {
		return 1
	}
	return o.TaskSteps
}

// servers are the JetStream server, Redis and the model the runs share.
type servers struct {
	natsURL, redisURL, modelURL string
	natsCPU, redisCPU, modelCPU cpuOf
	natsVersion, redisVersion   string
	children                    []*child
}

func (s *servers) close() {
	for _, c := range slices.Backward(s.children) {
		c.stop()
	}
}

// Run measures each number of sessions in turn on the same servers.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	load := loadAverage()
	dir, err := os.MkdirTemp("", "ralph-bench-mesh-")
	if err != nil {
		return Report{}, fmt.Errorf("bench directory: %w", err)
	}
	defer os.RemoveAll(dir)
	srv, err := startServers(ctx, o, dir)
	if srv != nil {
		defer srv.close()
	}
	if err != nil {
		return Report{}, err
	}
	rep := Report{Machine: machine(srv, load), Steps: o.Steps, TaskSteps: o.taskSteps()}
	for _, n := range o.Sessions {
		r, err := runSessions(ctx, o, srv, dir, n)
		if err != nil {
			return rep, fmt.Errorf("%d sessions: %w", n, err)
		}
		rep.Results = append(rep.Results, r)
		if o.Progress != nil {
			if err := r.WriteText(o.Progress); err != nil {
				return rep, err
			}
		}
	}
	if o.WorkspaceFiles > 0 {
		w, err := runWorkspace(ctx, o, srv, dir, o.WorkspaceFiles)
		if err != nil {
			return rep, fmt.Errorf("workspace check: %w", err)
		}
		rep.Workspace = &w
		if o.Progress != nil {
			if err := w.WriteText(o.Progress); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// startServers starts (or finds) NATS and Redis and starts the model.
func startServers(ctx context.Context, o Options, dir string) (*servers, error) {
	s := &servers{natsURL: o.Config.NATS.URL, redisURL: o.Config.Redis.URL}
	if o.NATSServer != "" {
		c, url, err := startNATS(ctx, o.NATSServer, dir)
		if err != nil {
			return s, err
		}
		s.children = append(s.children, c)
		s.natsURL, s.natsCPU = url, procCPU(c.pid())
	}
	if s.redisURL == "" {
		c, url, err := startRedis(ctx, o.RedisServer, dir)
		if err != nil {
			return s, err
		}
		s.children = append(s.children, c)
		s.redisURL = url
	}
	script := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(script, []byte("rules:\n"+wsScript()+taskScript(o.taskSteps())+strings.TrimPrefix(Script, "rules:\n")), 0o600); err != nil {
		return s, fmt.Errorf("write the model's script: %w", err)
	}
	c, url, err := startChild(ctx, "model server", o.Model(script), modelListening)
	if err != nil {
		return s, err
	}
	s.children = append(s.children, c)
	s.modelURL, s.modelCPU = url, procCPU(c.pid())

	nc, err := nats.Connect(s.natsURL, nats.Name("ralph-bench-mesh"))
	if err != nil {
		return s, fmt.Errorf("connect to NATS at %s: %w", s.natsURL, err)
	}
	s.natsVersion = nc.ConnectedServerVersion()
	nc.Close()
	rdb, err := store.Connect(ctx, s.redisURL)
	if err != nil {
		return s, err
	}
	defer rdb.Close()
	pid, version, err := redisProcess(ctx, rdb)
	s.redisVersion = version
	switch {
	case errors.Is(err, errNotHere):
		o.Log.Warn("Redis's CPU is not measured", zap.Error(err))
	case err != nil:
		return s, err
	default:
		s.redisCPU = procCPU(pid)
	}
	if s.natsCPU == nil {
		o.Log.Warn("nats-server's CPU is not measured: it was not started by the benchmark (--nats-server)")
	}
	return s, nil
}

// Result is one N's figures.
type Result struct {
	Sessions int
	Steps    int // steps measured (iteration.analyzed seen)
	Wall     time.Duration
	StepP50  time.Duration
	StepP99  time.Duration
	// ToCompleted and ToAnalyzed are the step's median split in two:
	// iteration.requested to iteration.completed (the delivery to the
	// builder and its work), iteration.completed to iteration.analyzed
	// (the delivery to the stuck detector and its analysis).
	ToCompleted, ToAnalyzed time.Duration
	LongestGap              time.Duration
	// CPU per iteration of each process; a process whose CPU could not be
	// read (a server not on this host) has Measured false.
	Mesh, NATS, Redis, Model CPU
	AllocsPerStep            float64
	RedisPerStep             float64
	Floor                    Floor
}

// CPU is one process's CPU time per iteration.
type CPU struct {
	PerIt    time.Duration
	Measured bool
}

// ItsPerS is iterations per second over the run.
func (r Result) ItsPerS() float64 { return float64(r.Steps) / r.Wall.Seconds() }

// Ratio is the step's median over the floor's.
func (r Result) Ratio() float64 { return float64(r.StepP50) / float64(r.Floor.Total) }

// CPUPerIt is the CPU per iteration of the mesh, nats-server and Redis
// together (the target; the model's own is apart).
func (r Result) CPUPerIt() time.Duration { return r.Mesh.PerIt + r.NATS.PerIt + r.Redis.PerIt }

// Line is the one line other tools read.
func (r Result) Line() string {
	return fmt.Sprintf("mesh sessions=%d its_per_s=%.0f step_p50_ms=%.2f step_p99_ms=%.2f floor_ms=%.2f ratio=%.2f cpu_ms_per_it=%.2f",
		r.Sessions, r.ItsPerS(), ms(r.StepP50), ms(r.StepP99), ms(r.Floor.Total), r.Ratio(), ms(r.CPUPerIt()))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// usage is what the processes have used so far.
type usage struct {
	at                       time.Time
	mesh, nats, redis, model time.Duration
	natsOK, redisOK, modelOK bool
	mallocs                  uint64
	redisTrips               int64
}

func (s *servers) usage(trips *store.RoundTrips) (usage, error) {
	u := usage{at: time.Now(), redisTrips: trips.Count()}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u.mallocs = ms.Mallocs
	var err error
	if u.mesh, err = selfCPU(); err != nil {
		return u, err
	}
	read := func(f cpuOf, d *time.Duration, ok *bool) error {
		if f == nil {
			return nil
		}
		var err error
		*d, err = f()
		*ok = err == nil
		return err
	}
	return u, errors.Join(read(s.natsCPU, &u.nats, &u.natsOK), read(s.redisCPU, &u.redis, &u.redisOK), read(s.modelCPU, &u.model, &u.modelOK))
}

// runSessions runs n sessions of o.Steps steps on a fresh mesh (its own
// prefix: stream, consumers and keys) and measures them.
func runSessions(ctx context.Context, o Options, srv *servers, dir string, n int) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cfg := benchConfig(o.Config, srv)
	ready := make(chan string, len(Services))
	m, err := mesh.Start(ctx, cfg, o.Log, mesh.Options{Ready: func(s string) {
		// Told again after a reconnection, perhaps: never blocks the service.
		select {
		case ready <- s:
		default:
		}
	}})
	if err != nil {
		return Result{}, err
	}
	defer m.Close()
	defer removeState(cfg.Prefix, m)
	trips := &store.RoundTrips{}
	m.Store.Client().AddHook(trips)

	runCtx, cancelServices := context.WithCancel(ctx)
	servicesDone := make(chan struct{})
	var servicesErr error
	go func() {
		servicesErr = m.RunServices(runCtx, Services...)
		close(servicesDone)
	}()
	stopServices := func() error {
		cancelServices()
		<-servicesDone
		return servicesErr
	}
	defer stopServices()
	for range Services {
		select {
		case <-ready:
		case <-servicesDone:
			return Result{}, fmt.Errorf("services ended before they were ready: %w", servicesErr)
		case <-ctx.Done():
			return Result{}, fmt.Errorf("services not ready: %w", ctx.Err())
		}
	}

	// play runs sessions of steps each, named after name, and waits for
	// them to end; begin is called once the steps are followed, just
	// before the sessions start.
	play := func(name string, sessions, steps int, begin func() error) (*stepWatch, error) {
		w, err := watchSteps(m.Bus.Conn(), cfg.Prefix, sessions)
		if err != nil {
			return nil, err
		}
		starts, err := sessionStarts(dir, name, sessions, steps, o.taskSteps())
		if err == nil {
			err = begin()
		}
		for _, env := range starts {
			if err != nil {
				break
			}
			err = m.Bus.Publish(ctx, env)
		}
		if err != nil {
			w.stop()
			return nil, err
		}
		select {
		case <-w.done:
			return w, nil
		case <-servicesDone:
			err = fmt.Errorf("services ended during the run: %w", servicesErr)
		case <-ctx.Done():
			err = fmt.Errorf("sessions not ended after %s: %d of %d steps analyzed, %d of %d sessions ended (raise --timeout, or look for a stall)",
				o.Timeout, w.analyzedCount(), sessions*steps, w.endedCount(), sessions)
		}
		w.stop()
		return nil, err
	}
	// A first session warms the mesh up (connections, caches, the
	// runtime's pools) so that the figures are those of a mesh at work.
	warm, err := play(cfg.Prefix+"-warmup", 1, warmupTasks*o.taskSteps(), func() error { return nil })
	if err != nil {
		return Result{}, fmt.Errorf("warm-up session: %w", err)
	}
	warm.stop()
	var before usage
	stopProfile := func() error { return nil }
	watch, err := play(cfg.Prefix, n, o.Steps, func() (err error) {
		if o.CPUProfile != "" {
			if stopProfile, err = startProfile(fmt.Sprintf("%s.%d", o.CPUProfile, n)); err != nil {
				return err
			}
		}
		before, err = srv.usage(trips)
		return err
	})
	if perr := stopProfile(); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		return Result{}, err
	}
	defer watch.stop()
	after, err := srv.usage(trips)
	if err != nil {
		return Result{}, err
	}
	if err := stopServices(); err != nil {
		return Result{}, fmt.Errorf("services: %w", err)
	}

	r, err := watch.result(n, o.Steps)
	if err != nil {
		return r, err
	}
	r.Wall = watch.lastAt().Sub(before.at)
	per := func(d time.Duration) time.Duration { return d / time.Duration(r.Steps) }
	r.Mesh = CPU{per(after.mesh - before.mesh), true}
	r.NATS = CPU{per(after.nats - before.nats), after.natsOK}
	r.Redis = CPU{per(after.redis - before.redis), after.redisOK}
	r.Model = CPU{per(after.model - before.model), after.modelOK}
	r.AllocsPerStep = float64(after.mallocs-before.mallocs) / float64(r.Steps)
	r.RedisPerStep = float64(after.redisTrips-before.redisTrips) / float64(r.Steps)
	if r.Floor, err = measureFloor(ctx, srv, cfg.Prefix, r.RedisPerStep); err != nil {
		return r, fmt.Errorf("floor: %w", err)
	}
	return r, nil
}

// benchConfig is base with the benchmark's prefix, servers and models.
// Memory is off: it would ask a model the script does not play.
func benchConfig(base config.Config, srv *servers) config.Config {
	cfg := base
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cfg.Prefix = "bench" + hex.EncodeToString(b)
	cfg.NATS.URL, cfg.Redis.URL = srv.natsURL, srv.redisURL
	cfg.LLM.BaseURL, cfg.LLM.APIKey = srv.modelURL, ""
	cfg.Builder.BaseURL, cfg.Builder.APIKey, cfg.Builder.Model = "", "", "builder"
	cfg.Critic.BaseURL, cfg.Critic.APIKey, cfg.Critic.Model = "", "", "critic"
	cfg.Memory.Memory = memory.Off
	// Nothing in this process serves HTTP but the mesh's own health.
	cfg.Console.Addr = "127.0.0.1:0"
	return cfg
}

// warmupTasks is the tasks of the session that warms a mesh up before it
// is measured.
const warmupTasks = 5

// taskTitle marks the tasks of more than one step, which taskScript
// answers.
const taskTitle = "bench task of several steps"

// taskFile is the file a task's step turn reads.
func taskFile(turn int) string { return fmt.Sprintf("notes-%d.txt", turn) }

// taskScript is the builder's part of the script for tasks of taskSteps
// steps: turns 1 to taskSteps-1 each read a file of their own (work that
// explores, healthy to the stuck detector), then Script's rule says the
// task is done.
func taskScript(taskSteps int) string {
	return turnRules("task", taskTitle, taskSteps, func(turn int) string {
		return fmt.Sprintf(`{content: "reading %s", tool_calls: [{name: read_file, arguments: {path: %q}}]}`, taskFile(turn), taskFile(turn))
	})
}

// turnRules are the builder's rules for the tasks whose title holds title:
// turns 1 to steps-1 of such a task answered with reply(turn), a YAML flow
// mapping. They come before Script's rules, whose builder rule answers the
// last turn (the task is done) and everything else.
func turnRules(name, title string, steps int, reply func(turn int) string) string {
	var b strings.Builder
	for turn := 1; turn < steps; turn++ {
		fmt.Fprintf(&b, "  - {name: %s-%d, model: builder, when: {turn: %d, first_user_contains: %q}, reply: %s}\n", name, turn, turn, title, reply(turn))
	}
	return b.String()
}

// sessionStarts are n session.started events, sessions name-0 to name-<n-1>,
// each with steps/taskSteps tasks and a workspace of its own, which holds
// the files the tasks' steps read when they take more than one.
func sessionStarts(dir, name string, n, steps, taskSteps int) ([]events.Envelope, error) {
	p := prd.PRD{Title: "bench"}
	title := "task %d"
	if taskSteps > 1 {
		title = taskTitle + " %d"
	}
	for i := range steps / taskSteps {
		p.Tasks = append(p.Tasks, prd.Task{ID: fmt.Sprintf("T%d", i+1), Title: fmt.Sprintf(title, i+1), AcceptanceCriteria: []string{"done"}})
	}
	out := make([]events.Envelope, 0, n)
	for i := range n {
		session := fmt.Sprintf("%s-%d", name, i)
		ws := filepath.Join(dir, "workspaces", session)
		if err := os.MkdirAll(ws, 0o755); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		for turn := 1; turn < taskSteps; turn++ {
			if err := os.WriteFile(filepath.Join(ws, taskFile(turn)), fmt.Appendf(nil, "notes for step %d of a task\n", turn), 0o644); err != nil {
				return nil, fmt.Errorf("workspace: %w", err)
			}
		}
		env, err := events.New(events.SessionStarted, session, "", 0, time.Now(), events.SessionStartedData{PRD: p, Workspace: ws})
		if err != nil {
			return nil, err
		}
		out = append(out, env)
	}
	return out, nil
}

// removeState deletes what a run left on the servers: its streams and
// session index (its Redis keys expire with RALPH_REDIS_TTL).
func removeState(prefix string, m *mesh.Mesh) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := m.Bus.JetStream()
	_ = js.DeleteStream(ctx, events.StreamName(prefix))
	_ = js.DeleteStream(ctx, events.DeadLetterStream(prefix))
	_ = js.DeleteKeyValue(ctx, sessionindex.Bucket(prefix))
}

// stepWatch follows the steps of a run on plain NATS subscriptions (the
// stream's subjects: JetStream delivers every stored event to them too),
// decoding only the step and time of iteration.requested and
// iteration.analyzed and the type of session events.
type stepWatch struct {
	subs []*nats.Subscription
	done chan struct{}

	mu        sync.Mutex
	sessions  int
	requested map[string]time.Time // session/step
	completed map[string]time.Time // session/step
	steps     []time.Duration
	// toCompleted and toAnalyzed are the steps' two parts.
	toCompleted, toAnalyzed []time.Duration
	analyzed                []time.Time
	ended                   map[string]events.Type
	failed                  []string
	last                    time.Time
}

func watchSteps(nc *nats.Conn, prefix string, sessions int) (*stepWatch, error) {
	w := &stepWatch{done: make(chan struct{}), sessions: sessions, requested: map[string]time.Time{}, completed: map[string]time.Time{}, ended: map[string]events.Type{}}
	base := prefix + ".s.*.*."
	for _, subj := range []string{base + string(events.IterationRequested), base + string(events.IterationCompleted), base + string(events.IterationAnalyzed), base + "session.>"} {
		sub, err := nc.Subscribe(subj, w.handle)
		if err != nil {
			w.stop()
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		// A run of 500 sessions publishes fast; the default limits would
		// drop events and leave the run unfinished.
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			w.stop()
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		w.subs = append(w.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		w.stop()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return w, nil
}

func (w *stepWatch) stop() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
}

// stepFields is what the watch reads of an event.
type stepFields struct {
	Type    events.Type `json:"type"`
	Session string      `json:"session"`
	Step    int         `json:"step"`
	Time    time.Time   `json:"time"`
}

func (w *stepWatch) handle(msg *nats.Msg) {
	var f stepFields
	if err := json.Unmarshal(msg.Data, &f); err != nil {
		return
	}
	key := fmt.Sprintf("%s/%d", f.Session, f.Step)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case f.Type == events.IterationRequested:
		if _, seen := w.requested[key]; !seen {
			w.requested[key] = f.Time
		}
	case f.Type == events.IterationCompleted:
		if at, ok := w.requested[key]; ok {
			if _, seen := w.completed[key]; !seen {
				w.completed[key] = f.Time
				w.toCompleted = append(w.toCompleted, f.Time.Sub(at))
			}
		}
	case f.Type == events.IterationAnalyzed:
		if at, ok := w.requested[key]; ok {
			if c, ok := w.completed[key]; ok {
				w.toAnalyzed = append(w.toAnalyzed, f.Time.Sub(c))
				delete(w.completed, key)
			}
			w.steps = append(w.steps, f.Time.Sub(at))
			w.analyzed = append(w.analyzed, f.Time)
			delete(w.requested, key)
			w.last = time.Now()
		}
	case f.Type.Terminal():
		if _, seen := w.ended[f.Session]; seen {
			return
		}
		w.ended[f.Session] = f.Type
		if f.Type != events.SessionCompleted {
			w.failed = append(w.failed, f.Session+": "+string(f.Type))
		}
		if len(w.ended) == w.sessions {
			close(w.done)
		}
	}
}

func (w *stepWatch) analyzedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.steps)
}

func (w *stepWatch) endedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ended)
}

func (w *stepWatch) lastAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// result is the latency figures of a finished run.
func (w *stepWatch) result(sessions, steps int) (Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := Result{Sessions: sessions, Steps: len(w.steps)}
	if len(w.failed) > 0 {
		return r, fmt.Errorf("%d sessions did not complete: %s", len(w.failed), strings.Join(w.failed[:min(5, len(w.failed))], ", "))
	}
	if want := sessions * steps; len(w.steps) != want {
		return r, fmt.Errorf("%d steps analyzed, want %d", len(w.steps), want)
	}
	d := slices.Clone(w.steps)
	slices.Sort(d)
	r.StepP50, r.StepP99 = percentile(d, 0.50), percentile(d, 0.99)
	r.ToCompleted, r.ToAnalyzed = median(w.toCompleted), median(w.toAnalyzed)
	at := slices.Clone(w.analyzed)
	slices.SortFunc(at, time.Time.Compare)
	for i := 1; i < len(at); i++ {
		r.LongestGap = max(r.LongestGap, at[i].Sub(at[i-1]))
	}
	return r, nil
}

// percentile of sorted d (nearest rank).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(p*float64(len(d))))]
}

// startProfile starts a CPU profile of this process written to path; the
// function it returns stops it and closes the file.
func startProfile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
