package mesh_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/internal/sandboxtest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sandbox"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/critic"
)

// Neither the builder nor the critic can be built on a sandbox that does
// not work, and the error names the setting that opts out.
func TestServicesRefuseABrokenSandbox(t *testing.T) {
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL = "http://127.0.0.1:1/v1"
	cfg.Sandbox.Mode = sandbox.ModeBwrap
	cfg.Sandbox.ReadOnly = []string{"/nonexistent-ralph-test-dir"} // not even `true` can run
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, name := range []string{builder.Name, critic.Name} {
		_, err := m.Service(name)
		if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "RALPH_SANDBOX_MODE=none") {
			t.Errorf("%s: err = %v, want ErrUnavailable naming RALPH_SANDBOX_MODE=none", name, err)
		}
	}
	if err := m.RunServices(context.Background(), builder.Name); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("RunServices: %v", err)
	}
}

// Opting out is loud, once per process however many services run.
func TestUnconfinedIsWarnedOnce(t *testing.T) {
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL = "http://127.0.0.1:1/v1"
	cfg.Sandbox.Mode = sandbox.ModeNone
	core, logs := observer.New(zapcore.InfoLevel)
	m, err := mesh.Start(context.Background(), cfg, zap.New(core), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, name := range []string{builder.Name, critic.Name, builder.Name} {
		if _, err := m.Service(name); err != nil {
			t.Fatal(err)
		}
	}
	warnings := logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("UNCONFINED").All()
	if len(warnings) != 1 || !strings.Contains(warnings[0].Message, "RALPH_SANDBOX_MODE=none") {
		t.Fatalf("warnings %v, want one naming RALPH_SANDBOX_MODE=none", warnings)
	}
}

// The end-to-end case. The builder's process is started with a
// planted API key and token in its environment (a child process: only an
// environment given at exec shows in /proc/PID/environ); its model has the
// agent run `cat /proc/$PPID/environ; cat /proc/1/environ; env`, and the
// task's verify command does the same in the critic. The session completes
// and neither secret appears in any event of the stream, any Redis key of
// the mesh, any log entry or any request the model received. Unconfined,
// the same session leaks them, so the checks are known to see a leak.
func TestSandboxedSessionKeepsSecrets(t *testing.T) {
	if os.Getenv(secretChildEnv) != "" {
		secretSession(t)
		return
	}
	sandboxtest.Require(t)
	run := func(mode string) (string, error) {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(self, "-test.run=^TestSandboxedSessionKeepsSecrets$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), secretChildEnv+"="+mode,
			"RALPH_LLM_API_KEY="+plant(t), "RALPH_TEST_PLANTED_TOKEN="+plant(t))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(sandbox.ModeBwrap)
	if err != nil || !strings.Contains(out, "--- PASS: TestSandboxedSessionKeepsSecrets") {
		t.Fatalf("the sandboxed session leaked or failed (%v):\n%s", err, out)
	}
	out, err = run(sandbox.ModeNone)
	if err == nil || !strings.Contains(out, "secret found in the stream") || !strings.Contains(out, "secret found in the model's requests") {
		t.Fatalf("unconfined, the session was expected to leak and the checks to say so (%v):\n%s", err, out)
	}
}

const secretChildEnv = "MESH_TEST_SECRET_SESSION_MODE"

func plant(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "planted-" + hex.EncodeToString(b)
}

// secretSession runs in the child process.
func secretSession(t *testing.T) {
	secrets := []string{os.Getenv("RALPH_LLM_API_KEY"), os.Getenv("RALPH_TEST_PLANTED_TOKEN")}
	for _, s := range secrets {
		if !strings.HasPrefix(s, "planted-") {
			t.Fatal("no planted secret in the environment")
		}
	}
	h := newHarness(t, parseScript(t, `
rules:
  - model: builder
    when: {turn: 1}
    reply:
      content: Looking around.
      tool_calls:
        - {name: run, arguments: {command: "cat /proc/$PPID/environ; echo; cat /proc/1/environ; echo; env"}}
  - {model: builder, when: {turn: 2}, reply: {content: "Done."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
	h.cfg.LLM.APIKey = secrets[0] // the key the services really use
	h.cfg.Sandbox.Mode = os.Getenv(secretChildEnv)
	core, logs := observer.New(zapcore.DebugLevel)
	h.log = zap.New(core)
	m := h.mesh()
	h.run(m, builder.Name, critic.Name, "stuckdetector")
	const session = "e2e-secrets"
	h.start(m, session, parsePRD(t, `
tasks:
  - {id: S1, title: Look, acceptance_criteria: [nothing], verify: 'cat /proc/$PPID/environ; cat /proc/1/environ; env'}
`), workspace(t, nil))
	got := h.wait(m, session)
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s: %s", last.Type, last.Data)
	}

	ran := false
	for _, r := range eventsOf[events.IterationRecord](t, got, events.IterationCompleted) {
		for _, c := range r.ToolCalls {
			ran = ran || strings.Contains(c.Output, "PATH=")
		}
	}
	if !ran {
		t.Fatal("the command did not run; nothing was checked")
	}
	leaks := func(where, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("secret found in %s:\n%s", where, text)
				return
			}
		}
	}

	for _, env := range got {
		b, _ := json.Marshal(env)
		leaks("the stream", string(b))
	}
	for _, r := range h.llm.Requests() {
		b, _ := json.Marshal(r)
		leaks("the model's requests", string(b))
	}
	for _, e := range logs.All() {
		leaks("the logs", fmt.Sprintf("%s %v", e.Message, e.ContextMap()))
	}
	leaks("Redis", redisDump(t, h.cfg.Prefix))
}

// redisDump is every key under prefix with its value, whatever its type.
func redisDump(t *testing.T, prefix string) string {
	t.Helper()
	opt, err := redis.ParseURL(meshtest.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	var b strings.Builder
	n := 0
	iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		n++
		typ, err := rdb.Type(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var val any
		switch typ {
		case "string":
			val, err = rdb.Get(ctx, key).Result()
		case "hash":
			val, err = rdb.HGetAll(ctx, key).Result()
		case "list":
			val, err = rdb.LRange(ctx, key, 0, -1).Result()
		case "set":
			val, err = rdb.SMembers(ctx, key).Result()
		case "zset":
			val, err = rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		default:
			t.Fatalf("key %s has type %s, which this check cannot read", key, typ)
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s = %v\n", key, val)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no Redis key under %s: nothing was checked", prefix)
	}
	return b.String()
}
