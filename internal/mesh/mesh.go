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
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/metrics"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/console"
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
	// BusOnly connects to NATS only (replay needs no Redis).
	BusOnly bool
}

// Mesh is a connection to the bus and the store, plus any embedded servers.
type Mesh struct {
	Config   config.Config
	Log      *zap.Logger
	Bus      *bus.Bus
	Store    *store.Store
	Metrics  *metrics.Metrics
	NATSURL  string
	RedisURL string

	opts     Options
	natsSrv  *server.Server
	storeDir string
	redisSrv *miniredis.Miniredis
	rdb      *redis.Client
	tokens   *tokens.Counter
	tokOnce  sync.Once
	tokErr   error
}

// Start connects to NATS and Redis (embedding them when allowed and not
// configured) and bootstraps the streams.
func Start(ctx context.Context, cfg config.Config, log *zap.Logger, o Options) (*Mesh, error) {
	m := &Mesh{Config: cfg, Log: log, opts: o, NATSURL: cfg.NATS.URL, RedisURL: cfg.Redis.URL, Metrics: metrics.New()}
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
		addr := cfg.Up.RedisAddr
		if m.opts.RandomPorts {
			addr = "127.0.0.1:0"
		}
		m.redisSrv = miniredis.NewMiniRedis()
		if err := m.redisSrv.StartAddr(addr); err != nil {
			return fmt.Errorf("embedded redis on %s: %w", addr, err)
		}
		m.RedisURL = "redis://" + m.redisSrv.Addr()
	}
	nc, err := bus.Connect(bus.ConnectOptions{
		URL: m.NATSURL, Name: "ralph", User: cfg.NATS.User, Password: cfg.NATS.Password, Token: cfg.NATS.Token,
		CredsFile: cfg.NATS.Creds, NKeyFile: cfg.NATS.Nkey, TLSCert: cfg.NATS.TLSCert, TLSKey: cfg.NATS.TLSKey, TLSCA: cfg.NATS.CAFile,
	}, m.Log)
	if err != nil {
		return err
	}
	if m.Bus, err = bus.New(nc, cfg.Prefix, m.Log); err != nil {
		nc.Close()
		return err
	}
	if err := m.Bus.Bootstrap(ctx, bus.StreamConfig{MaxAge: cfg.Stream.MaxAge, Replicas: cfg.Stream.Replicas}); err != nil {
		return err
	}
	if m.opts.BusOnly {
		return nil
	}
	if m.rdb, err = store.Connect(ctx, m.RedisURL); err != nil {
		return err
	}
	m.Store = store.New(m.rdb, cfg.Prefix, cfg.Redis.TTL)
	return nil
}

