// Package config owns Ralph mesh's settings: one struct per concern, read
// from RALPH_* environment variables with envconfig, with the OPENAI_*
// fallbacks CONTRACT.md promises, and the table `ralph config` prints.
package config

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// EnvPrefix is the prefix of every setting.
const EnvPrefix = "RALPH"

// Config is every setting of every service.
type Config struct {
	Prefix   string `split_words:"true" default:"ralph" desc:"subject prefix, stream name and Redis key namespace"`
	LogLevel string `split_words:"true" default:"info" desc:"debug, info, warn or error"`
	// MetricsAddr is where `ralph up` and `ralph service` serve /metrics.
	MetricsAddr string `split_words:"true" default:"127.0.0.1:9464" desc:"address of the Prometheus /metrics endpoint (up, service); empty disables it; ':9464' in a container"`

	NATS       NATS       `split_words:"true"`
	Stream     Stream     `split_words:"true"`
	Redis      Redis      `split_words:"true"`
	LLM        LLM        `split_words:"true"`
	Builder    Builder    `split_words:"true"`
	Critic     Critic     `split_words:"true"`
	Stuck      Stuck      `split_words:"true"`
	Summarizer Role       `split_words:"true"`
	Compaction Compaction `split_words:"true"`
	Pruner     Pruner     `split_words:"true"`
	Decomposer Decomposer `split_words:"true"`
	Up         Up         `split_words:"true"`
	Run        RunCommand `split_words:"true"`
}

// NATS is how to reach the bus. An empty URL means "run an embedded server"
// for `ralph up` and `ralph run`.
type NATS struct {
	URL      string `split_words:"true" desc:"nats:// URL; empty runs an embedded JetStream server (up, run, demo)"`
	User     string `split_words:"true" desc:"user name"`
	Password string `split_words:"true" secret:"true" desc:"password"`
	Token    string `split_words:"true" secret:"true" desc:"auth token"`
	Creds    string `split_words:"true" desc:"path to a .creds file"`
	Nkey     string `split_words:"true" desc:"path to an nkey seed file"`
	TLSCert  string `split_words:"true" desc:"client certificate file"`
	TLSKey   string `split_words:"true" desc:"client key file"`
	CAFile   string `split_words:"true" desc:"CA bundle file"`
}

// Stream shapes the JetStream stream and consumers.
type Stream struct {
	MaxAge       time.Duration `split_words:"true" default:"168h" desc:"how long session events are kept for replay"`
	Replicas     int           `split_words:"true" default:"1" desc:"stream replicas (3 on a NATS cluster)"`
	AckWait      time.Duration `split_words:"true" default:"30s" desc:"redelivery delay for an unacked event"`
	MaxDeliver   int           `split_words:"true" default:"5" desc:"deliveries before an event is dead-lettered"`
	Concurrency  int           `split_words:"true" default:"4" desc:"events one replica handles at once per consumer"`
	DrainTimeout time.Duration `split_words:"true" default:"20s" desc:"grace for in-flight events on SIGTERM"`
}

// Redis is where session state lives. An empty URL means "run an embedded
// Redis-compatible server" for `ralph up` and `ralph run`.
type Redis struct {
	URL string        `split_words:"true" secret:"url" desc:"redis:// URL; empty runs an embedded server (up, run, demo)"`
	TTL time.Duration `split_words:"true" default:"168h" desc:"lifetime of a session's keys after their last write"`
}

// LLM is the default endpoint every role uses unless it has its own.
type LLM struct {
	BaseURL    string        `split_words:"true" desc:"OpenAI-compatible base URL (falls back to OPENAI_BASE_URL)"`
	APIKey     string        `split_words:"true" secret:"true" desc:"API key (falls back to OPENAI_API_KEY)"`
	Timeout    time.Duration `split_words:"true" default:"120s" desc:"per-call timeout"`
	MaxRetries int           `split_words:"true" default:"3" desc:"retries on 429/5xx, honouring Retry-After"`
}

