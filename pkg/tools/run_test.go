package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRunOutputAndExitCode(t *testing.T) {
	e, w, _ := newExec(t, Options{})

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
}

func TestRunTimeoutKillsProcessGroup(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	// The background sleep shares the pipe and the group; if only the shell
	// were killed, the call would hang until it exited.
	res := call(t, e, "run", map[string]any{
		"command":         "sleep 30 & echo $! > bg.pid; echo started; sleep 30",
		"timeout_seconds": 1,
	})
	if !res.TimedOut || res.Error != "command timed out after 1s" {
		t.Fatalf("%+v", res)
	}
	if res.Output != "started\n" {
		t.Errorf("output %q", res.Output)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(w.Root(), "bg.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

func TestRunBackgroundJobDoesNotOutliveCall(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	res := call(t, e, "run", map[string]any{"command": "sleep 30 & echo $! > bg.pid; echo hi"})
	wantOK(t, res)
	if res.Output != "hi\n" || res.ExitCode != 0 || res.TimedOut {
		t.Errorf("%+v", res)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(w.Root(), "bg.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

func TestRunTimeoutIsCapped(t *testing.T) {
	e, _, _ := newExec(t, Options{ShellTimeout: 250 * time.Millisecond})
	res := call(t, e, "run", map[string]any{"command": "sleep 30", "timeout_seconds": 3600})
	if !res.TimedOut || res.Error != "command timed out after 1s" {
		t.Errorf("%+v", res)
	}
}

func TestRunOutputCap(t *testing.T) {
	e, _, _ := newExec(t, Options{OutputCap: 100})
	res := call(t, e, "run", map[string]any{"command": "head -c 1000 /dev/zero | tr '\\0' a"})
	wantOK(t, res)
	want := strings.Repeat("a", 100) + "\n[output exceeded 100 bytes; 900 more bytes were discarded]"
	if res.Output != want {
		t.Errorf("got %q", res.Output)
	}
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
	t.Setenv("RALPH_LLM_API_KEY", "sekrit")
	t.Setenv("OPENAI_API_KEY", "sk-sekrit")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-sekrit")
	t.Setenv("GOFLAGS", "-mod=mod")
	e, _, _ := newExec(t, Options{Env: []string{"RALPH_TASK=T-1", "GOFLAGS=-count=1"}})

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
}

func TestRunContextCancel(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var res Result
	var err error
	go func() {
		defer close(done)
		res, err = e.Execute(ctx, "run", `{"command":"sleep 30 & echo $! > bg.pid; echo started; sleep 30"}`)
	}()
	// Cancel once the command is demonstrably running.
	pidFile := filepath.Join(w.Root(), "bg.pid")
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b, _ := os.ReadFile(pidFile); len(b) > 0 && strings.HasSuffix(string(b), "\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled (result %+v)", err, res)
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(readFile(t, pidFile)))
	if perr != nil {
		t.Fatal(perr)
	}
	waitGone(t, pid)
}

func TestRunShellMissing(t *testing.T) {
	e, _, _ := newExec(t, Options{Shell: "/no/such/shell"})
	wantError(t, call(t, e, "run", map[string]any{"command": "true"}), "run", "/no/such/shell")
}

// waitGone waits, generously, until pid no longer runs. A zombie counts as
// gone: whether it is reaped depends on the container's init, not on us.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc to inspect processes")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		// Format: pid (comm) state ...
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running: %s", pid, stat)
		}
		time.Sleep(20 * time.Millisecond)
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
