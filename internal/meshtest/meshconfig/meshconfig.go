// Package meshconfig gives tests a configuration for the test environment
// of internal/meshtest. It is its own package because pkg/config imports
// every service's Config, so the services' own tests, which use meshtest,
// cannot import it through meshtest.
package meshconfig

import (
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/internal/sandboxtest"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/sandbox"
)

// New is a configuration for the test environment with a fresh prefix
// and short timings, so redelivery tests do not wait 30 s, and memory off. Commands run in
// the sandbox wherever bubblewrap works, and always in CI.
func New(t testing.TB) config.Config {
	t.Helper()
	cfg, err := config.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Prefix = meshtest.Prefix(t)
	cfg.NATS.URL = meshtest.NATSURL(t)
	cfg.Redis.URL = meshtest.RedisURL(t)
	cfg.Stream.AckWait = 3 * time.Second
	cfg.Stream.DrainTimeout = 5 * time.Second
	cfg.LLM.Timeout = 20 * time.Second
	cfg.LLM.MaxRetries = 2
	// Any free port: tests (and test binaries) run side by side.
	cfg.Console.Addr = "127.0.0.1:0"
	// A test about something else should not see a memory unit whose
	// content depends on which service ran first; memory's own tests turn
	// it on.
	cfg.Memory.Memory = memory.Off
	if !sandboxtest.Available(t) {
		// No bubblewrap here and not CI: the tests about other things run
		// their commands unconfined; the sandbox's own tests skip.
		cfg.Sandbox.Mode = sandbox.ModeNone
	}
	return cfg
}
