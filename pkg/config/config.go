// Package config owns reading Ralph mesh's settings: it nests the Config
// struct of every package that has knobs (each the one home of its
// defaults, in its envconfig tags), reads them from RALPH_* environment
// variables with envconfig, applies the OPENAI_* fallbacks docs/REFERENCE.md
// promises, validates everything once with messages that name the
// variable, warns about RALPH_* variables that are no setting, and prints
// the table `ralph config` shows. Its own settings are only those that
// belong to no package: the prefix, the log level and format, the metrics address, how
// to reach NATS and Redis, and the commands' own.
package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"

	"github.com/kelseyhightower/envconfig"
	"go.uber.org/zap/zapcore"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/sandbox"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/teams"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/console"
	"github.com/ralphmesh/ralph/services/critic"
	"github.com/ralphmesh/ralph/services/decomposer"
	"github.com/ralphmesh/ralph/services/pruner"
	"github.com/ralphmesh/ralph/services/stuckdetector"
	"github.com/ralphmesh/ralph/services/summarizer"
)

// EnvPrefix is the prefix of every setting.
const EnvPrefix = "RALPH"

// Config is every setting of every service.
type Config struct {
	Prefix   string `split_words:"true" default:"ralph" desc:"subject prefix, stream name and Redis key namespace"`
	LogLevel string `split_words:"true" default:"info" desc:"debug, info, warn or error"`
	// LogFormat is how lines are written to stderr: for people at a
	// terminal, or one JSON object per line for a log collector.
	LogFormat string `split_words:"true" default:"console" desc:"console (for people) or json (one object per line, for log collectors)"`
	// MetricsAddr is where `ralph up` and `ralph service` serve /metrics
	// and the probes, and where `ralph health` asks.
	// Without a port each command picks its own (see MetricsPort), so that
	// several services on one host do not collide.
	MetricsAddr string `split_words:"true" default:"127.0.0.1" desc:"host[:port] of the Prometheus /metrics endpoint and the /healthz and /readyz probes (up, service; ralph health asks there); without a port, up uses 9464 and service NAME its own: builder 9464, critic 9465, stuckdetector 9466, pruner 9467, decomposer 9468, summarizer 9469, console 9470; empty disables it; ':9464' in a container"`

	NATS       NATS                 `split_words:"true"`
	Stream     Stream               `split_words:"true"`
	Redis      Redis                `split_words:"true"`
	LLM        llm.Config           `split_words:"true"`
	Builder    Builder              `split_words:"true"`
	Critic     Critic               `split_words:"true"`
	Sandbox    sandbox.Config       `split_words:"true"`
	Stuck      stuckdetector.Config `split_words:"true"`
	Summarizer Role                 `split_words:"true"`
	Compaction summarizer.Config    `split_words:"true"`
	Pruner     Pruner               `split_words:"true"`
	Decomposer Decomposer           `split_words:"true"`
	Up         Up                   `split_words:"true"`
	Run        RunCommand           `split_words:"true"`
	// PRD bounds the PRDs `ralph run` and `ralph demo` start sessions from.
	PRD prd.Config `split_words:"true"`
	// Git is how sessions commit their work (the builder) and read a
	// task's diff (the critic).
	Git gitwork.Config `split_words:"true"`
	// Team is the team of the commands' sessions: what ralph run starts,
	// and what ralph sessions, status, watch, cancel and resume may see
	// and touch.
	Team string `split_words:"true" default:"default" desc:"the team the commands act as: the sessions they start are its, and they see and touch only its sessions (a NATS user of the team, docs/nats-permissions.md, enforces it)"`
	// Teams are the per-team limits.
	Teams teams.Config `split_words:"true"`
	// API is the console's HTTP API's.
	API API `split_words:"true"`
	// Console is where the console serves the API.
	Console console.Config `split_words:"true"`
	// Memory is embedded, not nested under a name, so that its switch is
	// RALPH_MEMORY itself and its other settings RALPH_MEMORY_*.
	Memory
}

// API configures who may use the console's HTTP API.
type API struct {
	TokensFile string `split_words:"true" desc:"YAML file of the HTTP API's bearer tokens, 'TOKEN: TEAM' per line (tokens of 16 characters or more); without it every API call is refused (401)"`
}

// Memory is the session memory's settings (pkg/memory).
type Memory = memory.Config

