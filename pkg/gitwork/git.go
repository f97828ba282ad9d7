// Package gitwork owns the platform's own use of git in a workspace: the
// session's branch, one commit per approved task (made with the
// repository's hooks, inside the command sandbox), finding a commit again
// by its trailers, the diff a reviewer reads, and pushing when asked.
//
// The workspace is agent-controlled: the model can write .git/config and
// .git/hooks like any other file. So git never runs a program the
// repository names outside the sandbox. Whatever writes to the repository
// (switching branches, staging, committing, which run hooks) runs inside
// the sandbox the agent's commands run in. What only reads runs on the host
// with every setting that could start a program turned off (core.fsmonitor,
// hooks, pagers, every filter driver the configuration names, external
// diffs and textconv, signature checks), passed through GIT_CONFIG_COUNT
// so that no driver name can be mistaken for an option, and with a clean
// environment (no GIT_DIR or GIT_INDEX_FILE of a caller, no secrets).
package gitwork

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/ralphmesh/ralph/pkg/sandbox"
)

// ErrGit is wrapped by the error of a git command that failed.
var ErrGit = errors.New("git failed")

// maxOutput bounds what is kept of one command's output: a hook that
// prints megabytes must not make an event or a prompt too large.
const maxOutput = 64 << 10

// hardened are the settings that keep a read-only command from starting a
// program the repository names, or from writing: no fsmonitor, no hooks, no
// pager, no automatic maintenance, no signature checks, no ext:: transport.
var hardened = [][2]string{
	{"core.fsmonitor", "false"},
	{"core.hooksPath", "/dev/null"},
	{"core.pager", "cat"},
	{"log.showSignature", "false"},
	{"gc.auto", "0"},
	{"maintenance.auto", "false"},
	{"protocol.ext.allow", "never"},
	{"diff.ignoreSubmodules", "all"},
	{"status.submoduleSummary", "false"},
}

// configEnv passes settings to git as GIT_CONFIG_COUNT, GIT_CONFIG_KEY_n
// and GIT_CONFIG_VALUE_n: unlike -c, a key holding '=' or a value starting
// with '-' cannot be misread.
func configEnv(kv [][2]string) []string {
	env := []string{"GIT_CONFIG_COUNT=" + strconv.Itoa(len(kv))}
	for i, p := range kv {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, p[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, p[1]))
	}
	return env
}

// baseEnv is the environment every git command starts from: what it needs
// to find itself and the user's own configuration, messages in English for
// the parsers, and never a prompt. Nothing else of the caller's is passed:
// a GIT_DIR or GIT_INDEX_FILE set by a caller's hook would point git
// elsewhere, and API keys have no business there.
func baseEnv() []string {
	env := []string{"LC_ALL=C", "GIT_TERMINAL_PROMPT=0"}
	for _, k := range []string{"PATH", "HOME", "XDG_CONFIG_HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// result is a finished command.
type result struct {
	out      []byte
	stderr   []byte
	exitCode int
	// truncated: out is not the whole output (over maxOutput).
	truncated bool
}

// read runs a command that only reads the repository, on the host, with
// the hardened settings and every filter driver the configuration names
// turned off. A non-zero exit is returned as the result, not an error:
// some commands answer with their exit code.
func (r *Repo) read(ctx context.Context, args ...string) (result, error) {
	kv, err := r.neutralised(ctx)
	if err != nil {
		return result{}, err
	}
	return r.host(ctx, kv, args...)
}

// host runs git on the host with the settings kv and the environment extra.
func (r *Repo) host(ctx context.Context, kv [][2]string, args ...string) (result, error) {
	return r.hostEnv(ctx, kv, nil, args...)
}

func (r *Repo) hostEnv(ctx context.Context, kv [][2]string, extra []string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"--no-pager"}, args...)...)
	cmd.Dir = r.dir
	cmd.Env = append(append(append(baseEnv(), "GIT_OPTIONAL_LOCKS=0"), configEnv(kv)...), extra...)
	var stdout, stderr bytes.Buffer
	so := &capped{b: &stdout}
	cmd.Stdout, cmd.Stderr = so, &capped{b: &stderr}
	err := cmd.Run()
	res := result{out: stdout.Bytes(), stderr: stderr.Bytes(), exitCode: -1, truncated: so.dropped > 0}
	if cmd.ProcessState != nil {
		res.exitCode = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("git %s in %s: %w after %s", args[0], r.dir, ErrGit, r.cfg.Timeout)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return res, fmt.Errorf("git %s in %s: %w: %w", args[0], r.dir, ErrGit, err)
	}
	return res, nil
}

