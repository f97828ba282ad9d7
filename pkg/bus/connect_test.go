package bus_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
)

func authServer(t *testing.T, o server.Options) string {
	t.Helper()
	o.Host, o.Port, o.NoSigs, o.NoLog = "127.0.0.1", server.RANDOM_PORT, true, true
	srv, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv.ClientURL()
}

func TestConnectAuthentication(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}

	userPass := authServer(t, server.Options{Username: "ralph", Password: "s3cret"})
	token := authServer(t, server.Options{Authorization: "tok-123"})
	nkey := authServer(t, server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	cases := []struct {
		name string
		o    bus.ConnectOptions
		ok   bool
	}{
		{"user and password", bus.ConnectOptions{URL: userPass, User: "ralph", Password: "s3cret"}, true},
		{"wrong password", bus.ConnectOptions{URL: userPass, User: "ralph", Password: "nope"}, false},
		{"token", bus.ConnectOptions{URL: token, Token: "tok-123"}, true},
		{"wrong token", bus.ConnectOptions{URL: token, Token: "nope"}, false},
		{"nkey seed file", bus.ConnectOptions{URL: nkey, NKeyFile: seedFile}, true},
		{"unknown nkey", bus.ConnectOptions{URL: nkey, NKeyFile: otherFile}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nc, err := bus.Connect(c.o, zap.NewNop())
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				nc.Close()
				return
			}
			if err == nil {
				nc.Close()
				t.Fatal("connected with wrong credentials")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Logf("error: %v", err)
			}
		})
	}
	if _, err := bus.Connect(bus.ConnectOptions{URL: nkey, NKeyFile: filepath.Join(t.TempDir(), "missing.nk")}, zap.NewNop()); err == nil {
		t.Fatal("a missing nkey file must be an error")
	}
}
