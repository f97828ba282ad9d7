package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/sandboxtest"
	"github.com/ralphmesh/ralph/pkg/sandbox"
)

// The helper process: the test binary run again with helperEnv set runs
// one command through an Executor, as the builder does, prints the Result
// as JSON and exits. The tests start it with planted secrets in its
// initial environment (what /proc/PID/environ shows, which os.Setenv in
// this process would not change) and kill it mid-command.
const (
	helperEnv        = "TOOLS_TEST_HELPER"
	helperWorkspace  = "TOOLS_TEST_HELPER_WORKSPACE"
	helperSandboxEnv = "TOOLS_TEST_HELPER_SANDBOX"
)

func TestMain(m *testing.M) {
	if cmd := os.Getenv(helperEnv); cmd != "" {
		os.Exit(runHelper(cmd))
	}
	os.Exit(m.Run())
}

func runHelper(command string) int {
	sb := sandbox.Unconfined()
	if os.Getenv(helperSandboxEnv) == sandbox.ModeBwrap {
		var err error
		if sb, err = sandbox.New(sandbox.DefaultConfig()); err == nil {
			err = sb.Probe(context.Background())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	ws, err := NewWorkspace(os.Getenv(helperWorkspace))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	args, _ := json.Marshal(map[string]any{"command": command})
	res, err := NewExecutor(ws, nil, Options{Sandbox: sb}).Execute(context.Background(), Run, string(args))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 3
	}
	return 0
}

// helper is the helper process for command in workspace, in mode, with
// the extra environment entries env.
func helper(t *testing.T, mode, workspace, command string, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+command, helperWorkspace+"="+workspace, helperSandboxEnv+"="+mode)...)
	return cmd
}

func runInHelper(t *testing.T, mode, workspace, command string, env ...string) Result {
	t.Helper()
	cmd := helper(t, mode, workspace, command, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, stderr.String())
	}
	var res Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	return res
}

func token(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "planted-" + hex.EncodeToString(b)
}

// The leak: the service's environment, through the parent's
// /proc/PID/environ, pid 1's, or env. Unconfined, the command reads the
// planted key from its parent, which is what the sandbox is for.
func TestSandboxedCommandSeesNoSecretOfTheService(t *testing.T) {
	sandboxtest.Require(t)
	key, tok := token(t), token(t)
	ws := t.TempDir()
	const command = `cat /proc/$PPID/environ; echo; cat /proc/1/environ; echo; env; cat /proc/self/environ`
	env := []string{"RALPH_LLM_API_KEY=" + key, "RALPH_TEST_PLANTED_TOKEN=" + tok, "OPENAI_API_KEY=" + tok}

	res := runInHelper(t, sandbox.ModeBwrap, ws, command, env...)
	if !strings.Contains(res.Output, "PATH=") {
		t.Fatalf("the command did not run: %+v", res)
	}
	for _, secret := range []string{key, tok} {
		if strings.Contains(res.Output, secret) {
			t.Errorf("a secret of the service reached the sandboxed command:\n%s", res.Output)
		}
	}

	res = runInHelper(t, sandbox.ModeNone, ws, command, env...)
	if !strings.Contains(res.Output, key) {
		t.Errorf("unconfined, the command was expected to read its parent's environment; the test would not notice a leak:\n%s", res.Output)
	}
}

