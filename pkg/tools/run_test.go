package tools

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/sandboxtest"
	"github.com/ralphmesh/ralph/pkg/sandbox"
)

// bothModes runs f unconfined and, where bubblewrap works (always in CI),
// in the sandbox: the run tool must behave the same in both.
func bothModes(t *testing.T, f func(t *testing.T, sb *sandbox.Sandbox)) {
	t.Run("unconfined", func(t *testing.T) { f(t, sandbox.Unconfined()) })
	t.Run("bwrap", func(t *testing.T) {
		sandboxtest.Require(t)
		f(t, sandboxtest.New(t, sandbox.DefaultConfig()))
	})
}

func TestRunOutputAndExitCode(t *testing.T) {
	bothModes(t, func(t *testing.T, sb *sandbox.Sandbox) {
		e, w, _ := newExec(t, Options{Sandbox: sb})

		res := call(t, e, "run", map[string]any{"command": "echo out; echo err >&2; exit 3"})
		if res.Error != "" || res.TimedOut || res.ExitCode != 3 {
			t.Errorf("%+v", res)
		}
		if res.Output != "out\nerr\n" {
			t.Errorf("output %q", res.Output)
		}
		if res.FilesChanged != nil {
			t.Errorf("FilesChanged %v", res.FilesChanged)
		}

		res = call(t, e, "run", map[string]any{"command": "pwd; echo made > made.txt"})
		wantOK(t, res)
		if strings.TrimSpace(res.Output) != w.Root() || res.ExitCode != 0 {
			t.Errorf("%+v", res)
		}
		if readFile(t, filepath.Join(w.Root(), "made.txt")) != "made\n" {
			t.Error("command did not run in the workspace root")
		}

		wantError(t, call(t, e, "run", map[string]any{"command": "  "}), "run", `"command"`)
		wantError(t, call(t, e, "run", map[string]any{"command": "true", "timeout_seconds": 0}), "run", "timeout_seconds")
		wantError(t, call(t, e, "run", map[string]any{"command": "true", "timeout_seconds": "5"}), "run", "timeout_seconds", "number")
	})
}

func TestRunTimeoutKillsEverything(t *testing.T) {
	bothModes(t, func(t *testing.T, sb *sandbox.Sandbox) {
		e, _, _ := newExec(t, Options{Sandbox: sb})
		bg, fg := marker(), marker()
		// The background sleep shares the pipe; if only the shell were
		// killed, the call would hang until it exited.
		res := call(t, e, "run", map[string]any{
			"command":         "sleep " + bg + " & echo started; sleep " + fg,
			"timeout_seconds": 1,
		})
		if !res.TimedOut || res.Error != "command timed out after 1s" || res.ExitCode != -1 {
			t.Fatalf("%+v", res)
		}
		if res.Output != "started\n" {
			t.Errorf("output %q", res.Output)
		}
		waitNoProcess(t, bg)
		waitNoProcess(t, fg)
	})
}

func TestRunBackgroundJobDoesNotOutliveCall(t *testing.T) {
	bothModes(t, func(t *testing.T, sb *sandbox.Sandbox) {
		e, _, _ := newExec(t, Options{Sandbox: sb})
		bg := marker()
		res := call(t, e, "run", map[string]any{"command": "sleep " + bg + " & echo hi"})
		wantOK(t, res)
		if res.Output != "hi\n" || res.ExitCode != 0 || res.TimedOut {
			t.Errorf("%+v", res)
		}
		waitNoProcess(t, bg)
	})
}

func TestRunTimeoutIsCapped(t *testing.T) {
	bothModes(t, func(t *testing.T, sb *sandbox.Sandbox) {
		e, _, _ := newExec(t, Options{ShellTimeout: 250 * time.Millisecond, Sandbox: sb})
		res := call(t, e, "run", map[string]any{"command": "sleep 30", "timeout_seconds": 3600})
		if !res.TimedOut || res.Error != "command timed out after 1s" {
			t.Errorf("%+v", res)
		}
	})
}

func TestRunOutputCap(t *testing.T) {
	bothModes(t, func(t *testing.T, sb *sandbox.Sandbox) {
		e, _, _ := newExec(t, Options{OutputCap: 100, Sandbox: sb})
		res := call(t, e, "run", map[string]any{"command": "head -c 1000 /dev/zero | tr '\\0' a"})
		wantOK(t, res)
		want := strings.Repeat("a", 100) + "\n[output exceeded 100 bytes; 900 more bytes were discarded]"
		if res.Output != want {
			t.Errorf("got %q", res.Output)
		}
	})
}