// Role is one role's model and optional own endpoint.
type Role struct {
	Model   string `split_words:"true" default:"gpt-4o-mini" desc:"model name"`
	BaseURL string `split_words:"true" desc:"own base URL (default: RALPH_LLM_BASE_URL)"`
	APIKey  string `split_words:"true" secret:"true" desc:"own API key (default: RALPH_LLM_API_KEY)"`
}

// Builder configures the loop.
type Builder struct {
	Role
	MaxTurnsPerTask   int           `split_words:"true" default:"30" desc:"iterations one task may take"`
	MaxIterations     int           `split_words:"true" default:"200" desc:"iterations one session may take"`
	MaxTotalTokens    int           `split_words:"true" default:"2000000" desc:"LLM tokens (in+out) one session may spend"`
	ShellTimeout      time.Duration `split_words:"true" default:"120s" desc:"default timeout of the run tool"`
	OutputCap         int           `split_words:"true" default:"262144" desc:"bytes of a command's output kept"`
	InlineOutputBytes int           `split_words:"true" default:"16384" desc:"larger tool outputs enter the context as an artifact pointer"`
	ContextWindow     int           `split_words:"true" default:"128000" desc:"the builder model's context window in tokens"`
	MaxTokens         int           `split_words:"true" default:"4096" desc:"max output tokens per builder call"`
}

// Critic configures reviews.
type Critic struct {
	Role
	VerifyTimeout time.Duration `split_words:"true" default:"300s" desc:"timeout of a task's verify command"`
}

// Stuck configures the stuck detector.
type Stuck struct {
	Window              int     `split_words:"true" default:"8" desc:"iterations of a task kept in the detection window"`
	RepeatThreshold     int     `split_words:"true" default:"3" desc:"identical outputs, calls or failures that make a loop"`
	SimilarityThreshold float64 `split_words:"true" default:"0.9" desc:"text similarity at which two responses count as the same"`
	NoProgressSpan      int     `split_words:"true" default:"5" desc:"iterations in a row without progress before no_progress fires"`
	AlternatingSteps    int     `split_words:"true" default:"4" desc:"trailing A/B/A/B steps that make a ping-pong"`
	MonologueTurns      int     `split_words:"true" default:"3" desc:"consecutive turns without tool calls that make a monologue"`
	MonologueNovelty    float64 `split_words:"true" default:"0.34" desc:"largest share of new words for a turn to count as a restatement"`
	ChantRepeats        int     `split_words:"true" default:"3" desc:"times one sentence must recur to be chanting"`
	ChantMinWords       int     `split_words:"true" default:"8" desc:"shortest sentence that counts for chanting"`
	CompactionRepeats   int     `split_words:"true" default:"2" desc:"compactions with no progress between them that make a compaction loop"`
}

