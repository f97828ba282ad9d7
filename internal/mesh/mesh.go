// Package mesh owns wiring: connecting to (or embedding) NATS JetStream and
// Redis, bootstrapping the streams, and building each service with its
// dependencies from the configuration. `ralph up`, `ralph service`,
// `ralph run` and `ralph demo` all start services through it.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/control"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/health"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/metrics"
	"github.com/ralphmesh/ralph/pkg/sandbox"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/teams"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/console"
	"github.com/ralphmesh/ralph/services/console/web"
	"github.com/ralphmesh/ralph/services/critic"
	"github.com/ralphmesh/ralph/services/decomposer"
	"github.com/ralphmesh/ralph/services/pruner"
	"github.com/ralphmesh/ralph/services/stuckdetector"
	"github.com/ralphmesh/ralph/services/summarizer"
)

// Services lists the services this build has, in start order.
var Services = []string{builder.Name, critic.Name, stuckdetector.Name, pruner.Name, decomposer.Name, summarizer.Name, console.Name}

// Options say what may be embedded.
type Options struct {
	// Embed allows an embedded NATS server and Redis-compatible server
	// when the configuration has no URL for them.
	Embed bool
	// RandomPorts puts the embedded servers on free ports (run, demo)
	// instead of the configured ones (up).
	RandomPorts bool
	// Console is where the console service prints.
	Console io.Writer
	// BusOnly connects to NATS only (replay and the console need no Redis).
	BusOnly bool
	// Ready, when set, is called once a service's consumers are consuming.
	Ready func(service string)
	// ConsoleURL, when set, is told where the console serves its HTTP API
	// once it listens.
	ConsoleURL func(url string)
}

// Mesh is a connection to the bus and the store, plus any embedded servers.
type Mesh struct {
	Config config.Config
	Log    *zap.Logger
	Bus    *bus.Bus
	Store  *store.Store
	// Index is the session index (a KV bucket next to the stream).
	Index   *sessionindex.Index
	Metrics *metrics.Metrics
	// Health is the process's /healthz and /readyz: the connections'
	// checks, and each service run by RunServices.
	Health   *health.Health
	NATSURL  string
	RedisURL string

	opts     Options
	natsSrv  *server.Server
	storeDir string
	redisSrv *miniredis.Miniredis
	rdb      redis.UniversalClient
	tokens   *tokens.Counter
	tokOnce  sync.Once
	tokErr   error
	sandbox  *sandbox.Sandbox
	sbOnce   sync.Once
	sbErr    error
	flight   flight
}

