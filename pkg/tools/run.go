package tools

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ralphmesh/ralph/pkg/sandbox"
)

// pipeDrainGrace is how long run keeps reading output after the command
// is gone. Unconfined, a process that left the group (setsid, a double fork
// into a new session) can still hold the pipe, and must not hold the tool
// call hostage; in the sandbox every holder is dead by then.
const pipeDrainGrace = 2 * time.Second

// inheritedEnv lists the parent variables a command may see. Everything else,
// in particular API keys such as RALPH_LLM_API_KEY, OPENAI_API_KEY or AWS_*,
// stays out of reach of model-written commands.
func inheritedEnv() []string {
	return []string{
		"PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR",
		"GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOPROXY",
	}
}

// hostDirEnv are the inherited variables that name the service's own
// directories. The sandbox does not have them (its HOME and TMPDIR are its
// own), so they are left out there and the tools fall back to HOME.
var hostDirEnv = []string{"GOPATH", "GOCACHE", "GOMODCACHE"}

func (e *Executor) commandEnv() []string {
	var env []string
	for _, k := range inheritedEnv() {
		if e.opt.Sandbox.Confined() && slices.Contains(hostDirEnv, k) {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	// exec keeps the last value of a duplicated key, so Options.Env wins.
	return append(env, e.opt.Env...)
}

func (e *Executor) run(ctx context.Context, a args) (Result, error) {
	command := a.str("command", "")
	if strings.TrimSpace(command) == "" {
		return fail("%s: argument \"command\" must not be empty", Run), nil
	}
	timeout := e.opt.ShellTimeout
	if a.has("timeout_seconds") {
		secs := a.number("timeout_seconds", 0)
		if secs <= 0 {
			return fail("%s: argument \"timeout_seconds\" must be positive, got %v", Run, secs), nil
		}
		timeout = min(time.Duration(secs*float64(time.Second)), 4*e.opt.ShellTimeout)
	}
	// Checked here, on the host, because the sandbox would report a
	// missing shell only as bwrap's output.
	if _, err := exec.LookPath(e.opt.Shell); err != nil {
		return fail("%s: starting %s: %v", Run, e.opt.Shell, err), nil
	}

	// A pipe we own, rather than exec's copying goroutine, lets Wait return
	// as soon as the command exits even if a background child still holds
	// the write end.
	r, w, err := os.Pipe()
	if err != nil {
		return fail("%s: creating output pipe: %v", Run, err), nil
	}
	defer r.Close()
	p, err := e.opt.Sandbox.Start(sandbox.Cmd{
		Dir: e.ws.root, Args: []string{e.opt.Shell, "-c", command}, Env: e.commandEnv(), Output: w,
	})
	w.Close() // the child has its copy; ours would keep the pipe open forever
	if err != nil {
		return fail("%s: starting %s: %v", Run, e.opt.Shell, err), nil
	}

	out := &cappedBuffer{limit: e.opt.OutputCap}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(out, r)
	}()
	waitDone := make(chan error, 1)
	go func() { waitDone <- p.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, cancelled bool
	select {
	case <-waitDone:
	case <-timer.C:
		timedOut = true
		p.Kill()
		<-waitDone
	case <-ctx.Done():
		cancelled = true
		p.Kill()
		<-waitDone
	}
	// Background jobs do not outlive the call: they would keep running
	// unsupervised, hold the output pipe and change the workspace after the
	// builder has fingerprinted it. (In the sandbox they are gone already.)
	p.Kill()
	select {
	case <-readDone:
	case <-time.After(pipeDrainGrace):
		r.Close()
		<-readDone
	}

	res := Result{Output: out.String(), ExitCode: p.ExitCode()}
	if timedOut || cancelled {
		res.ExitCode = -1 // killed, whatever bwrap made of it
	}
	switch {
	case cancelled:
		return res, fmt.Errorf("%s %q: %w", Run, shorten(command, 80), ctx.Err())
	case timedOut:
		res.TimedOut = true
		res.Error = fmt.Sprintf("command timed out after %ss", strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64))
	}
	return res, nil
}

// cappedBuffer keeps the first limit bytes written and counts the rest. It
// keeps accepting writes past the limit so that the command sees a normal
// pipe instead of dying of SIGPIPE half way.
type cappedBuffer struct {
	limit   int
	buf     []byte
	dropped int64
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.limit - len(c.buf); room > 0 {
		k := min(room, len(p))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
	}
	c.dropped += int64(len(p))
	return n, nil
}

// String is the kept output followed, when something was discarded, by a
// plain notice saying how much.
func (c *cappedBuffer) String() string {
	if c.dropped == 0 {
		return string(c.buf)
	}
	kept, dropped := c.buf, c.dropped
	// Do not end on half a UTF-8 character; count its bytes as discarded.
	if i := lastRuneStart(kept); i >= 0 && !utf8.FullRune(kept[i:]) {
		dropped += int64(len(kept) - i)
		kept = kept[:i]
	}
	var b strings.Builder
	b.Write(kept)
	if len(kept) > 0 && kept[len(kept)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[output exceeded %d bytes; %d more bytes were discarded]", c.limit, dropped)
	return b.String()
}

func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return -1
}
