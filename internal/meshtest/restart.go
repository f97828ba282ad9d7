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

	"github.com/nats-io/nats-server/v2/server"
)

// NATSServer is a JetStream server of one test's own, on a fixed port and
// store directory, so that the test can restart it the way an operator
// restarts a server: clients reconnect to the same URL and find the same
// streams and durable consumers. It is a separate nats-server process when
// one is named by RALPH_TEST_NATS_SERVER (scripts/test.sh builds one from
// the module go.mod pins), else a server embedded from the Go module. Not
// whatever nats-server is on the PATH: Debian's is 2.9, and the services
// need 2.10 or newer (multi-filter consumers).
type NATSServer struct {
	t    testing.TB
	port int
	dir  string
	// bin is the nats-server executable; empty embeds the server.
	bin string
	cmd *exec.Cmd
	srv *server.Server
}

// StartNATS starts a JetStream server for t on a free port; it is shut
// down when the test ends.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &NATSServer{t: t, port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir(), bin: natsServerBinary()}
	_ = l.Close()
	n.start()
	t.Cleanup(n.stop)
	return n
}

func natsServerBinary() string {
	return os.Getenv("RALPH_TEST_NATS_SERVER")
}

// URL is the server's client URL; it stays the same across restarts.
func (n *NATSServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Process reports whether the server is a separate process.
func (n *NATSServer) Process() bool { return n.bin != "" }

func (n *NATSServer) start() {
	n.t.Helper()
	if n.bin != "" {
		n.cmd = exec.Command(n.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", filepath.Join(n.dir, "js"))
		log, err := os.Create(filepath.Join(n.dir, "nats.log"))
		if err != nil {
			n.t.Fatal(err)
		}
		n.cmd.Stdout, n.cmd.Stderr = log, log
		if err := n.cmd.Start(); err != nil {
			n.t.Fatalf("start %s: %v", n.bin, err)
		}
		for i := 0; i < 100; i++ {
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", n.port)); err == nil {
				_ = c.Close()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		out, _ := os.ReadFile(log.Name())
		n.t.Fatalf("%s did not start within 5s:\n%s", n.bin, out)
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "restartable", Host: "127.0.0.1", Port: n.port,
		JetStream: true, StoreDir: n.dir, NoSigs: true, NoLog: true,
		// A graceful shutdown (lame duck mode) that takes a moment
		// rather than the default two minutes.
		LameDuckDuration: time.Second, LameDuckGracePeriod: 100 * time.Millisecond,
	})
	if err != nil {
		n.t.Fatalf("nats-server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("nats-server did not start within 10s")
	}
	n.srv = srv
}

// stop shuts the server down gracefully: SIGTERM for a process (it closes
// its clients and stores cleanly), lame duck mode for an embedded one.
func (n *NATSServer) stop() {
	switch {
	case n.cmd != nil:
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		_ = n.cmd.Wait()
		n.cmd = nil
	case n.srv != nil:
		n.srv.LameDuckShutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Kill stops the server the hard way, leaves it down for down, and starts
// it again on the same port and store directory: SIGKILL for a process (no
// goodbye to its clients, its stores as the last write left them), a
// shutdown without lame duck mode for an embedded server, which cannot be
// killed apart from the test.
func (n *NATSServer) Kill(down time.Duration) {
	n.t.Helper()
	switch {
	case n.cmd != nil:
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
		n.cmd = nil
	case n.srv != nil:
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
	time.Sleep(down)
	n.start()
}

// Restart stops the server gracefully, leaves it down for down, as a real
// restart takes a moment, and starts it again on the same port and store
// directory.
func (n *NATSServer) Restart(down time.Duration) {
	n.t.Helper()
	n.stop()
	time.Sleep(down)
	n.start()
}