func (m *Mesh) embedNATS() error {
	dir := m.Config.Up.StoreDir
	if dir == "" {
		d, err := os.MkdirTemp("", "ralph-jetstream-")
		if err != nil {
			return fmt.Errorf("embedded nats: %w", err)
		}
		dir, m.storeDir = d, d
	}
	port := m.Config.Up.NATSPort
	if m.opts.RandomPorts {
		port = server.RANDOM_PORT
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "ralph-embedded", Host: "127.0.0.1", Port: port,
		JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		return fmt.Errorf("embedded nats: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("embedded nats on port %d did not start (is the port in use?)", port)
	}
	m.natsSrv = srv
	m.NATSURL = srv.ClientURL()
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

func (m *Mesh) runOptions() bus.RunOptions {
	s := m.Config.Stream
	return bus.RunOptions{AckWait: s.AckWait, MaxDeliver: s.MaxDeliver, Concurrency: s.Concurrency, DrainTimeout: s.DrainTimeout, Observer: m.Metrics}
}

func (m *Mesh) model(role llm.Role, r config.Role) (*llm.Client, error) {
	base, key, model := m.Config.Endpoint(r)
	if base == "" {
		return nil, fmt.Errorf("the %s model has no endpoint: set RALPH_LLM_BASE_URL (or OPENAI_BASE_URL, or RALPH_%s_BASE_URL)",
			role, strings.ToUpper(string(role)))
	}
	return llm.New(role, llm.Endpoint{BaseURL: base, APIKey: key, Model: model,
		Timeout: m.Config.LLM.Timeout, MaxRetries: m.Config.LLM.MaxRetries}, usageRecorder{m.Store, m.Metrics}, m.Log)
}

// Tokens is the shared token counter (loading it takes a moment, so it is
// built once).
func (m *Mesh) Tokens() (*tokens.Counter, error) {
	m.tokOnce.Do(func() { m.tokens, m.tokErr = tokens.New() })
	return m.tokens, m.tokErr
}

// Service builds one service by name.
func (m *Mesh) Service(name string) (Runner, error) {
	cfg := m.Config
	log := m.Log.With(zap.String("service", name))
	switch name {
	case builder.Name:
		model, err := m.model(llm.RoleBuilder, cfg.Builder.Role)
		if err != nil {
			return nil, err
		}
		tok, err := m.Tokens()
		if err != nil {
			return nil, err
		}
		return builder.New(builder.Deps{Bus: m.Bus, Store: m.Store, Model: model, Tokens: tok, Log: log, Metrics: m.Metrics,
			Config: builder.Config{
				Limits: events.Limits{MaxTurnsPerTask: cfg.Builder.MaxTurnsPerTask, MaxIterations: cfg.Builder.MaxIterations, MaxTotalTokens: cfg.Builder.MaxTotalTokens,
					MaxDecomposeDepth: cfg.Decomposer.MaxDepth, MaxSubtasks: cfg.Decomposer.MaxSubtasks,
					ContextWindow: cfg.Builder.ContextWindow, CompactAt: cfg.CompactAt()},
				Tools:             tools.Options{ShellTimeout: cfg.Builder.ShellTimeout, OutputCap: cfg.Builder.OutputCap},
				InlineOutputBytes: cfg.Builder.InlineOutputBytes, MaxTokens: cfg.Builder.MaxTokens, Run: m.runOptions(),
			}}), nil
	case critic.Name:
		model, err := m.model(llm.RoleCritic, cfg.Critic.Role)
		if err != nil {
			return nil, err
		}
		return critic.New(critic.Deps{Bus: m.Bus, Model: model, Log: log,
			Config: critic.Config{VerifyTimeout: cfg.Critic.VerifyTimeout, Run: m.runOptions()}}), nil
	case stuckdetector.Name:
		return stuckdetector.New(stuckdetector.Deps{Bus: m.Bus, Store: m.Store, Log: log, Run: m.runOptions(), Metrics: m.Metrics,
			Config: StuckConfig(cfg)}), nil
	case decomposer.Name:
		model, err := m.model(llm.RoleDecomposer, cfg.Decomposer.Role)
		if err != nil {
			return nil, err
		}
		return decomposer.New(decomposer.Deps{Bus: m.Bus, Model: model, Log: log,
			Config: decomposer.Config{MaxSubtasks: cfg.Decomposer.MaxSubtasks, Run: m.runOptions()}}), nil
	case pruner.Name:
		model, err := m.model(llm.RolePruner, cfg.Pruner.Role)
		if err != nil {
			return nil, err
		}
		tok, err := m.Tokens()
		if err != nil {
			return nil, err
		}
		return pruner.New(pruner.Deps{Bus: m.Bus, Store: m.Store, Model: model, Tokens: tok, Log: log,
			Config: pruner.Config{MaxPrunedTokens: cfg.Pruner.MaxPrunedTokens, ChunkTokens: cfg.Pruner.ChunkTokens,
				NoteTokens: cfg.Pruner.NoteTokens, LimitTokens: cfg.Builder.ContextWindow, Run: m.runOptions()}}), nil
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
		return summarizer.New(summarizer.Deps{Bus: m.Bus, Store: m.Store, Model: model, Tokens: tok, Log: log,
			Config: summarizer.Config{Options: opts, SummaryPrompt: cfg.Compaction.SummaryPrompt, MaxSummaryTokens: cfg.Compaction.MaxSummaryTokens, CacheTTL: cfg.Compaction.CacheTTL,
				Advisor: cfg.Compaction.Advisor, Run: m.runOptions()}}), nil
	case console.Name:
		out := m.opts.Console
		if out == nil {
			out = os.Stdout
		}
		return console.New(console.Deps{Bus: m.Bus, Out: out}), nil
	}
	return nil, fmt.Errorf("unknown service %q (have: %s)", name, strings.Join(Services, ", "))
}

// StuckConfig is the stuck detector's configuration.
func StuckConfig(cfg config.Config) stuckdetector.Config {
	s := cfg.Stuck
	return stuckdetector.Config{Window: s.Window, RepeatThreshold: s.RepeatThreshold, SimilarityThreshold: s.SimilarityThreshold,
		NoProgressSpan: s.NoProgressSpan, AlternatingSteps: s.AlternatingSteps, MonologueTurns: s.MonologueTurns,
		MonologueNovelty: s.MonologueNovelty, ChantRepeats: s.ChantRepeats, ChantMinWords: s.ChantMinWords,
		CompactionRepeats: s.CompactionRepeats}
}

// CompactionOptions are the planner's options from the configuration: the
// knobs `ralph config` shows, the rest at the planner's defaults.
func CompactionOptions(cfg config.Config) (compaction.Options, error) {
	o := compaction.DefaultOptions()
	c := cfg.Compaction
	if c.Mode != "off" {
		o.Mode = compaction.Mode(c.Mode)
	}
	o.PressureRatio, o.CriticalRatio, o.TargetRatio = c.PressureRatio, c.CriticalRatio, c.TargetRatio
	o.RecentTurns, o.MaxCallsPerIteration, o.MinGainTokens = c.RecentTurns, c.MaxCallsPerIteration, c.MinGainTokens
	o.CooldownIterations, o.AdvisorTimeout = c.CooldownIterations, c.AdvisorTimeout
	o.AdvisorEpsilon, o.AdvisorTopK, o.OvershootLimit = c.AdvisorEpsilon, c.AdvisorTopK, c.OvershootLimit
	o.MinFeasibleRatio, o.MaxUsefulRatio, o.MinTargetShare = c.MinFeasibleRatio, c.MaxUsefulRatio, c.MinTargetShare
	o.MaxOutputTokens, o.PointerTokens, o.CheckpointOverheadTokens = c.MaxOutputTokens, c.PointerTokens, c.CheckpointOverhead
	o.Model, o.PromptVersion = cfg.Summarizer.Model, summarizer.PromptVersion(c.SummaryPrompt)
	if err := o.Validate(); err != nil {
		return o, fmt.Errorf("RALPH_COMPACTION_*: %w", err)
	}
	return o, nil
}

// RunServices builds and runs the named services until ctx ends; the first
// one that fails stops the others.
func (m *Mesh) RunServices(ctx context.Context, names ...string) error {
	runners := make([]Runner, 0, len(names))
	for _, n := range names {
		r, err := m.Service(n)
		if err != nil {
			return err
		}
		runners = append(runners, r)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(runners))
	for i, r := range runners {
		go func() {
			err := r.Run(ctx)
			if err != nil {
				err = fmt.Errorf("service %s: %w", names[i], err)
			}
			errs <- err
			cancel()
		}()
	}
	var first error
	for range runners {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
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