// Secret files named in the configuration (and the default hidden ones)
// read as empty; the rest of the same directory stays readable. A symlink
// in the workspace does not get round it.
func TestSandboxHidesSecretFiles(t *testing.T) {
	sandboxtest.Require(t)
	tok := token(t)
	etc := t.TempDir() // a configuration directory commands may read
	mustWrite(t, filepath.Join(etc, "public.txt"), "public\n")
	mustWrite(t, filepath.Join(etc, "ralph.env"), "RALPH_LLM_API_KEY="+tok+"\n")
	mustMkdir(t, filepath.Join(etc, "nats"))
	mustWrite(t, filepath.Join(etc, "nats", "user.creds"), tok+"\n")
	c := sandbox.DefaultConfig()
	c.ReadOnly = append(c.ReadOnly, etc)
	c.Hide = append(c.Hide, filepath.Join(etc, "nats"))
	c.Secrets = []string{filepath.Join(etc, "ralph.env")}
	w, _ := newTree(t)
	mustWrite(t, filepath.Join(w.Root(), ".netrc"), "password "+tok+"\n")
	mustSymlink(t, filepath.Join(etc, "ralph.env"), filepath.Join(w.Root(), "env-link"))
	c.Hide = append(c.Hide, filepath.Join(w.Root(), ".netrc"))
	e := NewExecutor(w, nil, Options{Sandbox: sandboxtest.New(t, c)})

	res := call(t, e, "run", map[string]any{"command": fmt.Sprintf(
		"cat %[1]s/public.txt; cat %[1]s/ralph.env; cat %[1]s/nats/user.creds; ls %[1]s/nats; cat env-link .netrc; cat /etc/shadow; ls /etc/ssl/private", etc)})
	if !strings.Contains(res.Output, "public\n") {
		t.Fatalf("the readable file was not read: %+v", res)
	}
	if strings.Contains(res.Output, tok) {
		t.Errorf("a hidden secret was read:\n%s", res.Output)
	}
	if out := readFile(t, filepath.Join(etc, "ralph.env")); !strings.Contains(out, tok) {
		t.Error("hiding changed the file on the host")
	}
	if sh, err := os.ReadFile("/etc/shadow"); err == nil && len(sh) > 0 && strings.Contains(res.Output, strings.SplitN(string(sh), "\n", 2)[0]) {
		t.Errorf("/etc/shadow was read:\n%s", res.Output)
	}
}

// The workspace is the only writable host directory: elsewhere a write
// fails or lands in the sandbox's private tmpfs, gone with the call.
func TestSandboxWritesOnlyTheWorkspace(t *testing.T) {
	sandboxtest.Require(t)
	e, w, outside := newExec(t, Options{Sandbox: sandboxtest.New(t, sandbox.DefaultConfig())})
	repo, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	name := "ralph-sandbox-" + token(t)
	host := []string{
		filepath.Join("/etc", name), filepath.Join("/usr", name), filepath.Join("/root", name),
		filepath.Join(repo, name), filepath.Join(outside, name), filepath.Join("/tmp", name),
		filepath.Join(sandbox.Home, name), filepath.Join("/", name),
	}
	var cmd strings.Builder
	for _, p := range host {
		fmt.Fprintf(&cmd, "echo x > %s && echo wrote %s; ", p, p)
	}
	cmd.WriteString("echo x > in-workspace && echo wrote the workspace")
	res := call(t, e, "run", map[string]any{"command": cmd.String()})
	if !strings.Contains(res.Output, "wrote the workspace") || readFile(t, filepath.Join(w.Root(), "in-workspace")) != "x\n" {
		t.Fatalf("the workspace was not writable: %+v", res)
	}
	for _, p := range host {
		if _, err := os.Lstat(p); err == nil {
			_ = os.Remove(p)
			t.Errorf("the sandboxed command wrote %s on the host\n%s", p, res.Output)
		}
	}
	// /tmp and HOME are writable inside, as tools expect, but private.
	for _, p := range []string{filepath.Join("/tmp", name), filepath.Join(sandbox.Home, name)} {
		if !strings.Contains(res.Output, "wrote "+p) {
			t.Errorf("%s was not writable inside the sandbox:\n%s", p, res.Output)
		}
	}
}

// Nothing the command starts outlives the call, however it detaches:
// setsid, nohup, a double fork. Checked the moment the call returns.
func TestSandboxLeavesNoProcessBehind(t *testing.T) {
	sandboxtest.Require(t)
	e, _, _ := newExec(t, Options{Sandbox: sandboxtest.New(t, sandbox.DefaultConfig())})
	m := []string{marker(), marker(), marker(), marker()}
	res := call(t, e, "run", map[string]any{"command": fmt.Sprintf(
		"setsid sleep %s & nohup sleep %s >/dev/null 2>&1 & (sleep %s >/dev/null 2>&1 &); setsid sh -c 'sleep %s >/dev/null 2>&1 &'; echo detached",
		m[0], m[1], m[2], m[3])})
	if res.Output != "detached\n" || res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	for _, s := range m {
		noProcess(t, s)
	}

	// The same when the call times out: pid 1 of the sandbox is killed and
	// the kernel takes the rest before the call returns.
	fg := marker()
	res = call(t, e, "run", map[string]any{"command": fmt.Sprintf("setsid sleep %s & sleep %s", m[0], fg), "timeout_seconds": 1})
	if !res.TimedOut {
		t.Fatalf("%+v", res)
	}
	noProcess(t, m[0])
	noProcess(t, fg)
}