// Compaction configures the compaction orchestrator (builder) and planner
// (summarizer). The planner's finer knobs keep their defaults.
type Compaction struct {
	Mode                 string        `split_words:"true" default:"tiered_adaptive" desc:"off, legacy (one summary of everything), tiered or tiered_adaptive"`
	PressureRatio        float64       `split_words:"true" default:"0.70" desc:"share of the builder's context window at which it asks for compaction"`
	CriticalRatio        float64       `split_words:"true" default:"0.90" desc:"share at which protected lanes may be compacted as a last resort"`
	TargetRatio          float64       `split_words:"true" default:"0.50" desc:"share of the window a compaction aims for"`
	RecentTurns          int           `split_words:"true" default:"2" desc:"units used in this many recent turns stay raw"`
	MaxCallsPerIteration int           `split_words:"true" default:"4" desc:"compactor LLM calls one iteration may spend"`
	MinGainTokens        int           `split_words:"true" default:"150" desc:"a compactor call saving fewer tokens is skipped (no_gain); a quarter of it for pointers"`
	CooldownIterations   int           `split_words:"true" default:"3" desc:"iterations a label rests after repeated overshoot"`
	MaxSummaryTokens     int           `split_words:"true" default:"2000" desc:"bound of a checkpoint summary"`
	CacheTTL             time.Duration `split_words:"true" default:"24h" desc:"lifetime of cached compaction results"`
	Advisor              bool          `split_words:"true" default:"false" desc:"let the summarizer model rank near-tied candidates"`
	AdvisorTimeout       time.Duration `split_words:"true" default:"5s" desc:"how long the advisor may take"`
	AdvisorEpsilon       float64       `split_words:"true" default:"0.05" desc:"relative score gap within which candidates count as tied"`
	AdvisorTopK          int           `split_words:"true" default:"4" desc:"most tied candidates the advisor may reorder (below 2: never asked)"`
	OvershootLimit       int           `split_words:"true" default:"2" desc:"consecutive outputs over their target that start a cooldown"`
	MinFeasibleRatio     float64       `split_words:"true" default:"0.05" desc:"smallest output/input ratio believed achievable before any is realised"`
	MaxUsefulRatio       float64       `split_words:"true" default:"0.80" desc:"a call expected to keep more than this share is not made (unachievable_ratio)"`
	MinTargetShare       float64       `split_words:"true" default:"0.25" desc:"calls must cover this share of the way to an unreachable target or are not made"`
	MaxOutputTokens      int           `split_words:"true" default:"1024" desc:"largest output one compactor call is asked for"`
	PointerTokens        int           `split_words:"true" default:"60" desc:"size of a pointer with its digest"`
	CheckpointOverhead   int           `split_words:"true" default:"120" desc:"tokens a checkpoint costs whatever it merges (headings, facts)"`
	SummaryPrompt        string        `split_words:"true" desc:"system prompt of checkpoint summaries (default: ADR-003's four sections); changing it invalidates cached results"`
}

// Pruner configures the context pruner.
type Pruner struct {
	Role
	MaxPrunedTokens int `split_words:"true" default:"8000" desc:"token bound of a pruned context (protected units are kept whole even beyond it)"`
	ChunkTokens     int `split_words:"true" default:"6000" desc:"removed context is summarised in chunks of whole units of about this many tokens"`
	NoteTokens      int `split_words:"true" default:"600" desc:"max output tokens of the note on what was removed"`
}

// Decomposer configures task decomposition.
type Decomposer struct {
	Role
	MaxSubtasks int `split_words:"true" default:"4" desc:"most subtasks one decomposition may create (at least 2)"`
	MaxDepth    int `split_words:"true" default:"2" desc:"subtasks at this depth are not decomposed again"`
}

// Up configures the embedded servers of `ralph up`.
type Up struct {
	NATSPort  int    `split_words:"true" default:"4222" desc:"port of the embedded NATS server (-1: random)"`
	RedisAddr string `split_words:"true" default:"127.0.0.1:6380" desc:"address of the embedded Redis-compatible server"`
	StoreDir  string `split_words:"true" desc:"JetStream directory of the embedded server (default: a temp dir)"`
}

// RunCommand configures `ralph run`.
type RunCommand struct {
	Timeout time.Duration `split_words:"true" default:"2h" desc:"how long run follows a session before giving up"`
}

