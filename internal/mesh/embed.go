package mesh

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// ListenError says an embedded server could not listen on its address
// (usually because another process has it) and which setting moves it.
type ListenError struct {
	// Server is "NATS" or "Redis".
	Server string
	// Setting is the variable that sets the address, and Hint how to
	// pick another.
	Setting, Hint string
	Err           error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("embedded %s: %v; set %s %s", e.Server, e.Err, e.Setting, e.Hint)
}

func (e *ListenError) Unwrap() error { return e.Err }

func natsListenError(err error) *ListenError {
	return &ListenError{Server: "NATS", Setting: "RALPH_UP_NATS_PORT", Err: err,
		Hint: "to a free port (-1 picks a random one), or RALPH_NATS_URL to use a NATS server that is already running"}
}

// embedNATS starts a NATS server with JetStream inside the process.
func (m *Mesh) embedNATS() error {
	port := m.Config.Up.NATSPort
	if m.opts.RandomPorts {
		port = server.RANDOM_PORT
	}
	const host = "127.0.0.1"
	if port != server.RANDOM_PORT {
		// nats-server does not return a listen error: it logs it and
		// ReadyForConnections waits out its timeout. Trying the port first
		// fails at once with the error itself.
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return natsListenError(err)
		}
		_ = l.Close()
	}
	// RALPH_UP_STORE_DIR is `ralph up`'s: the in-process mesh of run and
	// demo (random ports) ends with its command, events and state alike.
	dir := m.Config.Up.StoreDir
	if m.opts.RandomPorts {
		dir = ""
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "ralph-jetstream-")
		if err != nil {
			return fmt.Errorf("embedded nats: %w", err)
		}
		dir, m.storeDir = d, d
	}
	srv, err := startNATS(host, port, dir)
	if err != nil {
		return err
	}
	m.natsSrv = srv
	m.NATSURL = srv.ClientURL()
	return nil
}

// startNATS starts a JetStream server on host:port and waits until it takes
// connections.
func startNATS(host string, port int, dir string) (*server.Server, error) {
	srv, err := server.NewServer(&server.Options{
		ServerName: "ralph-embedded", Host: host, Port: port,
		JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	// The server stays quiet (NoLog) except for a fatal error, which is
	// how it reports that it cannot listen (someone took the port since
	// embedNATS tried it) or start JetStream.
	fatal := make(chan string, 1)
	srv.SetLoggerV2(fatalLogger(fatal), false, false, false)
	go srv.Start()
	ready := make(chan bool, 1)
	go func() { ready <- srv.ReadyForConnections(10 * time.Second) }()
	select {
	case ok := <-ready:
		if !ok {
			srv.Shutdown()
			return nil, fmt.Errorf("embedded nats on port %d did not start within 10s", port)
		}
	case msg := <-fatal:
		srv.Shutdown()
		// The server's own wording is all there is to tell a listen
		// error from, say, JetStream failing on its store directory.
		if strings.HasPrefix(msg, "Error listening on port") {
			return nil, natsListenError(errors.New(msg))
		}
		return nil, fmt.Errorf("embedded nats: %s", msg)
	}
	return srv, nil
}

// fatalLogger is a nats-server logger that passes on the first fatal error
// and drops everything else.
type fatalLogger chan string

func (l fatalLogger) Fatalf(format string, v ...any) {
	select {
	case l <- fmt.Sprintf(format, v...):
	default:
	}
}
func (fatalLogger) Noticef(string, ...any) {}
func (fatalLogger) Warnf(string, ...any)   {}
func (fatalLogger) Errorf(string, ...any)  {}
func (fatalLogger) Debugf(string, ...any)  {}
func (fatalLogger) Tracef(string, ...any)  {}

// embedRedis starts a Redis-compatible server (miniredis) inside the process.
func (m *Mesh) embedRedis() error {
	addr := m.Config.Up.RedisAddr
	if m.opts.RandomPorts {
		addr = "127.0.0.1:0"
	}
	srv := miniredis.NewMiniRedis()
	if err := srv.StartAddr(addr); err != nil {
		return &ListenError{Server: "Redis", Setting: "RALPH_UP_REDIS_ADDR", Err: err,
			Hint: "to a free host:port (127.0.0.1:0 picks a random port), or RALPH_REDIS_URL to use a Redis that is already running"}
	}
	m.redisSrv = srv
	m.RedisURL = "redis://" + srv.Addr()
	return nil
}