// NATS is how to reach the bus. An empty URL means "run an embedded server"
// for `ralph up` and `ralph run`.
type NATS struct {
	URL      string `split_words:"true" secret:"url" desc:"nats:// URL (or several, comma-separated); empty runs an embedded JetStream server (up, run, demo)"`
	User     string `split_words:"true" desc:"user name"`
	Password string `split_words:"true" secret:"true" desc:"password"`
	Token    string `split_words:"true" secret:"true" desc:"auth token"`
	Creds    string `split_words:"true" desc:"path to a .creds file"`
	Nkey     string `split_words:"true" desc:"path to an nkey seed file"`
	TLSCert  string `split_words:"true" desc:"client certificate file"`
	TLSKey   string `split_words:"true" desc:"client key file"`
	CAFile   string `split_words:"true" desc:"CA bundle file"`
}

// Stream is the JetStream stream's shape and every service's consumers'.
type Stream struct {
	bus.StreamConfig
	bus.RunOptions
}

// Redis is where session state lives. An empty URL means "run an embedded
// Redis-compatible server" for `ralph up` and `ralph run`.
type Redis struct {
	URL string `split_words:"true" secret:"url" desc:"redis:// or rediss:// (one server), redis+cluster://HOST:PORT[,HOST:PORT...] (a Redis Cluster), or redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER (Sentinel); empty runs an embedded server (up, run, demo)"`
	// SentinelPassword is the sentinels' own password; the URL's is the
	// Redis servers'.
	SentinelPassword string `split_words:"true" secret:"true" desc:"password of the sentinels themselves, when they require one (redis+sentinel:// URLs)"`
	store.Config
}

// Role is one role's model and optional own endpoint.
type Role = llm.RoleConfig

// Builder is the builder's model and its own settings.
type Builder struct {
	Role
	builder.Config
}

// Critic is the critic's model and its own settings.
type Critic struct {
	Role
	critic.Config
}

// Pruner is the pruner's model and its own settings.
type Pruner struct {
	Role
	pruner.Config
}

// Decomposer is the decomposer's model and its own settings.
type Decomposer struct {
	Role
	decomposer.Config
}

// Up configures the embedded servers of `ralph up`.
type Up struct {
	NATSPort  int    `split_words:"true" default:"4222" desc:"port of the embedded NATS server (-1: random)"`
	RedisAddr string `split_words:"true" default:"127.0.0.1:6380" desc:"address of the embedded Redis-compatible server"`
	StoreDir  string `split_words:"true" desc:"JetStream directory of the embedded server (default: a temp dir)"`
}

// RunCommand configures `ralph run` (and the followers like it: resume,
// watch).
type RunCommand struct {
	Timeout time.Duration `split_words:"true" default:"2h" desc:"how long run follows a session before giving up"`
	// StallAfter is how long a stage may leave a session's work waiting
	// with nobody taking it before a follower says so.
	StallAfter time.Duration `split_words:"true" default:"30s" desc:"run, resume and watch say a stage has left work waiting with nobody taking it (is a critic running?) after this long"`
}

// Error is a variable whose value cannot be used. Its text names the
// variable, shows the value (masked where it may hold a secret) and says
// what was expected.
type Error struct {
	Var, Value, Problem string
}

func (e *Error) Error() string { return e.Var + "=" + e.Value + ": " + e.Problem }

