package meshbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"github.com/redis/go-redis/v9"
)

// child is a server process this benchmark started: it is stopped at the
// end, and its CPU is read from /proc/<pid>/stat.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	// tail keeps the last lines it printed, for the error when it fails.
	tail *lineTail
}

// startTimeout bounds how long a server may take to say where it listens.
const startTimeout = 30 * time.Second

// startChild starts cmd and reads its output (stdout and stderr together)
// until a line matches ready; it returns the match's first group (where the
// server listens).
func startChild(ctx context.Context, name string, cmd *exec.Cmd, ready *regexp.Regexp) (*child, string, error) {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	// Its own process group: a signal to this one (^C) is this process's
	// to handle, and the child is stopped by stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{}), tail: &lineTail{}}
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(c.done)
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			c.tail.add(line)
			if m := ready.FindStringSubmatch(line); !sent && m != nil {
				found <- m[1]
				sent = true
			}
		}
		// Keep draining: a child blocked on a full pipe would stall.
		_, _ = io.Copy(io.Discard, pr)
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case addr := <-found:
		return c, addr, nil
	case <-c.done:
		return nil, "", fmt.Errorf("%s exited before it listened: %s", name, c.tail)
	case <-t.C:
		c.stop()
		return nil, "", fmt.Errorf("%s did not say where it listens within %s: %s", name, startTimeout, c.tail)
	case <-ctx.Done():
		c.stop()
		return nil, "", ctx.Err()
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop asks the child to end (SIGTERM) and kills it when it has not after
// a few seconds.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// lineTail keeps the last few lines a child printed (written by the
// goroutine reading its output, read when it fails to start).
type lineTail struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineTail) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if len(l.lines) > 8 {
		l.lines = l.lines[1:]
	}
}

func (l *lineTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "(no output)"
	}
	return strings.Join(l.lines, " | ")
}

// natsListening is nats-server's line naming its client port.
var natsListening = regexp.MustCompile(`Listening for client connections on (\S+)`)

// startNATS starts the nats-server binary with JetStream on a port of its
// choosing, storing in dir.
func startNATS(ctx context.Context, bin, dir string) (*child, string, error) {
	cmd := exec.CommandContext(ctx, bin, "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", filepath.Join(dir, "jetstream"))
	c, addr, err := startChild(ctx, "nats-server", cmd, natsListening)
	if err != nil {
		return nil, "", err
	}
	return c, "nats://" + addr, nil
}

// redisReady is redis-server's line once it accepts connections.
var redisReady = regexp.MustCompile(`(Ready to accept connections)`)

// startRedis starts redis-server without persistence on a free port.
func startRedis(ctx context.Context, bin, dir string) (*child, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.CommandContext(ctx, bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir)
	c, _, err := startChild(ctx, "redis-server", cmd, redisReady)
	if err != nil {
		return nil, "", err
	}
	return c, fmt.Sprintf("redis://127.0.0.1:%d/0", port), nil
}

// modelListening is the line `ralph scriptllm serve` prints once it
// listens.
var modelListening = regexp.MustCompile(`on (http://\S+/v1)`)

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// cpuOf reads the CPU time (user + system) a process has used so far.
type cpuOf func() (time.Duration, error)

// selfCPU is this process's CPU time, from getrusage.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// procCPU is the CPU time of pid, from /proc/<pid>/stat (clock-tick
// resolution, 10 ms: the runs are seconds long).
func procCPU(pid int) cpuOf {
	return func() (time.Duration, error) {
		p, err := procfs.NewProc(pid)
		if err != nil {
			return 0, fmt.Errorf("process %d: %w", pid, err)
		}
		st, err := p.Stat()
		if err != nil {
			return 0, fmt.Errorf("process %d: %w", pid, err)
		}
		return time.Duration(st.CPUTime() * float64(time.Second)), nil
	}
}

// errNotHere says a server's process is not on this host (or not visible
// from this process), so its CPU is not measured.
var errNotHere = errors.New("not a process this host shows")

// redisProcess finds the Redis server's pid from INFO server and checks
// that /proc shows a redis process under it (a Redis in a container or on
// another host has a pid that means something else here).
func redisProcess(ctx context.Context, rdb redis.UniversalClient) (pid int, version string, err error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0, "", fmt.Errorf("redis INFO server: %w", err)
	}
	fields := infoFields(info)
	version = fields["redis_version"]
	pid, err = strconv.Atoi(fields["process_id"])
	if err != nil {
		return 0, version, fmt.Errorf("redis INFO server: process_id %q: %w", fields["process_id"], err)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || !strings.Contains(string(comm), "redis") {
		return 0, version, fmt.Errorf("redis process %d: %w", pid, errNotHere)
	}
	return pid, version, nil
}

// infoFields parses the "key:value" lines of Redis's INFO.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}