// Load reads the environment.
func Load() (Config, error) {
	var c Config
	if err := envconfig.Process(EnvPrefix, &c); err != nil {
		return Config{}, fmt.Errorf("read configuration: %w", err)
	}
	if c.LLM.BaseURL == "" {
		c.LLM.BaseURL = os.Getenv("OPENAI_BASE_URL")
	}
	if c.LLM.APIKey == "" {
		c.LLM.APIKey = os.Getenv("OPENAI_API_KEY")
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Defaults is the configuration with every setting at its default,
// whatever the environment holds (for tests and docs).
func Defaults() (Config, error) {
	var c Config
	// No environment variable carries this prefix, so only defaults apply.
	if err := envconfig.Process("RALPH_DEFAULTS_ONLY_NOT_SET", &c); err != nil {
		return Config{}, fmt.Errorf("default configuration: %w", err)
	}
	return c, nil
}

// Validate checks values envconfig cannot.
func (c Config) Validate() error {
	switch {
	case c.Prefix == "" || strings.ContainsAny(c.Prefix, " .*>:{}"):
		return fmt.Errorf("RALPH_PREFIX: %q must be a non-empty word without dots, spaces, wildcards, ':' or braces", c.Prefix)
	case c.Stream.MaxDeliver < 1:
		return fmt.Errorf("RALPH_STREAM_MAX_DELIVER: must be >= 1")
	case c.Builder.MaxTurnsPerTask < 1 || c.Builder.MaxIterations < 1 || c.Builder.MaxTotalTokens < 1:
		return fmt.Errorf("RALPH_BUILDER_MAX_*: limits must be >= 1")
	case c.Stuck.Window < 2:
		return fmt.Errorf("RALPH_STUCK_WINDOW: must be >= 2")
	case c.Decomposer.MaxSubtasks < 2:
		return fmt.Errorf("RALPH_DECOMPOSER_MAX_SUBTASKS: must be >= 2 (one subtask is the task again), got %d", c.Decomposer.MaxSubtasks)
	case c.Decomposer.MaxDepth < 0:
		return fmt.Errorf("RALPH_DECOMPOSER_MAX_DEPTH: must be >= 0, got %d", c.Decomposer.MaxDepth)
	case c.Pruner.MaxPrunedTokens < 1 || c.Pruner.ChunkTokens < 1 || c.Pruner.NoteTokens < 1:
		return fmt.Errorf("RALPH_PRUNER_*_TOKENS: must be >= 1")
	case !slices.Contains([]string{"off", "legacy", "tiered", "tiered_adaptive"}, c.Compaction.Mode):
		return fmt.Errorf("RALPH_COMPACTION_MODE: %q is not one of off, legacy, tiered, tiered_adaptive", c.Compaction.Mode)
	case !(0 < c.Compaction.TargetRatio && c.Compaction.TargetRatio < c.Compaction.PressureRatio &&
		c.Compaction.PressureRatio <= c.Compaction.CriticalRatio && c.Compaction.CriticalRatio <= 1):
		return fmt.Errorf("RALPH_COMPACTION_*_RATIO: want 0 < target (%v) < pressure (%v) <= critical (%v) <= 1",
			c.Compaction.TargetRatio, c.Compaction.PressureRatio, c.Compaction.CriticalRatio)
	case c.Builder.ContextWindow < 1:
		return fmt.Errorf("RALPH_BUILDER_CONTEXT_WINDOW: must be >= 1")
	}
	return nil
}

// Endpoint resolves a role's endpoint from its own settings and the defaults.
func (c Config) Endpoint(r Role) (baseURL, apiKey, model string) {
	baseURL, apiKey = r.BaseURL, r.APIKey
	if baseURL == "" {
		baseURL = c.LLM.BaseURL
	}
	if apiKey == "" {
		apiKey = c.LLM.APIKey
	}
	return baseURL, apiKey, r.Model
}

// Print writes every setting with its default and current value; secrets
// are masked.
func Print(w io.Writer, c Config) error {
	tmpl, err := template.New("config").Funcs(template.FuncMap{"show": show}).Parse(
		`{{range .}}{{.Key}}	{{or (.Tags.Get "default") "-"}}	{{show (.Tags.Get "secret") .Field}}	{{.Tags.Get "desc"}}
{{end}}`)
	if err != nil {
		return fmt.Errorf("print configuration: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tDEFAULT\tCURRENT\tMEANING")
	if err := envconfig.Usaget(EnvPrefix, &c, tw, tmpl); err != nil {
		return fmt.Errorf("print configuration: %w", err)
	}
	return tw.Flush()
}

func show(secret string, v reflect.Value) string {
	s := fmt.Sprint(v.Interface())
	switch {
	case s == "":
		return "-"
	case secret == "true":
		return "****"
	case secret == "url":
		if u, err := url.Parse(s); err == nil {
			return u.Redacted()
		}
	}
	return s
}

// CompactAt is the context size at which the builder asks for compaction,
// 0 when compaction is off.
func (c Config) CompactAt() int {
	if c.Compaction.Mode == "off" {
		return 0
	}
	return int(c.Compaction.PressureRatio * float64(c.Builder.ContextWindow))
}