// Load reads and validates the environment. Every problem is reported, on
// one line; each is an *Error.
func Load() (Config, error) {
	var c Config
	if err := envconfig.Process(EnvPrefix, &c); err != nil {
		return Config{}, parseError(err)
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

// parseError says what a variable envconfig could not parse should look
// like, instead of strconv's text.
func parseError(err error) error {
	var pe *envconfig.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("read configuration: %w", err)
	}
	var want string
	switch pe.TypeName {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		want = "not a whole number"
	case "float32", "float64":
		want = "not a number"
	case "bool":
		want = "not true or false"
	case "time.Duration":
		want = "not a duration like 30s or 5m"
	default:
		want = pe.Err.Error()
	}
	return &Error{Var: pe.KeyName, Value: pe.Value, Problem: want}
}

// Defaults is the configuration with every setting at its default,
// whatever the environment holds (for tests and docs).
func Defaults() (Config, error) {
	return settings.Defaults[Config](), nil
}

// part is one package's Config within Config, under its variables' prefix.
type part struct {
	prefix string
	ptr    any
	err    error
}

// Validate checks every setting: its own, and each package's through its
// Config.Validate, turning the Go field each names into its variable.
func (c Config) Validate() error {
	errs := c.validateOwn()
	parts := []part{
		{"RALPH_STREAM", &c.Stream, settings.Join(c.Stream.StreamConfig.Validate(), c.Stream.RunOptions.Validate())},
		{"RALPH_REDIS", &c.Redis, c.Redis.Config.Validate()},
		{"RALPH_LLM", &c.LLM, c.LLM.Validate()},
		{"RALPH_BUILDER", &c.Builder, settings.Join(c.Builder.Role.Validate(), c.Builder.Config.Validate())},
		{"RALPH_CRITIC", &c.Critic, settings.Join(c.Critic.Role.Validate(), c.Critic.Config.Validate())},
		{"RALPH_SANDBOX", &c.Sandbox, c.Sandbox.Validate()},
		{"RALPH_STUCK", &c.Stuck, c.Stuck.Validate()},
		{"RALPH_SUMMARIZER", &c.Summarizer, c.Summarizer.Validate()},
		{"RALPH_COMPACTION", &c.Compaction, c.Compaction.Validate()},
		{"RALPH_PRUNER", &c.Pruner, settings.Join(c.Pruner.Role.Validate(), c.Pruner.Config.Validate())},
		{"RALPH_DECOMPOSER", &c.Decomposer, settings.Join(c.Decomposer.Role.Validate(), c.Decomposer.Config.Validate())},
		{"RALPH_PRD", &c.PRD, c.PRD.Validate()},
		{"RALPH_GIT", &c.Git, c.Git.Validate()},
		{"RALPH_TEAMS", &c.Teams, c.Teams.Validate()},
		{"RALPH_CONSOLE", &c.Console, c.Console.Validate()},
		{"RALPH", &c.Memory, c.Memory.Validate()},
	}
	for _, p := range parts {
		if p.err == nil {
			continue
		}
		vars := variables(p.prefix, p.ptr)
		found := false
		settings.Each(p.err, func(inv *settings.Invalid) {
			found = true
			v, ok := vars[inv.Field]
			if !ok {
				errs = append(errs, fmt.Errorf("%s_*: %w", p.prefix, inv))
				return
			}
			errs = append(errs, &Error{Var: v.key, Value: mask(v.secret, fmt.Sprint(inv.Value)), Problem: inv.Reason})
		})
		if !found {
			errs = append(errs, fmt.Errorf("%s_*: %w", p.prefix, p.err))
		}
	}
	return settings.Join(errs...)
}

// validateOwn checks the settings that belong to no package.
func (c Config) validateOwn() []error {
	var errs []error
	bad := func(v, value, problem string) { errs = append(errs, &Error{Var: v, Value: value, Problem: problem}) }
	if c.Prefix == "" || strings.ContainsAny(c.Prefix, " .*>:{}") {
		bad("RALPH_PREFIX", c.Prefix, "must be a non-empty word without dots, spaces, wildcards, ':' or braces")
	}
	if _, err := zapcore.ParseLevel(c.LogLevel); err != nil || c.LogLevel == "" {
		bad("RALPH_LOG_LEVEL", c.LogLevel, "not one of debug, info, warn, error")
	}
	if c.MetricsAddr != "" {
		if _, err := MetricsAddr(c.MetricsAddr, 9464); err != nil {
			bad("RALPH_METRICS_ADDR", c.MetricsAddr, "not a host or host:port")
		}
	}
	if c.NATS.URL != "" && !natsURLs(c.NATS.URL) {
		bad("RALPH_NATS_URL", mask("url", c.NATS.URL), "not a nats:// URL (or a comma-separated list of them)")
	}
	if c.Redis.URL != "" {
		if _, err := store.ParseURL(c.Redis.URL); err != nil {
			bad("RALPH_REDIS_URL", mask("url", c.Redis.URL), "not a Redis URL (redis://, rediss://, redis+cluster:// or redis+sentinel://): "+err.Error())
		}
	}
	if err := events.ValidTeam(c.Team); err != nil {
		bad("RALPH_TEAM", c.Team, "not a team name: 1-32 letters, digits, '_' or '-'")
	}
	if c.LogFormat != "console" && c.LogFormat != "json" {
		bad("RALPH_LOG_FORMAT", c.LogFormat, "not console or json")
	}
	if c.Up.NATSPort < -1 || c.Up.NATSPort > 65535 {
		bad("RALPH_UP_NATS_PORT", strconv.Itoa(c.Up.NATSPort), "not a port (0-65535, or -1 for a random one)")
	}
	if _, _, err := net.SplitHostPort(c.Up.RedisAddr); err != nil {
		bad("RALPH_UP_REDIS_ADDR", c.Up.RedisAddr, "not a host:port")
	}
	if c.Run.StallAfter <= 0 {
		bad("RALPH_RUN_STALL_AFTER", c.Run.StallAfter.String(), "must be positive")
	}
	if c.Memory.Enabled() && c.Memory.MemoryMaxTokens > c.Builder.ContextWindow/4 {
		bad("RALPH_MEMORY_MAX_TOKENS", strconv.Itoa(c.Memory.MemoryMaxTokens),
			fmt.Sprintf("must be at most a quarter of RALPH_BUILDER_CONTEXT_WINDOW (%d): every task's first request holds the memory", c.Builder.ContextWindow))
	}
	if c.Run.Timeout <= 0 {
		bad("RALPH_RUN_TIMEOUT", c.Run.Timeout.String(), "must be positive")
	} else if c.Builder.WatchdogIdle >= c.Run.Timeout {
		bad("RALPH_BUILDER_WATCHDOG_IDLE", c.Builder.WatchdogIdle.String(),
			fmt.Sprintf("must be shorter than RALPH_RUN_TIMEOUT (%s), or `ralph run` gives up on a silent session before the watchdog ends it", c.Run.Timeout))
	}
	return errs
}

// natsURLs accepts what nats.go connects to: one or more comma-separated
// URLs, each nats://, tls://, ws:// or wss://, or a bare host:port.
func natsURLs(s string) bool {
	for _, one := range strings.Split(s, ",") {
		one = strings.TrimSpace(one)
		if !strings.Contains(one, "://") {
			one = "nats://" + one
		}
		u, err := url.Parse(one)
		if err != nil || u.Host == "" {
			return false
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return false
		}
	}
	return true
}

// MetricsAddr is the address to serve /metrics on: addr itself when it has
// a port, else addr's host with port.
func MetricsAddr(addr string, port int) (string, error) {
	if _, p, err := net.SplitHostPort(addr); err == nil {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			return "", fmt.Errorf("metrics address %q: bad port", addr)
		}
		return addr, nil
	}
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	if strings.ContainsAny(host, " /[]") {
		return "", fmt.Errorf("metrics address %q: not a host or host:port", addr)
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// variable is a setting as envconfig names it.
type variable struct{ key, secret string }

// variables maps the Go field names of the struct at ptr to the variables
// envconfig reads them from under prefix: envconfig's own naming, through
// its usage template.
func variables(prefix string, ptr any) map[string]variable {
	var b strings.Builder
	tmpl := template.Must(template.New("vars").Parse(`{{range .}}{{.Name}} {{.Key}} {{.Tags.Get "secret"}}
{{end}}`))
	if err := envconfig.Usaget(prefix, ptr, &b, tmpl); err != nil {
		return nil
	}
	vars := map[string]variable{}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v := variable{key: f[1]}
		if len(f) > 2 {
			v.secret = f[2]
		}
		vars[f[0]] = v
	}
	return vars
}

// Names is every setting's variable, in `ralph config` order.
func Names() []string {
	var c Config
	var b strings.Builder
	tmpl := template.Must(template.New("names").Parse("{{range .}}{{.Key}}\n{{end}}"))
	if err := envconfig.Usaget(EnvPrefix, &c, &b, tmpl); err != nil {
		// The template and the struct are fixed: a failure is a bug that
		// every test of the package meets.
		panic(fmt.Sprintf("config: list settings: %v", err))
	}
	return strings.Fields(b.String())
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
	if s == "" {
		return "-"
	}
	return mask(secret, s)
}

// mask hides a secret value: whole for secret:"true", the password or
// token of each URL for secret:"url" (settings.MaskURL).
func mask(secret, s string) string {
	switch secret {
	case "true":
		return "****"
	case "url":
		return settings.MaskURL(s)
	}
	return s
}

// SecretFiles are the files other settings name that hold secrets: the
// NATS credentials, nkey seed and TLS key. The sandbox hides them from the
// agent's commands.
func (c Config) SecretFiles() []string {
	var files []string
	for _, f := range []string{c.NATS.Creds, c.NATS.Nkey, c.NATS.TLSKey} {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// CompactAt is the context size at which the builder asks for compaction,
// 0 when compaction is off.
func (c Config) CompactAt() int {
	if c.Compaction.Mode == compaction.ModeOff {
		return 0
	}
	return int(c.Compaction.PressureRatio * float64(c.Builder.ContextWindow))
}
