package meshtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a redis-server process of one test's own, with the
// persistence a deployment must have (append-only file), so that the test
// can stop it for a while and start it again with every key kept: an
// outage, not a loss.
type RedisServer struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedis starts redis-server for t on a free port; the test is skipped
// when redis-server is not installed (scripts/test.sh installs it).
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (scripts/test.sh installs it): this test stops and restarts a Redis of its own")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &RedisServer{t: t, bin: bin, port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	_ = l.Close()
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// URL is the server's redis:// URL; it stays the same across restarts.
func (r *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// Start starts the server (again), loading what it kept.
func (r *RedisServer) Start() {
	r.t.Helper()
	if r.cmd != nil {
		return
	}
	log, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer log.Close()
	r.cmd = exec.Command(r.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "")
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.port)); err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _ := os.ReadFile(log.Name())
	r.t.Fatalf("redis-server did not start within 5s:\n%s", out)
}

// Stop shuts the server down (SIGTERM: it flushes its append-only file and
// exits); clients get connection refused until Start.
func (r *RedisServer) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	_ = r.cmd.Wait()
	r.cmd = nil
}