// must is read for a command that must succeed; its error quotes git's.
func (r *Repo) must(ctx context.Context, args ...string) ([]byte, error) {
	res, err := r.read(ctx, args...)
	if err != nil {
		return nil, err
	}
	if res.exitCode != 0 {
		return nil, fmt.Errorf("git %s in %s: %w: exit %d: %s", args[0], r.dir, ErrGit, res.exitCode, firstLines(res.stderr, 3))
	}
	return res.out, nil
}

// neutralised are the hardened settings plus, for every filter driver the
// repository's configuration names (filter.<name>.*), settings that make
// the driver do nothing: a status or a diff runs clean filters on the work
// tree. The configuration is read anew each time, since the agent may have
// changed it since; reading it runs nothing.
func (r *Repo) neutralised(ctx context.Context) ([][2]string, error) {
	res, err := r.host(ctx, hardened, "config", "-z", "--name-only", "--get-regexp", `^filter\.`)
	if err != nil {
		return nil, err
	}
	kv := append([][2]string(nil), hardened...)
	seen := map[string]bool{}
	for _, key := range strings.Split(string(res.out), "\x00") {
		// filter.<driver>.<setting>; the driver name may hold dots.
		rest, ok := strings.CutPrefix(strings.TrimSpace(key), "filter.")
		i := strings.LastIndexByte(rest, '.')
		if !ok || i <= 0 {
			continue
		}
		driver := rest[:i]
		if seen[driver] {
			continue
		}
		seen[driver] = true
		for _, s := range []string{"clean", "smudge", "process"} {
			kv = append(kv, [2]string{"filter." + driver + "." + s, ""})
		}
		kv = append(kv, [2]string{"filter." + driver + ".required", "false"})
	}
	return kv, nil
}

// confined runs a command that writes to the repository (and may run its
// hooks) inside the sandbox, with env added to the base environment. Its
// output is stdout and stderr together.
func (r *Repo) confined(ctx context.Context, env []string, args ...string) (result, error) {
	if r.sb == nil {
		return result{}, fmt.Errorf("git %s in %s: no sandbox to run it in", args[0], r.dir)
	}
	var out bytes.Buffer
	c := &capped{b: &out}
	rd, w, err := os.Pipe()
	if err != nil {
		return result{}, fmt.Errorf("git %s: output pipe: %w", args[0], err)
	}
	defer rd.Close()
	// The sandbox has a HOME of its own; the user's configuration is not
	// there (the identity comes in env).
	fullEnv := []string{"LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "PATH=" + os.Getenv("PATH")}
	fullEnv = append(append(fullEnv, configEnv([][2]string{{"core.fsmonitor", "false"}})...), env...)
	p, err := r.sb.Start(sandbox.Cmd{Dir: r.dir, Args: args, Env: fullEnv, Output: w})
	w.Close()
	if err != nil {
		return result{}, fmt.Errorf("git %s in %s: %w", args[0], r.dir, err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(c, rd)
	}()
	waitDone := make(chan error, 1)
	go func() { waitDone <- p.Wait() }()
	timer := time.NewTimer(r.cfg.Timeout)
	defer timer.Stop()
	var stopped error
	select {
	case <-waitDone:
	case <-timer.C:
		stopped = fmt.Errorf("timed out after %s (RALPH_GIT_TIMEOUT)", r.cfg.Timeout)
	case <-ctx.Done():
		stopped = ctx.Err()
	}
	if stopped != nil {
		p.Kill()
		<-waitDone
	}
	// Nothing the command started outlives it (in the sandbox they are
	// gone already; unconfined, its process group is killed).
	p.Kill()
	select {
	case <-readDone:
	case <-time.After(2 * time.Second):
		rd.Close()
		<-readDone
	}
	res := result{out: out.Bytes(), exitCode: p.ExitCode()}
	if stopped != nil {
		return res, fmt.Errorf("%s in %s: %w: %w", strings.Join(args[:min(len(args), 2)], " "), r.dir, ErrGit, stopped)
	}
	return res, nil
}

// capped keeps the first maxOutput bytes written and drops the rest, so
// the command never blocks on a full pipe.
type capped struct {
	b       *bytes.Buffer
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	room := maxOutput - c.b.Len()
	if room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	c.dropped += len(p) - min(max(room, 0), len(p))
	return len(p), nil
}

// firstLines is the first n lines of b, trimmed, for an error message.
func firstLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " / ")
}
