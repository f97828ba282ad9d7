package deploytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// requireDocker skips, saying why in one line, unless the container tests
// are asked for (RALPH_DEPLOY_TEST=1); asked for, they fail without Docker.
func requireDocker(t *testing.T) {
	t.Helper()
	if os.Getenv("RALPH_DEPLOY_TEST") != "1" {
		t.Skip("container test: set RALPH_DEPLOY_TEST=1 to run it with Docker (scripts/test.sh does)")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("RALPH_DEPLOY_TEST=1 but Docker does not answer: %v: %s", err, out)
	}
}

var (
	imageOnce sync.Once
	imageName string
	imageErr  error
)

// ralphImage is the ralph image the tests run: RALPH_DEPLOY_IMAGE, or the
// one scripts/images.sh makes (with every base image it needs), once per
// test binary.
func ralphImage(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		if imageName = os.Getenv("RALPH_DEPLOY_IMAGE"); imageName != "" {
			return
		}
		cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "images.sh"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if imageErr = cmd.Run(); imageErr != nil {
			imageErr = fmt.Errorf("scripts/images.sh: %w", imageErr)
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		imageName = lines[len(lines)-1]
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageName
}

// suffix is a fresh name part, so that runs (and other users of the same
// engine) never share a container, network or volume.
func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sh runs a command and returns its standard output; the error quotes
// both outputs.
func sh(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stderr.String(), out.String())
	}
	return out.String(), nil
}

// combined runs a command and returns both its outputs, interleaved
// (docker logs replays a container's stderr on its own stderr).
func combined(ctx context.Context, name string, args ...string) string {
	out, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out)
}

// docker runs docker with a deadline and fails the test on an error.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := sh(ctx, "docker", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// eventually polls cond until it holds or the deadline passes; what it
// returns last is the failure's explanation.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, within, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// composeTool is how compose is run here: the v2 plugin when the docker
// CLI has it, else docker-compose v1. The file is written for both.
func composeTool() []string {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	return []string{"docker-compose"}
}

// compose is a compose project of the tests.
type compose struct {
	t       *testing.T
	project string
	envFile string
	files   []string
}

func (c *compose) args(args ...string) []string {
	tool := composeTool()
	out := append(tool[1:], "--project-name", c.project, "--env-file", c.envFile)
	for _, f := range c.files {
		out = append(out, "--file", f)
	}
	return append(out, args...)
}

// run runs a compose command; the error carries its output.
func (c *compose) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tool := composeTool()
	return sh(ctx, tool[0], c.args(args...)...)
}

func (c *compose) must(timeout time.Duration, args ...string) string {
	c.t.Helper()
	out, err := c.run(timeout, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// containers are the ids of service's running containers.
func (c *compose) containers(service string) []string {
	out, err := sh(context.Background(), "docker", "ps", "-q",
		"--filter", "label=com.docker.compose.project="+c.project,
		"--filter", "label=com.docker.compose.service="+service)
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.Fields(out)
}

// waitServing waits until service has n running containers, each of which
// has logged that its service runs (configuration, NATS, Redis and its
// consumer are good).
func (c *compose) waitServing(service string, n int) {
	c.t.Helper()
	eventually(c.t, 3*time.Minute, fmt.Sprintf("%d %s containers serving", n, service), func() (bool, string) {
		ids := c.containers(service)
		if len(ids) != n {
			return false, fmt.Sprintf("%d running", len(ids))
		}
		for _, id := range ids {
			if !logged(id, "service running") {
				return false, "container " + id + " has not logged \"service running\": " + tail(id)
			}
		}
		return true, ""
	})
}

// logged reports whether container id's logs hold s.
func logged(id, s string) bool {
	return strings.Contains(combined(context.Background(), "docker", "logs", id), s)
}

// tail is the end of a container's logs, for a failure's message.
func tail(id string) string {
	return combined(context.Background(), "docker", "logs", "--tail", "15", id)
}
