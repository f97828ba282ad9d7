package mesh

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// A port taken after embedNATS tried it is still reported as a listen error
// naming the setting, from the server's fatal log line, rather than after
// ReadyForConnections has waited out its timeout.
func TestStartNATSPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv, err := startNATS("127.0.0.1", l.Addr().(*net.TCPAddr).Port, t.TempDir())
	if err == nil {
		srv.Shutdown()
		t.Fatal("started on a taken port")
	}
	var le *ListenError
	if !errors.As(err, &le) || le.Setting != "RALPH_UP_NATS_PORT" || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %v (%T): want a *ListenError naming RALPH_UP_NATS_PORT and the bind error", err, err)
	}
}
