package deploytest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/mesh"
)

// docker-compose.yaml brought up for real: a session started with
// `compose run` completes through the containers; the builder scaled to
// three and the critic to two, a second one does too; everything is torn
// down whatever happens.
func TestComposeSession(t *testing.T) {
	requireDocker(t)
	image := ralphImage(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	envFile := filepath.Join(t.TempDir(), "compose.env")
	// What a user's .env holds, pointed at the scripted model; every host
	// port is a free one, so that the test runs beside anything.
	env := strings.Join([]string{
		"MESH_IMAGE=" + image,
		"MESH_ENV_FILE=" + envFile,
		"MESH_MODEL_SCRIPT=" + abs("testdata/compose-session.model.yaml"),
		"MESH_NATS_PORT=127.0.0.1:",
		"MESH_NATS_MONITOR_PORT=127.0.0.1:",
		"MESH_REDIS_PORT=127.0.0.1:",
		"MESH_CONSOLE_PORT=127.0.0.1:",
		"RALPH_LLM_BASE_URL=http://model:8080/v1",
		"RALPH_BUILDER_MODEL=builder",
		"RALPH_CRITIC_MODEL=critic",
		"RALPH_LOG_LEVEL=info",
	}, "\n") + "\n"
	if err := os.WriteFile(envFile, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &compose{t: t, project: "ralphtest" + suffix(), envFile: envFile,
		files: []string{filepath.Join(root, "docker-compose.yaml"), abs("testdata/compose.model.yaml")}}
	t.Cleanup(func() {
		if t.Failed() {
			tool := composeTool()
			out := combined(context.Background(), tool[0], c.args("logs", "--no-color", "--tail", "40")...)
			t.Logf("logs of %s:\n%s", c.project, out)
		}
		if out, err := c.run(3*time.Minute, "down", "--volumes", "--remove-orphans", "--timeout", "5"); err != nil {
			t.Errorf("tear down %s: %v\n%s", c.project, err, out)
		}
	})
	start := time.Now()
	c.must(5*time.Minute, "up", "-d", "--no-build")
	for _, s := range mesh.Services {
		c.waitServing(s, 1)
	}
	t.Logf("up and serving in %s", time.Since(start).Round(time.Second))

	// The console's port is published on the host.
	addr := strings.TrimSpace(c.must(time.Minute, "port", "console", "9464"))
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("the console's published port %s: %v", addr, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("GET %s/metrics: %s", addr, resp.Status)
	}

	c.session("compose-one", abs("testdata/compose-session.prd.yaml"))

	start = time.Now()
	c.must(5*time.Minute, "up", "-d", "--no-build", "--scale", "builder=3", "--scale", "critic=2")
	c.waitServing("builder", 3)
	c.waitServing("critic", 2)
	t.Logf("scaled to 3 builders and 2 critics in %s", time.Since(start).Round(time.Second))
	c.session("compose-two", abs("testdata/compose-session.prd.yaml"))
}

// session runs the PRD in a fresh workspace of the workspaces volume with
// `compose run` (as the README says a user does) and checks that it
// completed and left the workspace as the PRD asks.
func (c *compose) session(id, prd string) {
	c.t.Helper()
	ws := "/workspaces/" + id
	c.must(time.Minute, "run", "--rm", "-T", "--entrypoint", "sh", "builder", "-c", initWorkspace(ws))
	start := time.Now()
	out, err := c.run(5*time.Minute, "run", "--rm", "-T", "--volume", prd+":/prd.yaml:ro",
		"builder", "run", "/prd.yaml", "--workspace", ws, "--session", id)
	if err != nil {
		c.t.Fatalf("session %s: %v", id, err)
	}
	if !strings.Contains(out, "summary of "+id+": session.completed") {
		c.t.Fatalf("session %s did not complete:\n%s", id, out)
	}
	got := c.must(time.Minute, "run", "--rm", "-T", "--entrypoint", "cat", "critic", ws+"/greeting.txt", ws+"/count.txt")
	if got != "hello, compose\n2\n" {
		c.t.Fatalf("session %s's workspace holds %q", id, got)
	}
	c.t.Logf("session %s completed in %s", id, time.Since(start).Round(time.Second))
	fmt.Fprintf(os.Stdout, "compose: session %s completed through the containers in %s\n", id, time.Since(start).Round(time.Second))
}

// initWorkspace is the shell command the README gives for a new workspace
// in the containers: a session commits each approved task on a branch, so
// the workspace is a git repository with a first commit.
func initWorkspace(dir string) string {
	return "mkdir -p " + dir + " && cd " + dir + " && git init -q && " +
		"git -c user.name=ralph -c user.email=ralph@localhost commit -q --allow-empty -m 'initial commit'"
}
