// Package sandbox owns where the agent's shell commands run (the builder's
// run tool and the critic's verify command).
//
// In the default mode every command runs inside bubblewrap (bwrap, the
// Debian package bubblewrap): in its own PID, IPC, UTS and cgroup
// namespaces, in a user namespace where the kernel allows one, with every
// capability dropped and a new terminal session (so no TIOCSTI into the
// service's terminal). It sees the host's system directories read-only
// (Config.ReadOnly), the workspace as the only writable host directory, a
// private empty /tmp and HOME, its own /proc (only its own processes) and a
// minimal /dev; secret files are hidden behind empty ones (Config.Hide and
// Config.Secrets). It gets only the environment it is given, and bwrap
// itself is started with that environment, because the sandbox's pid 1 is
// bwrap's and keeps bwrap's environment.
//
// Nothing a command starts outlives it: when the command exits, pid 1 of
// its PID namespace exits and the kernel kills every process left in it
// (a setsid or double-forked child included) before bwrap returns; on a
// timeout Process.Kill kills that pid 1; and bwrap and the sandbox die with
// the service that started them (--die-with-parent).
//
// Mode none runs commands unconfined, for hosts where bwrap cannot work;
// only an explicit setting chooses it.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/ralphmesh/ralph/pkg/settings"
)

// ErrUnavailable is wrapped by the errors of New and Probe when bwrap is
// missing or cannot build a sandbox on this host.
var ErrUnavailable = errors.New("the command sandbox is not available")

// Home is HOME inside the sandbox: an empty tmpfs for each command, so
// tools that keep caches and settings there work, and the service's own
// home directory, with whatever credentials it holds, is not there.
const Home = "/home/sandbox"

// resolvConf is bound even when it points outside Config.ReadOnly (to
// /run/systemd/resolve, say), so that names resolve when the network is on.
const resolvConf = "/etc/resolv.conf"

// Sandbox runs commands confined as its Config says. Probe it once before
// use; after that it may start commands concurrently.
type Sandbox struct {
	cfg   Config
	bwrap string // absolute path of bwrap; "" in mode none
	// userNS is whether commands get their own user namespace; Probe turns
	// it off when the kernel refuses one.
	userNS bool
}

// New returns the sandbox c describes; zero fields take their defaults.
// In mode bwrap it fails, wrapping ErrUnavailable, when bwrap is not
// installed. It does not run anything: Probe does.
func New(c Config) (*Sandbox, error) {
	settings.FillZero(&c)
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox settings: %w", err)
	}
	s := &Sandbox{cfg: c, userNS: true}
	if c.Mode == ModeNone {
		return s, nil
	}
	path, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("%w: bwrap is not installed (Debian's bubblewrap package): %w", ErrUnavailable, err)
	}
	if s.bwrap, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("%w: locate bwrap: %w", ErrUnavailable, err)
	}
	return s, nil
}

// Unconfined is a sandbox in mode none: commands run as plain child
// processes in their own process group. For code that runs only the
// project's own commands (benchmarks, tests of other behaviour).
func Unconfined() *Sandbox {
	return &Sandbox{cfg: Config{Mode: ModeNone, Network: NetworkOn}}
}

// Confined reports whether commands run in bwrap.
func (s *Sandbox) Confined() bool { return s.cfg.Mode == ModeBwrap }

// Describe says how commands run, for the log line a service writes when
// it starts.
func (s *Sandbox) Describe() string {
	if !s.Confined() {
		return "none: commands run unconfined"
	}
	userNS := "no user namespace (the kernel refused one)"
	if s.userNS {
		userNS = "own user namespace"
	}
	return fmt.Sprintf("bwrap (%s): own PID, IPC and UTS namespaces, %s, network %s", s.bwrap, userNS, s.cfg.Network)
}