func TestCappedBufferKeepsWholeRunes(t *testing.T) {
	c := &cappedBuffer{limit: 4}
	_, _ = c.Write([]byte("abcé!")) // é is two bytes and straddles the limit
	want := "abc\n[output exceeded 4 bytes; 3 more bytes were discarded]"
	if got := c.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRunEnvironment(t *testing.T) {
	bothModes(t, func(t *testing.T, sb *sandbox.Sandbox) {
		t.Setenv("RALPH_LLM_API_KEY", "sekrit")
		t.Setenv("OPENAI_API_KEY", "sk-sekrit")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-sekrit")
		t.Setenv("GOFLAGS", "-mod=mod")
		t.Setenv("GOCACHE", "/root/.cache/go-build")
		e, _, _ := newExec(t, Options{Env: []string{"RALPH_TASK=T-1", "GOFLAGS=-count=1"}, Sandbox: sb})

		res := call(t, e, "run", map[string]any{"command": "env"})
		wantOK(t, res)
		if strings.Contains(res.Output, "sekrit") || strings.Contains(res.Output, "API_KEY") || strings.Contains(res.Output, "AWS_") {
			t.Errorf("secret visible to the command:\n%s", res.Output)
		}
		lines := strings.Split(res.Output, "\n")
		for _, want := range []string{"RALPH_TASK=T-1", "GOFLAGS=-count=1"} {
			if !contains(lines, want) {
				t.Errorf("%s missing from:\n%s", want, res.Output)
			}
		}
		if contains(lines, "GOFLAGS=-mod=mod") {
			t.Error("Options.Env did not override the inherited value")
		}
		if path := os.Getenv("PATH"); path != "" && !contains(lines, "PATH="+path) {
			t.Errorf("PATH not inherited:\n%s", res.Output)
		}
		// In the sandbox the service's directories do not exist: HOME and
		// TMPDIR are the sandbox's own, and a cache path of the host is
		// not passed on.
		if sb.Confined() {
			for _, want := range []string{"HOME=" + sandbox.Home, "TMPDIR=/tmp"} {
				if !contains(lines, want) {
					t.Errorf("%s missing from:\n%s", want, res.Output)
				}
			}
			if strings.Contains(res.Output, "GOCACHE=") {
				t.Errorf("the host's GOCACHE was passed into the sandbox:\n%s", res.Output)
			}
		}
	})
}

func TestRunContextCancel(t *testing.T) {
	bothModes(t, func(t *testing.T, sb *sandbox.Sandbox) {
		e, w, _ := newExec(t, Options{Sandbox: sb})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		var res Result
		var err error
		bg := marker()
		go func() {
			defer close(done)
			res, err = e.Execute(ctx, "run", `{"command":"sleep `+bg+` & echo started > started; sleep 30"}`)
		}()
		// Cancel once the command is demonstrably running.
		waitForFile(t, filepath.Join(w.Root(), "started"))
		cancel()
		<-done
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled (result %+v)", err, res)
		}
		waitNoProcess(t, bg)
	})
}

func TestRunShellMissing(t *testing.T) {
	bothModes(t, func(t *testing.T, sb *sandbox.Sandbox) {
		e, _, _ := newExec(t, Options{Shell: "/no/such/shell", Sandbox: sb})
		wantError(t, call(t, e, "run", map[string]any{"command": "true"}), "run", "/no/such/shell")
	})
}

// marker is a sleep duration no other process has: 300 seconds and a
// random fraction, so a process can be found on the host by its arguments.
func marker() string {
	return fmt.Sprintf("300.%09d", rand.IntN(1e9))
}

// processesWith lists the host processes whose command line contains s.
// A zombie has an empty command line, so it does not count: whether it is
// reaped depends on the container's init, not on us.
func processesWith(t *testing.T, s string) []string {
	t.Helper()
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("skipped: no /proc to inspect processes")
	}
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), s) {
			continue
		}
		found = append(found, filepath.Base(d)+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}

// noProcess fails when a host process still has s in its command line.
func noProcess(t *testing.T, s string) {
	t.Helper()
	if ps := processesWith(t, s); len(ps) > 0 {
		t.Fatalf("still running after the call:\n%s", strings.Join(ps, "\n"))
	}
}

// waitNoProcess waits, generously, until no host process has s in its
// command line (an unconfined command's group is killed asynchronously).
func waitNoProcess(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ps := processesWith(t, s)
		if len(ps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running:\n%s", strings.Join(ps, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}
