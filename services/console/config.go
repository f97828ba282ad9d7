package console

import (
	"net"
	"time"

	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/services/console/web"
)

// Config is the console's: where its HTTP API (and web page) listens.
// Its tags are the one home of these defaults (RALPH_CONSOLE_*, through
// pkg/config).
type Config struct {
	Addr string `split_words:"true" default:"127.0.0.1:8470" desc:"host:port the console serves its HTTP API and web page on (ralph service console, ralph up); empty serves none; ':8470' in a container"`
	// KeepAlive is how often an idle event stream says it is alive, so
	// that proxies and browsers keep it open.
	KeepAlive time.Duration `split_words:"true" default:"15s" desc:"how often an idle server-sent event stream of the API sends a keepalive comment"`
	// The web page's own settings (RALPH_CONSOLE_PRICES).
	web.Config
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings the console cannot serve with.
func (c Config) Validate() error {
	_, _, err := net.SplitHostPort(c.Addr)
	return settings.Join(
		settings.Check(c.Addr == "" || err == nil, "Addr", c.Addr, "not a host:port (127.0.0.1:0 picks a free port)"),
		settings.Check(c.KeepAlive > 0, "KeepAlive", c.KeepAlive, "must be positive"),
		c.Config.Validate(),
	)
}