// Start connects to NATS and Redis (embedding them when allowed and not
// configured) and bootstraps the streams.
func Start(ctx context.Context, cfg config.Config, log *zap.Logger, o Options) (*Mesh, error) {
	m := &Mesh{Config: cfg, Log: log, opts: o, NATSURL: cfg.NATS.URL, RedisURL: cfg.Redis.URL, Metrics: metrics.New(), Health: health.New(0)}
	if err := m.start(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func (m *Mesh) start(ctx context.Context) error {
	cfg := m.Config
	if m.NATSURL == "" {
		if !m.opts.Embed {
			return errors.New("RALPH_NATS_URL is not set")
		}
		if err := m.embedNATS(); err != nil {
			return err
		}
	}
	if m.RedisURL == "" && !m.opts.BusOnly {
		if !m.opts.Embed {
			return errors.New("RALPH_REDIS_URL is not set")
		}
		if err := m.embedRedis(); err != nil {
			return err
		}
	}
	nc, err := bus.Connect(bus.ConnectOptions{
		URL: m.NATSURL, Name: "ralph", InboxPrefix: TeamInbox(cfg.Team), User: cfg.NATS.User, Password: cfg.NATS.Password, Token: cfg.NATS.Token,
		CredsFile: cfg.NATS.Creds, NKeyFile: cfg.NATS.Nkey, TLSCert: cfg.NATS.TLSCert, TLSKey: cfg.NATS.TLSKey, TLSCA: cfg.NATS.CAFile,
	}, m.Log)
	if err != nil {
		return err
	}
	if m.Bus, err = bus.New(nc, cfg.Prefix, m.Log); err != nil {
		nc.Close()
		return err
	}
	m.watchNATS(nc)
	if err := m.Bus.Bootstrap(ctx, cfg.Stream.StreamConfig); err != nil {
		return err
	}
	if err := sessionindex.Bootstrap(ctx, m.Bus.JetStream(), cfg.Prefix, sessionindex.Config{TTL: cfg.Stream.MaxAge, Replicas: cfg.Stream.Replicas}); err != nil {
		return err
	}
	if m.Index, err = sessionindex.Open(ctx, m.Bus.JetStream(), cfg.Prefix); err != nil {
		return err
	}
	if m.opts.BusOnly {
		return nil
	}
	store.LogRedisTo(m.Log)
	ep, err := store.ParseURL(m.RedisURL)
	if err != nil {
		return fmt.Errorf("RALPH_REDIS_URL: %w", err)
	}
	ep.SentinelPassword = cfg.Redis.SentinelPassword
	if m.rdb, err = ep.Connect(ctx); err != nil {
		return err
	}
	m.watchRedis()
	m.Store = store.New(m.rdb, cfg.Prefix, cfg.Redis.TTL)
	return nil
}

// Embedded reports which servers run inside this process.
func (m *Mesh) Embedded() (nats, redis bool) { return m.natsSrv != nil, m.redisSrv != nil }

// Close disconnects and stops embedded servers.
func (m *Mesh) Close() {
	if m.Bus != nil {
		m.Bus.Conn().Close()
	}
	if m.rdb != nil {
		_ = m.rdb.Close()
	}
	if m.natsSrv != nil {
		m.natsSrv.Shutdown()
		m.natsSrv.WaitForShutdown()
	}
	if m.storeDir != "" {
		_ = os.RemoveAll(m.storeDir)
	}
	if m.redisSrv != nil {
		m.redisSrv.Close()
	}
}

// Runner is a service.
type Runner interface {
	Run(ctx context.Context) error
}

// runOptions are service's consumer settings, with the metrics observer,
// the in-flight count, the readiness hook, and the activity hook: a stage at
// work on an event is a sign of life of its session, which the builder's
// watchdog reads.
func (m *Mesh) runOptions(service string) bus.RunOptions {
	o := m.Config.Stream.RunOptions
	o.Observer = observer{m.Metrics, &m.flight}
	o.Middlewares = append(slices.Clone(o.Middlewares), m.flight.hold)
	o.Ready = func() { m.ready(service) }
	if st := m.Store; st != nil {
		o.Working = func(ctx context.Context, env events.Envelope) {
			if err := st.TouchActive(ctx, env.Session, time.Now()); err != nil {
				m.Log.Debug("activity not recorded", zap.String("session", env.Session), zap.Error(err))
			}
		}
	}
	return o
}

// ready marks service bound: its consumer exists and is consuming.
func (m *Mesh) ready(service string) {
	m.Health.Bound(service)
	if m.opts.Ready != nil {
		m.opts.Ready(service)
	}
}

func (m *Mesh) model(role llm.Role, r config.Role) (*llm.Client, error) {
	ep := m.Config.LLM.Endpoint(r)
	if ep.BaseURL == "" {
		return nil, fmt.Errorf("the %s model has no endpoint: set RALPH_LLM_BASE_URL (or OPENAI_BASE_URL, or RALPH_%s_BASE_URL)",
			role, strings.ToUpper(string(role)))
	}
	// Each replica makes as many calls at once as it handles events.
	ep.Concurrency = m.Config.Stream.Concurrency
	var usage llm.UsageRecorder = usageRecorder{m.Store, m.Metrics}
	if role == llm.RoleBuilder {
		// The builder counts its model's tokens in Redis with the step's
		// journal (store.JournalReply), in the same round trip.
		usage = callMetrics{m.Metrics}
	}
	c, err := llm.New(role, ep, usage, m.Log)
	if err != nil {
		return nil, err
	}
	c.NotifyRetries(m.retryNotice(role))
	return c, nil
}

// retryNotice tells the followers of a session that its model call waits
// to be tried again ("builder: model answered 429; retry 2 of 5 in 8 s"),
// in the team of the event being handled. The service is the role's.
func (m *Mesh) retryNotice(role llm.Role) llm.RetryNotifier {
	return func(ctx context.Context, session string, r llm.Retry) {
		env, _ := bus.Handling(ctx)
		if session == "" {
			session = env.Session
		}
		n := bus.Notice{Team: env.TeamOrDefault(), Session: session, Service: string(role), Kind: bus.NoticeRetry, Text: r.String()}
		if err := m.Bus.Notify(n); err != nil {
			m.Log.Debug("retry notice not sent", zap.String("session", session), zap.Error(err))
		}
	}
}

// Tokens is the shared token counter (loading it takes a moment, so it is
// built once).
func (m *Mesh) Tokens() (*tokens.Counter, error) {
	m.tokOnce.Do(func() { m.tokens, m.tokErr = tokens.New() })
	return m.tokens, m.tokErr
}

// probeTimeout bounds the sandbox probe, which runs `true`.
const probeTimeout = 30 * time.Second

// Sandbox is the sandbox the builder's and the critic's commands run in,
// from RALPH_SANDBOX_* and the secret files the configuration names. It is
// built and probed once per process: when it does not work, neither
// service can be built, so no command of `up`, `service`, `run` or `demo`
// starts them; RALPH_SANDBOX_MODE=none is warned about, once.
func (m *Mesh) Sandbox() (*sandbox.Sandbox, error) {
	m.sbOnce.Do(func() { m.sandbox, m.sbErr = m.newSandbox() })
	return m.sandbox, m.sbErr
}

func (m *Mesh) newSandbox() (*sandbox.Sandbox, error) {
	c := m.Config.Sandbox
	c.Secrets = m.Config.SecretFiles()
	sb, err := sandbox.New(c)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		err = sb.Probe(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("%w; install bubblewrap (apt-get install bubblewrap) and allow it to create namespaces, "+
			"or set RALPH_SANDBOX_MODE=none to run the agent's commands unconfined, where they can read this process's secrets", err)
	}
	if !sb.Confined() {
		m.Log.Warn("RALPH_SANDBOX_MODE=none: the agent's commands run UNCONFINED: they can read this process's environment " +
			"and files (API keys, NATS and Redis credentials), write anywhere this user may, and leave processes running")
		return sb, nil
	}
	m.Log.Info("agent commands run in a sandbox", zap.String("sandbox", sb.Describe()))
	return sb, nil
}

// Service builds one service by name from its own Config, as loaded; only
// the values one service takes from another's settings are copied here.
func (m *Mesh) Service(name string) (Runner, error) {
	cfg := m.Config
	log := m.Log.With(zap.String("service", name))
	switch name {
	case builder.Name:
		sb, err := m.Sandbox()
		if err != nil {
			return nil, err
		}
		model, err := m.model(llm.RoleBuilder, cfg.Builder.Role)
		if err != nil {
			return nil, err
		}
		tok, err := m.Tokens()
		if err != nil {
			return nil, err
		}
		c := cfg.Builder.Config
		c.MaxDecomposeDepth, c.MaxSubtasks, c.CompactAt = cfg.Decomposer.MaxDepth, cfg.Decomposer.MaxSubtasks, cfg.CompactAt()
		c.Run, c.Git, c.Memory = m.runOptions(name), cfg.Git, cfg.Memory
		d := builder.Deps{Bus: m.contractBus(name), Store: m.Store, Model: model, Tokens: tok, Log: log, Metrics: m.Metrics, Config: c,
			Sandbox: sb, Index: m.Index}
		limits, err := cfg.Teams.Limits()
		if err != nil {
			return nil, err
		}
		if limits.Any() {
			d.Teams = teams.Guard{Limits: limits, Counter: m.Store, Sessions: m.Index}
		}
		return builder.New(d), nil
	case critic.Name:
		sb, err := m.Sandbox()
		if err != nil {
			return nil, err
		}
		model, err := m.model(llm.RoleCritic, cfg.Critic.Role)
		if err != nil {
			return nil, err
		}
		c := cfg.Critic.Config
		c.Run, c.Git = m.runOptions(name), cfg.Git
		return critic.New(critic.Deps{Bus: m.contractBus(name), Store: m.Store, Model: model, Log: log, Config: c, Sandbox: sb}), nil
	case stuckdetector.Name:
		return stuckdetector.New(stuckdetector.Deps{Bus: m.contractBus(name), Store: m.Store, Log: log, Run: m.runOptions(name), Metrics: m.Metrics,
			Config: StuckConfig(cfg)}), nil
	case decomposer.Name:
		model, err := m.model(llm.RoleDecomposer, cfg.Decomposer.Role)
		if err != nil {
			return nil, err
		}
		c := cfg.Decomposer.Config
		c.Run = m.runOptions(name)
		return decomposer.New(decomposer.Deps{Bus: m.contractBus(name), Store: m.Store, Model: model, Log: log, Config: c}), nil
	case pruner.Name:
		model, err := m.model(llm.RolePruner, cfg.Pruner.Role)
		if err != nil {
			return nil, err
		}
		tok, err := m.Tokens()
		if err != nil {
			return nil, err
		}
		c := cfg.Pruner.Config
		c.LimitTokens, c.Run = cfg.Builder.ContextWindow, m.runOptions(name)
		return pruner.New(pruner.Deps{Bus: m.contractBus(name), Store: m.Store, Model: model, Tokens: tok, Log: log, Config: c}), nil
	case summarizer.Name:
		model, err := m.model(llm.RoleSummarizer, cfg.Summarizer)
		if err != nil {
			return nil, err
		}
		tok, err := m.Tokens()
		if err != nil {
			return nil, err
		}
		opts, err := CompactionOptions(cfg)
		if err != nil {
			return nil, err
		}
		c := cfg.Compaction
		c.Options, c.Memory, c.Run = opts, cfg.Memory, m.runOptions(name)
		return summarizer.New(summarizer.Deps{Bus: m.contractBus(name), Store: m.Store, Model: model, Tokens: tok, Log: log, Config: c}), nil
	case console.Name:
		out := m.opts.Console
		if out == nil {
			out = os.Stdout
		}
		api, err := m.API()
		if err != nil {
			return nil, err
		}
		return console.New(console.Deps{Bus: m.contractBus(name), Out: out, API: api, Config: cfg.Console, Bound: m.opts.ConsoleURL, Log: log}), nil
	}
	return nil, fmt.Errorf("unknown service %q (have: %s)", name, strings.Join(Services, ", "))
}

// API is the console's HTTP API on this mesh: the tokens of
// RALPH_API_TOKENS_FILE, the team limits, and the PRD bounds and model
// window a session is checked against, as the CLI checks them.
func (m *Mesh) API() (http.Handler, error) {
	cfg := m.Config
	var tok teams.Tokens
	if cfg.API.TokensFile != "" {
		var err error
		if tok, err = teams.LoadTokens(cfg.API.TokensFile); err != nil {
			return nil, fmt.Errorf("RALPH_API_TOKENS_FILE: %w", err)
		}
	}
	limits, err := cfg.Teams.Limits()
	if err != nil {
		return nil, fmt.Errorf("RALPH_TEAMS_LIMITS_FILE: %w", err)
	}
	ctl := &control.Control{Bus: m.contractBus(console.Name).Bus, Index: m.Index, Limits: limits}
	prepare := func(team string, r console.StartRequest) (events.Envelope, error) {
		p, err := cfg.PRD.Read("prd", []byte(r.PRD), r.Format)
		if err != nil {
			return events.Envelope{}, &control.Error{Kind: control.BadInput, Err: err}
		}
		counter, err := m.Tokens()
		if err != nil {
			return events.Envelope{}, err
		}
		return control.Prepare(control.Request{Team: team, PRD: p, Source: "prd", Workspace: r.Workspace, Session: r.Session},
			control.Fit{Measure: builder.Measurer(counter, cfg.Builder.MaxTokens).WithMemory(builder.MemoryRoom(counter, cfg.Memory)), Defaults: cfg.Builder.Config.Limits()}, time.Now())
	}
	prices, err := web.ParsePrices(cfg.Console.Prices)
	if err != nil {
		return nil, fmt.Errorf("RALPH_CONSOLE_PRICES: %w", err)
	}
	return console.NewAPI(console.APIDeps{Sessions: ctl, Prepare: prepare, Bus: m.Bus, Tokens: tok, Web: web.Handler(web.WithPrices(prices)),
		KeepAlive: cfg.Console.KeepAlive, MaxBody: 2*int64(cfg.PRD.MaxBytes) + 64<<10, Log: m.Log.With(zap.String("service", console.Name))}), nil
}

// NeedsRedis reports whether service keeps state (or LLM usage) in Redis;
// the console only reads the bus.
func NeedsRedis(service string) bool { return service != console.Name }

// MetricsPort is the port /metrics is served on when RALPH_METRICS_ADDR
// names no port: `ralph up` (service "") takes 9464, and each service run
// on its own takes its own, so that several on one host do not collide.
func MetricsPort(service string) int {
	const base = 9464
	for i, n := range Services {
		if n == service {
			return base + i
		}
	}
	return base
}

// StuckConfig is the stuck detector's configuration.
func StuckConfig(cfg config.Config) stuckdetector.Config { return cfg.Stuck }

// CompactionOptions are the planner's options from the configuration, with
// the compactor's model and prompt version for cache keys. With compaction
// off the builder never asks; should the summarizer be asked anyway, it
// plans in the default mode.
func CompactionOptions(cfg config.Config) (compaction.Options, error) {
	o := cfg.Compaction.Options
	if o.Mode == compaction.ModeOff {
		o.Mode = compaction.DefaultOptions().Mode
	}
	o.Model, o.PromptVersion = cfg.Summarizer.Model, summarizer.PromptVersion(cfg.Compaction.SummaryPrompt)
	if err := o.Validate(); err != nil {
		return o, fmt.Errorf("RALPH_COMPACTION_*: %w", err)
	}
	return o, nil
}

// RunServices builds and runs the named services until ctx ends; the first
// one that fails stops the others. It tells Health where each is, watches
// the backlog of each one's consumer, and logs "service stopping" when the
// stop begins and "service stopped" when every service has drained, each
// with the reason and the events in hand.
func (m *Mesh) RunServices(ctx context.Context, names ...string) error {
	runners := make([]Runner, 0, len(names))
	var consumers []string
	for _, n := range names {
		r, err := m.Service(n)
		if err != nil {
			return err
		}
		runners = append(runners, r)
		if HasConsumer(n) {
			consumers = append(consumers, bus.ConsumerName(n))
		}
	}
	m.Metrics.WatchBacklog(m.backlog, consumers...)
	log := m.Log.With(zap.Strings("services", names))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make(chan error, len(runners))
	for _, n := range names {
		unregister, err := m.register(n)
		if err != nil {
			// Discovery is for operators; the service works without it.
			m.Log.Warn("not registered with the NATS service API", zap.String("service", n), zap.Error(err))
			continue
		}
		defer unregister()
	}
	for i, r := range runners {
		m.Health.Starting(names[i])
		go func() {
			if !HasConsumer(names[i]) {
				// Nothing to bind: it follows the stream as it runs.
				m.ready(names[i])
			}
			err := r.Run(ctx)
			cause := fmt.Errorf("service %s ended", names[i])
			if err != nil {
				err = fmt.Errorf("service %s: %w", names[i], err)
				cause = err
			}
			// The cause is set before the error is sent, so that the stop
			// has its reason when the last service is counted.
			cancel(cause)
			m.Health.Ended(names[i], err)
			errs <- err
		}()
	}
	var first error
	var reason error
	var inHand int64
	var began time.Time
	interrupted := m.flight.interrupted.Load()
	stop := func() {
		reason, inHand, began = context.Cause(ctx), m.flight.inFlight.Load(), time.Now()
		m.Health.Stopping(reason)
		log.Info("service stopping", zap.String("reason", reason.Error()), zap.Int64("in_flight", inHand))
	}
	done := ctx.Done()
	for left := len(runners); left > 0; {
		select {
		case err := <-errs:
			left--
			if err != nil && first == nil {
				first = err
			}
		case <-done:
			stop()
			done = nil
		}
	}
	if done != nil {
		stop()
	}
	fields := []zap.Field{zap.String("reason", reason.Error()), zap.Int64("in_flight", inHand),
		zap.Int64("interrupted", m.flight.interrupted.Load()-interrupted), zap.Duration("drained_in", time.Since(began))}
	if first != nil {
		fields = append(fields, zap.Error(first))
	}
	log.Info("service stopped", fields...)
	return first
}

// usageRecorder keeps LLM usage per session in Redis and per process in
// the metrics.
type usageRecorder struct {
	s *store.Store
	m *metrics.Metrics
}

func (u usageRecorder) RecordUsage(ctx context.Context, session string, role llm.Role, in, out int) error {
	u.m.LLMCall(string(role), in, out)
	return u.s.RecordUsage(ctx, session, string(role), in, out)
}

// callMetrics counts LLM usage per process in the metrics only, for a
// role whose service keeps the session's usage itself.
type callMetrics struct{ m *metrics.Metrics }

func (c callMetrics) RecordUsage(_ context.Context, _ string, role llm.Role, in, out int) error {
	c.m.LLMCall(string(role), in, out)
	return nil
}
