package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Process is a started command.
type Process struct {
	cmd *exec.Cmd
	// ready is closed once bwrap's info pipe is read and the sandbox let go
	// (nil unconfined).
	ready chan struct{}

	mu sync.Mutex
	// initFD is a pidfd of the sandbox's pid 1, -1 while unknown and after
	// Wait. Through a pidfd a signal can only reach that very process,
	// whatever pid reuse happens meanwhile.
	initFD int
	// waited is set when Wait returned for a sandboxed command: nothing of
	// it is left to kill.
	waited bool
}

func startUnconfined(c Cmd) (*Process, error) {
	cmd := exec.Command(c.Args[0], c.Args[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env
	cmd.Stdout, cmd.Stderr = c.Output, c.Output
	// Its own process group, so that Kill reaches what the command starts
	// (unless it leaves the group: only the sandbox prevents that).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Args[0], err)
	}
	return &Process{cmd: cmd, initFD: -1}, nil
}

// attach reads bwrap's --info-fd document, {"child-pid": N, ...}, where N
// is the host pid of the sandbox's pid 1, and opens a pidfd of it. The
// sandbox waits on --block-fd meanwhile, so pid 1 cannot have exited and
// its pid cannot have been reused; closing block lets it go on.
func (p *Process) attach(info, block *os.File) {
	defer close(p.ready)
	defer block.Close()
	defer info.Close()
	var doc struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(info).Decode(&doc); err != nil || doc.ChildPid <= 0 {
		return // bwrap failed before making the sandbox; Kill falls back to its group
	}
	fd, err := unix.PidfdOpen(doc.ChildPid, 0)
	if err != nil {
		return // a kernel without pidfds (before 5.3): Kill falls back to bwrap's group
	}
	if parent(doc.ChildPid) != p.cmd.Process.Pid {
		// bwrap died and its child with it before the pidfd was open.
		_ = unix.Close(fd)
		return
	}
	p.mu.Lock()
	p.initFD = fd
	p.mu.Unlock()
}

// parent is the parent pid of pid from /proc, 0 when unknown.
func parent(pid int) int {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Format: pid (comm) state ppid ...; comm may hold spaces and parens.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// Wait waits for the command to exit. In the sandbox, by the time it
// returns every process the command started is gone.
func (p *Process) Wait() error {
	err := p.cmd.Wait()
	if p.ready == nil {
		return err
	}
	<-p.ready
	p.mu.Lock()
	fd := p.initFD
	p.mu.Unlock()
	if fd >= 0 {
		// bwrap returns as soon as the command's status is known, before
		// pid 1 of the sandbox has exited. Killing pid 1 makes the kernel
		// kill and reap every other process of the namespace before pid 1
		// counts as exited, which is when its pidfd turns readable.
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		waitExit(fd)
	}
	p.mu.Lock()
	p.waited = true
	if p.initFD >= 0 {
		_ = unix.Close(p.initFD)
		p.initFD = -1
	}
	p.mu.Unlock()
	return err
}

// waitExit blocks until the process of pidfd fd has exited.
func waitExit(fd int) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// Kill ends the command and everything it started. In the sandbox it
// kills the sandbox's pid 1, whose exit makes the kernel kill every other
// process of the PID namespace; before bwrap has said which process that
// is, it kills bwrap, which takes the sandbox with it (--die-with-parent).
// Unconfined, it kills the command's process group. Errors are ignored:
// the process may be gone already.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.waited:
	case p.initFD >= 0:
		_ = unix.PidfdSendSignal(p.initFD, unix.SIGKILL, nil, 0)
	default:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// ExitCode is the command's exit status after Wait, -1 when it was killed
// by a signal.
func (p *Process) ExitCode() int {
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}