// Probe runs `true` in the sandbox and fails, wrapping ErrUnavailable and
// quoting bwrap, when it cannot. It first tries with a user namespace and
// keeps it when that works. In mode none it does nothing. It must not run
// while the sandbox starts commands.
func (s *Sandbox) Probe(ctx context.Context) error {
	if !s.Confined() {
		return nil
	}
	dir, err := os.MkdirTemp("", "ralph-sandbox-probe-")
	if err != nil {
		return fmt.Errorf("probe the sandbox: %w", err)
	}
	defer os.RemoveAll(dir)
	if dir, err = filepath.EvalSymlinks(dir); err != nil { // a workspace is symlink-free
		return fmt.Errorf("probe the sandbox: %w", err)
	}
	var failures []string
	for _, userNS := range []bool{true, false} {
		s.userNS = userNS
		err := s.try(ctx, dir)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("probe the sandbox: %w", ctx.Err())
		}
		how := "without a user namespace"
		if userNS {
			how = "with a user namespace"
		}
		failures = append(failures, how+": "+err.Error())
	}
	return fmt.Errorf("%w: %s cannot run `true` (%s)", ErrUnavailable, s.bwrap, strings.Join(failures, "; "))
}

func (s *Sandbox) try(ctx context.Context, dir string) error {
	var out bytes.Buffer
	p, err := s.Start(Cmd{Dir: dir, Args: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Output: &out})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		p.Kill()
		<-done
		return ctx.Err()
	}
	if err != nil {
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	}
	return nil
}

// Cmd is one command to start.
type Cmd struct {
	// Dir is the working directory: an absolute, symlink-free workspace
	// path, and in the sandbox the only writable host directory.
	Dir string
	// Args is the program and its arguments.
	Args []string
	// Env is the whole environment of the command (KEY=VALUE); in the
	// sandbox HOME and TMPDIR are replaced by the sandbox's own.
	Env []string
	// Output receives the command's stdout and stderr.
	Output io.Writer
}

// Start starts c. Wait for it with Process.Wait.
func (s *Sandbox) Start(c Cmd) (*Process, error) {
	if len(c.Args) == 0 {
		return nil, errors.New("start a command: no program given")
	}
	if !s.Confined() {
		return startUnconfined(c)
	}
	return s.startBwrap(c)
}

func (s *Sandbox) startBwrap(c Cmd) (*Process, error) {
	args, err := s.args(c.Dir)
	if err != nil {
		return nil, err
	}
	// bwrap writes the host pid of the sandbox's pid 1 to info (fd 3), and
	// the sandbox waits for block (fd 4) before it runs the command, so
	// that pid 1 is known for sure before anything can happen in it.
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: info pipe: %w", s.bwrap, err)
	}
	blockR, blockW, err := os.Pipe()
	if err != nil {
		infoR.Close()
		infoW.Close()
		return nil, fmt.Errorf("start %s: block pipe: %w", s.bwrap, err)
	}
	cmd := exec.Command(s.bwrap, append(append(args, "--info-fd", "3", "--block-fd", "4", "--"), c.Args...)...)
	cmd.Env = sandboxEnv(c.Env)
	cmd.Stdout, cmd.Stderr = c.Output, c.Output
	cmd.ExtraFiles = []*os.File{infoW, blockR}
	// Pdeathsig as well as bwrap's --die-with-parent: bwrap sets its own
	// only once it runs, and this covers the moment before.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	// bwrap has its copies; ours would keep the pipes open.
	infoW.Close()
	blockR.Close()
	if err != nil {
		infoR.Close()
		blockW.Close()
		return nil, fmt.Errorf("start %s: %w", s.bwrap, err)
	}
	p := &Process{cmd: cmd, ready: make(chan struct{}), initFD: -1}
	go p.attach(infoR, blockW)
	return p, nil
}

// mount is one bwrap option that puts something at path.
type mount struct {
	path string
	args []string
}

