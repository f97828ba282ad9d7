package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/internal/sandboxtest"
	"github.com/ralphmesh/ralph/pkg/sandbox"
)

func TestProbe(t *testing.T) {
	sandboxtest.Require(t)
	s, err := sandbox.New(sandbox.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := s.Describe(); !strings.HasPrefix(d, "bwrap (") || !strings.Contains(d, "network on") {
		t.Errorf("Describe() = %q", d)
	}
}

// A sandbox that cannot run `true` (here: no system directories to find
// it in) fails the probe with bwrap's own words.
func TestProbeFailsWithBwrapsReason(t *testing.T) {
	sandboxtest.Require(t)
	c := sandbox.DefaultConfig()
	c.ReadOnly = []string{"/nonexistent-ralph-test-dir"}
	s, err := sandbox.New(c)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Probe(context.Background())
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "bwrap: execvp true") {
		t.Fatalf("err = %v, want ErrUnavailable quoting bwrap", err)
	}
}

func TestProbeUnconfined(t *testing.T) {
	if err := sandbox.Unconfined().Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := sandbox.Unconfined().Describe(); !strings.Contains(d, "unconfined") {
		t.Errorf("Describe() = %q", d)
	}
}
