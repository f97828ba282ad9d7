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
	Pruner     Role       `split_words:"true"`
	Decomposer Role       `split_words:"true"`
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
	Window              int     `split_words:"true" default:"5" desc:"iterations in the detection window"`
	RepeatThreshold     int     `split_words:"true" default:"3" desc:"repeats that count as a loop"`
	SimilarityThreshold float64 `split_words:"true" default:"0.9" desc:"text similarity that counts as a repeat"`
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