// A builder killed with SIGKILL mid-command leaves nothing running: bwrap
// dies with its parent and the sandbox with bwrap.
func TestSandboxDiesWithTheService(t *testing.T) {
	sandboxtest.Require(t)
	ws := t.TempDir()
	bg, fg := marker(), marker()
	cmd := helper(t, sandbox.ModeBwrap, ws, fmt.Sprintf("setsid sleep %s & echo started > started; sleep %s", bg, fg))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, filepath.Join(ws, "started"))
	if len(processesWith(t, bg)) == 0 || len(processesWith(t, fg)) == 0 {
		t.Fatal("the command's processes are not running; the test would prove nothing")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitNoProcess(t, bg)
	waitNoProcess(t, fg)
}

// Capabilities dropped, its own PID namespace: pid 1 is bwrap's and the
// service's processes are not in its /proc.
func TestSandboxIsolation(t *testing.T) {
	sandboxtest.Require(t)
	e, _, _ := newExec(t, Options{Sandbox: sandboxtest.New(t, sandbox.DefaultConfig())})
	res := call(t, e, "run", map[string]any{"command": "grep CapEff /proc/self/status; cat /proc/1/comm; ls /proc | grep -c '^[0-9]'"})
	wantOK(t, res)
	lines := strings.Split(strings.TrimSpace(res.Output), "\n")
	if len(lines) != 3 {
		t.Fatalf("output %q", res.Output)
	}
	if lines[0] != "CapEff:\t0000000000000000" {
		t.Errorf("capabilities left: %q", lines[0])
	}
	if lines[1] != "bwrap" {
		t.Errorf("pid 1 is %q, want bwrap", lines[1])
	}
	if n := strings.TrimSpace(lines[2]); n == "" || len(n) > 1 {
		t.Errorf("%s processes visible; the sandbox should see only its own few", n)
	}
}

// With the network off a command cannot reach a listener on the host's
// loopback; with it on (the default) it can.
func TestSandboxNetworkSetting(t *testing.T) {
	sandboxtest.Require(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("skipped: no bash for /dev/tcp")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello from the host\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	command := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -n 1 <&3", port)
	for _, tc := range []struct {
		network string
		reach   bool
	}{{sandbox.NetworkOn, true}, {sandbox.NetworkOff, false}} {
		c := sandbox.DefaultConfig()
		c.Network = tc.network
		e, _, _ := newExec(t, Options{Shell: "/bin/bash", Sandbox: sandboxtest.New(t, c), ShellTimeout: 30 * time.Second})
		res := call(t, e, "run", map[string]any{"command": command})
		if reached := strings.Contains(res.Output, "hello from the host"); reached != tc.reach {
			t.Errorf("network %s: reached the host's listener = %v, want %v (%+v)", tc.network, reached, tc.reach, res)
		}
	}
}

// The kernel reports what a sandboxed command does to the workspace (a bind
// mount of it) to the watching Hasher: the steps after each command, watched,
// have Hash's digest, with only the changed directories lstat'ed.
func TestSandboxedChangesReachTheWatchingHasher(t *testing.T) {
	sandboxtest.Require(t)
	e, w, _ := newExec(t, Options{Sandbox: sandboxtest.New(t, sandbox.DefaultConfig())})
	call(t, e, "run", map[string]any{"command": "mkdir -p a/b c && echo one > a/b/f && echo two > c/g"})
	h := NewHasher(100)
	if err := h.WatchChanges(); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.now = func() time.Time { return time.Now().Add(time.Hour) } // every file old enough to trust
	for i, command := range []string{
		"echo ONE > a/b/f",                  // same size
		"printf 'x' >> c/g",                 // appended
		"mkdir a/b/d && echo new > a/b/d/h", // a new directory
		"mv c a/b/d/moved",                  // a directory moved
		"ln a/b/f a/b/d/moved/link && echo LINKED > a/b/d/moved/link", // written through a new name
		"rm -r a/b/d", // a tree removed
	} {
		if _, err := h.HashSince(w.Root(), fmt.Sprint(i), fmt.Sprint(i+1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // a clock tick past what the walk saw
		res := call(t, e, "run", map[string]any{"command": command})
		if res.ExitCode != 0 {
			t.Fatalf("%s: %+v", command, res)
		}
		got, err := h.HashSince(w.Root(), fmt.Sprint(i+1), fmt.Sprint(i+2))
		if err != nil {
			t.Fatal(err)
		}
		if want := mustHash(t, w.Root()); got != want {
			t.Fatalf("after %q: Hasher %s, Hash %s", command, got, want)
		}
	}
}
