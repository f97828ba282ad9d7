package chaostest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildRalph builds cmd/ralph into dir once for the test, so that every
// service and every `ralph run` is a process of its own, killable apart.
func buildRalph(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "ralph")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/ralphmesh/ralph/cmd/ralph")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/ralph: %v\n%s", err, out)
	}
	return bin
}

// proc is one ralph process of the test: a service, which the test kills
// and starts again, or a `ralph run`, which ends by itself. Its output goes
// to a log file that outlives restarts.
type proc struct {
	t    *testing.T
	name string
	bin  string
	args []string
	env  []string
	log  string
	cmd  *exec.Cmd
	// exited is closed when the current process has exited; code is then
	// its exit code.
	exited chan struct{}
	code   int
}

func newProc(t *testing.T, dir, name, bin string, env []string, args ...string) *proc {
	return &proc{t: t, name: name, bin: bin, args: args, env: env, log: filepath.Join(dir, name+".log")}
}

// start starts the process (again), appending to its log.
func (p *proc) start() {
	p.t.Helper()
	log, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() {
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		_ = log.Close()
		close(exited)
	}()
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop ends the process as an operator does (SIGTERM), for the test's
// end; a process that does not go within the drain time is killed.
func (p *proc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.kill()
	}
}

// done reports whether the process has exited.
func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// output is what the process wrote to its log so far.
func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// waitReady waits until a service says it runs (its consumers exist, so an
// event published from now on is seen), failing the test after a minute.
func (p *proc) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.output(), "service running") {
		if p.done() || time.Now().After(deadline) {
			p.t.Fatalf("%s did not start:\n%s", p.name, p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
