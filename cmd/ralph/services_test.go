package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/ralphmesh/ralph/internal/meshtest"
)

// upEnv isolates `ralph up` from the machine: embedded servers only, no
// metrics port, and a model endpoint so the services can be built.
func upEnv(t *testing.T) {
	t.Helper()
	t.Setenv("RALPH_NATS_URL", "")
	t.Setenv("RALPH_REDIS_URL", "")
	t.Setenv("RALPH_METRICS_ADDR", "")
	t.Setenv("RALPH_LLM_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("RALPH_UP_NATS_PORT", "-1")
	t.Setenv("RALPH_UP_REDIS_ADDR", "127.0.0.1:0")
	t.Setenv("RALPH_CONSOLE_ADDR", "127.0.0.1:0")
}

// takenAddr holds a port on 127.0.0.1 for the rest of the test.
func takenAddr(t *testing.T) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr)
}

// A port someone else has is bad input that names the setting to change.
func TestUpAddressTaken(t *testing.T) {
	cases := []struct {
		name, env string
		value     func(*net.TCPAddr) string
		want      []string
	}{
		{"NATS port", "RALPH_UP_NATS_PORT", func(a *net.TCPAddr) string { return strconv.Itoa(a.Port) },
			[]string{"embedded NATS", "address already in use", "set RALPH_UP_NATS_PORT to a free port", "-1"}},
		{"Redis address", "RALPH_UP_REDIS_ADDR", func(a *net.TCPAddr) string { return a.String() },
			[]string{"embedded Redis", "address already in use", "set RALPH_UP_REDIS_ADDR to a free host:port", "127.0.0.1:0"}},
		{"metrics address", "RALPH_METRICS_ADDR", func(a *net.TCPAddr) string { return a.String() },
			[]string{"RALPH_METRICS_ADDR", "address already in use", "to empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			upEnv(t)
			t.Setenv(c.env, c.value(takenAddr(t)))
			_, code, err := ralph(t, "up")
			if code != 2 {
				t.Fatalf("exit %d, err %v; want 2", code, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// The hint for a second shell exports everything it needs to reach this
// mesh, and the values work.
func TestUpPrintsWhatAnotherShellExports(t *testing.T) {
	upEnv(t)
	prefix := meshtest.Prefix(t)
	t.Setenv("RALPH_PREFIX", prefix)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	root := newRoot()
	root.SetOut(pw)
	root.SetErr(pw)
	root.SetArgs([]string{"up"})
	done := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()

	var exports string
	lines := bufio.NewScanner(pr)
	for exports == "" && lines.Scan() {
		if line := strings.TrimSpace(lines.Text()); strings.HasPrefix(line, "export ") {
			exports = strings.TrimPrefix(line, "export ")
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if exports == "" {
		t.Fatalf("no export line; up ended with %v", <-done)
	}
	env := map[string]string{}
	for _, kv := range strings.Fields(exports) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["RALPH_PREFIX"] != prefix || len(env) != 3 {
		t.Fatalf("exports %q: want RALPH_NATS_URL, RALPH_REDIS_URL and RALPH_PREFIX=%s", exports, prefix)
	}
	nc, err := nats.Connect(env["RALPH_NATS_URL"])
	if err != nil {
		t.Fatalf("RALPH_NATS_URL from the hint: %v", err)
	}
	nc.Close()
	opt, err := redis.ParseURL(env["RALPH_REDIS_URL"])
	if err != nil {
		t.Fatalf("RALPH_REDIS_URL from the hint: %v", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("RALPH_REDIS_URL from the hint: %v", err)
	}

	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("up after Ctrl-C: %v", err)
	}
}

// natsURLWithPassword is the test NATS server's URL with a user and a
// password in it (a server without authorization accepts them).
func natsURLWithPassword(t *testing.T, password string) string {
	t.Helper()
	return strings.Replace(meshtest.NATSURL(t), "nats://", "nats://ralph:"+password+"@", 1)
}

// A password in RALPH_NATS_URL is masked in everything the commands print:
// `ralph config`, `ralph up`, `ralph replay`'s errors and a connect error.
// (`ralph run` is checked in TestRunFailedSessionExitsOne.)
func TestNATSPasswordIsNeverPrinted(t *testing.T) {
	const pw = "s3cret-pw"
	check := func(t *testing.T, what, text string) {
		t.Helper()
		if strings.Contains(text, pw) {
			t.Errorf("%s shows the password: %s", what, text)
		}
		if !strings.Contains(text, "ralph:****@") {
			t.Errorf("%s does not show the masked URL: %s", what, text)
		}
	}
	t.Run("config", func(t *testing.T) {
		t.Setenv("RALPH_NATS_URL", natsURLWithPassword(t, pw))
		out, code, err := ralph(t, "config")
		if code != 0 {
			t.Fatalf("exit %d: %v", code, err)
		}
		check(t, "ralph config", out)
	})
	t.Run("replay", func(t *testing.T) {
		meshEnv(t)
		t.Setenv("RALPH_NATS_URL", natsURLWithPassword(t, pw))
		_, code, err := ralph(t, "replay", "no-such-session")
		if code != 2 || err == nil {
			t.Fatalf("exit %d, err %v; want 2", code, err)
		}
		check(t, "replay's error", err.Error())
	})
	t.Run("connect error", func(t *testing.T) {
		t.Setenv("RALPH_NATS_URL", "nats://ralph:"+pw+"@127.0.0.1:1")
		_, _, err := ralph(t, "replay", "s1")
		if err == nil {
			t.Fatal("replay reached a NATS server on port 1")
		}
		check(t, "the connect error", err.Error())
	})
	t.Run("up", func(t *testing.T) {
		upEnv(t)
		t.Setenv("RALPH_PREFIX", meshtest.Prefix(t))
		t.Setenv("RALPH_NATS_URL", natsURLWithPassword(t, pw))
		// Events kept on an external server need a Redis of their own
		// too (ralph up keeps both or neither).
		t.Setenv("RALPH_REDIS_URL", meshtest.RedisURL(t))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pr, pw2 := io.Pipe()
		root := newRoot()
		root.SetOut(pw2)
		root.SetErr(pw2)
		root.SetArgs([]string{"up"})
		done := make(chan error, 1)
		go func() {
			err := root.ExecuteContext(ctx)
			pw2.Close()
			done <- err
		}()
		var printed strings.Builder
		lines := bufio.NewScanner(pr)
		for lines.Scan() {
			printed.WriteString(lines.Text() + "\n")
			if strings.HasPrefix(strings.TrimSpace(lines.Text()), "export ") {
				break
			}
		}
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		cancel()
		<-done
		check(t, "ralph up", printed.String())
	})
}
