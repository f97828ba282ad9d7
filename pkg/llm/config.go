package llm

import (
	"fmt"
	"net/url"
	"time"

	"github.com/ralphmesh/ralph/pkg/settings"
)

// Config is how every role's calls are made, and the endpoint a role uses
// unless it has its own. Its tags are the one home of these defaults
// (RALPH_LLM_*, through pkg/config).
type Config struct {
	BaseURL string `split_words:"true" desc:"OpenAI-compatible base URL (falls back to OPENAI_BASE_URL)"`
	APIKey  string `split_words:"true" secret:"true" desc:"API key (falls back to OPENAI_API_KEY)"`
	// Timeout bounds each attempt of a call, the reply included.
	Timeout time.Duration `split_words:"true" default:"120s" desc:"timeout of one request to the model, reply included (waits between retries come on top)"`
	// MaxRetries is how many extra attempts a retryable failure without
	// Retry-After gets.
	MaxRetries int `split_words:"true" default:"3" desc:"retries on 429/5xx, timeouts excepted, and on replies that are not JSON (0: no retries at all)"`
	// MaxBackoff caps the client's own wait between attempts.
	MaxBackoff time.Duration `split_words:"true" default:"30s" desc:"longest wait between retries when the server does not say how long (Retry-After)"`
	// MaxRetryWait bounds what servers ask for with Retry-After, over one
	// call: it is waited for as asked until the waits add up to this.
	MaxRetryWait time.Duration `split_words:"true" default:"5m" desc:"longest total wait for a server that asks to retry later (Retry-After) before the call fails"`
}

// RoleConfig is one role's model and optional own endpoint (RALPH_BUILDER_*,
// RALPH_CRITIC_*... through pkg/config).
type RoleConfig struct {
	Model   string `split_words:"true" default:"gpt-4o-mini" desc:"model name"`
	BaseURL string `split_words:"true" desc:"own base URL (default: RALPH_LLM_BASE_URL)"`
	APIKey  string `split_words:"true" secret:"true" desc:"own API key (default: RALPH_LLM_API_KEY)"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings no call could be made with.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.BaseURL == "" || absoluteHTTP(c.BaseURL), "BaseURL", c.BaseURL, "not an absolute http(s) URL"),
		settings.Check(c.Timeout > 0, "Timeout", c.Timeout, "must be positive"),
		settings.Check(c.MaxBackoff > 0, "MaxBackoff", c.MaxBackoff, "must be positive"),
		settings.Check(c.MaxRetryWait > 0, "MaxRetryWait", c.MaxRetryWait, "must be positive"),
	)
}

// Validate rejects a role without a model or with an unusable base URL.
func (r RoleConfig) Validate() error {
	return settings.Join(
		settings.Check(r.Model != "", "Model", r.Model, "must not be empty"),
		settings.Check(r.BaseURL == "" || absoluteHTTP(r.BaseURL), "BaseURL", r.BaseURL, "not an absolute http(s) URL"),
	)
}

// Endpoint is role r's endpoint: its own base URL and key where it has
// them, c's otherwise. The endpoint may still lack a base URL.
func (c Config) Endpoint(r RoleConfig) Endpoint {
	ep := Endpoint{BaseURL: r.BaseURL, APIKey: r.APIKey, Model: r.Model,
		Timeout: c.Timeout, MaxRetries: c.MaxRetries, MaxBackoff: c.MaxBackoff, MaxRetryWait: c.MaxRetryWait}
	if ep.BaseURL == "" {
		ep.BaseURL = c.BaseURL
	}
	if ep.APIKey == "" {
		ep.APIKey = c.APIKey
	}
	// A loaded Config holds what the operator chose, so zero retries means
	// none; Endpoint reserves zero for "the default".
	if ep.MaxRetries == 0 {
		ep.MaxRetries = -1
	}
	return ep
}

func absoluteHTTP(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// checkBaseURL is New's check of an endpoint's base URL.
func checkBaseURL(role Role, s string) error {
	if !absoluteHTTP(s) {
		return fmt.Errorf("llm %s: new client: endpoint BaseURL %q is not an absolute http(s) URL", role, s)
	}
	return nil
}