// args are bwrap's options for a command in dir. bwrap applies them in
// order, so the mounts go parents first: a mount inside another lands on
// top of it, whichever list it comes from (the workspace in /tmp over the
// private /tmp, a hidden file over the workspace, a read-only path in
// /tmp over the private /tmp). The read-only remounts come last.
func (s *Sandbox) args(dir string) ([]string, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("sandbox: workspace %q is not an absolute path", dir)
	}
	var a []string
	if s.userNS {
		// --disable-userns: no nested user namespace in which the command
		// could gain capabilities again.
		a = append(a, "--unshare-user", "--disable-userns")
	}
	a = append(a, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
	if s.cfg.Network == NetworkOff {
		a = append(a, "--unshare-net")
	}
	a = append(a, "--die-with-parent", "--new-session", "--cap-drop", "ALL")

	view := readOnlyView(s.cfg.ReadOnly, s.cfg.Network == NetworkOn)
	mounts := append(view.mounts,
		mount{"/proc", []string{"--proc", "/proc"}},
		mount{"/dev", []string{"--dev", "/dev"}},
		mount{"/tmp", []string{"--tmpfs", "/tmp"}},
		mount{Home, []string{"--tmpfs", Home}},
		mount{dir, []string{"--bind", dir, dir}},
	)
	visible := append(slices.Clone(view.roots), dir)
	var remount []string
	for _, h := range slices.Concat(s.cfg.Hide, s.cfg.Secrets) {
		if h == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			continue // a secret that does not exist cannot be read
		}
		if !underAny(real, visible) {
			continue // not in the sandbox at all
		}
		fi, err := os.Stat(real)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			mounts = append(mounts, mount{real, []string{"--tmpfs", real}})
			remount = append(remount, "--remount-ro", real)
		} else {
			// A device on bwrap's nodev mount: opening it is refused.
			mounts = append(mounts, mount{real, []string{"--ro-bind", "/dev/null", real}})
		}
	}
	slices.SortStableFunc(mounts, func(x, y mount) int { return depth(x.path) - depth(y.path) })
	for _, m := range mounts {
		a = append(a, m.args...)
	}
	a = append(a, remount...)
	// The sandbox's root is bwrap's tmpfs: read-only, so that a write to
	// a path the command does not see (/root, the service's directory)
	// fails instead of landing somewhere that looks like the host.
	a = append(a, "--remount-ro", "/", "--chdir", dir)
	return a, nil
}

// depth is how many components path has ("/" has none).
func depth(path string) int {
	if path == "/" {
		return 0
	}
	return strings.Count(filepath.Clean(path), "/")
}

// view is what of the host a command sees.
type view struct {
	mounts []mount
	// roots are the host directories (and files) bound, by real path.
	roots []string
}

// readOnlyView binds each path of paths that exists, read-only, at its
// real (symlink-free) path, and recreates a path that is a symlink as a
// symlink to it. So every host file the sandbox sees has one path there,
// its real one, and hiding that path hides it.
func readOnlyView(paths []string, network bool) view {
	type entry struct{ path, real string }
	var entries []entry
	for _, p := range paths {
		if p == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue // a system without /lib32, say
		}
		entries = append(entries, entry{filepath.Clean(p), real})
	}
	if network {
		// Only the file the symlink leads to; the rest of its directory
		// (/run, often) stays out.
		if real, err := filepath.EvalSymlinks(resolvConf); err == nil && real != resolvConf {
			entries = append(entries, entry{real, real})
		}
	}
	var v view
	reals := make([]string, 0, len(entries))
	for _, e := range entries {
		reals = append(reals, e.real)
	}
	// Parents first, so a path inside another is not bound twice.
	slices.SortFunc(reals, func(x, y string) int { return depth(x) - depth(y) })
	for _, r := range reals {
		if !underAny(r, v.roots) {
			v.roots = append(v.roots, r)
			v.mounts = append(v.mounts, mount{r, []string{"--ro-bind", r, r}})
		}
	}
	for _, e := range entries {
		if e.path != e.real && !underAny(e.path, v.roots) {
			v.mounts = append(v.mounts, mount{e.path, []string{"--symlink", e.real, e.path}})
		}
	}
	return v
}

// sandboxEnv is env with HOME and TMPDIR pointing at the sandbox's own.
func sandboxEnv(env []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == "HOME" || k == "TMPDIR" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HOME="+Home, "TMPDIR=/tmp")
}

func under(path, root string) bool {
	if root == "/" {
		return true
	}
	return path == root || strings.HasPrefix(path, root+string(filepath.Separator))
}

func underAny(path string, roots []string) bool {
	return slices.ContainsFunc(roots, func(r string) bool { return under(path, r) })
}
