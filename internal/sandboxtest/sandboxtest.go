// Package sandboxtest gives tests a working command sandbox (pkg/sandbox
// in mode bwrap, probed). Where bubblewrap cannot run, a test that needs it
// is skipped with one line saying why, except in CI (CI=true), where the
// test command installs bubblewrap and its absence is a failure.
package sandboxtest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/sandbox"
)

var (
	once  sync.Once
	probe error
)

// Usable is nil when bwrap works here, else why not. It probes once per
// test binary.
func Usable() error {
	once.Do(func() {
		s, err := sandbox.New(sandbox.DefaultConfig())
		if err != nil {
			probe = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		probe = s.Probe(ctx)
	})
	return probe
}

// InCI reports whether the tests run in CI, where nothing may be skipped
// for want of bubblewrap.
func InCI() bool { return os.Getenv("CI") == "true" }

// Available reports whether bwrap works here, or fails the test in CI
// when it does not.
func Available(t testing.TB) bool {
	t.Helper()
	err := Usable()
	if err != nil && InCI() {
		t.Fatalf("CI=true but the command sandbox does not work: %v", err)
	}
	return err == nil
}

// Require skips the test, in one line, when bwrap does not work here and
// this is not CI; in CI it fails the test.
func Require(t testing.TB) {
	t.Helper()
	if !Available(t) {
		t.Skipf("skipped: bubblewrap does not work here (%v); CI (CI=true) runs this test", Usable())
	}
}

// New is a probed sandbox built from c (mode bwrap unless c says
// otherwise), for a test that called Require.
func New(t testing.TB, c sandbox.Config) *sandbox.Sandbox {
	t.Helper()
	s, err := sandbox.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}
