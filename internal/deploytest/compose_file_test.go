package deploytest

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/services/console"
)

// repoRoot is the repository, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// loadCompose loads docker-compose.yaml (and extra files) with the
// compose-spec library the way docker compose does, with env as the
// environment and envFile as .env.
func loadCompose(t *testing.T, envFile string, extra ...string) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "docker-compose.yaml")}, extra...)
	opts, err := cli.NewProjectOptions(files,
		cli.WithWorkingDirectory(root),
		cli.WithName("ralph"),
		cli.WithEnv([]string{"MESH_ENV_FILE=" + envFile}),
		cli.WithEnvFiles(envFile),
		cli.WithDotEnv,
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("load docker-compose.yaml: %v", err)
	}
	return p
}

// envFileKeys are the variables an env file sets.
func envFileKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not NAME=value", path, line)
		}
		out[k] = v
	}
	return out
}

// docker-compose.yaml, as docker compose loads it with .env.example as .env,
// has NATS, Redis and one container per service the binary has, each set
// up to be scaled, probed, and restarted.
func TestComposeFileRunsEveryService(t *testing.T) {
	envFile, err := filepath.Abs(filepath.Join(repoRoot, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	env := envFileKeys(t, envFile)
	checkSettings(t, ".env.example", keys(env))
	for k := range env {
		if !strings.HasPrefix(k, "RALPH_") && !strings.HasPrefix(k, "MESH_") {
			t.Errorf(".env.example: %s is neither a RALPH_ setting nor a MESH_ variable of the compose file", k)
		}
	}
	p := loadCompose(t, envFile)

	want := append(slices.Clone(mesh.Services), "nats", "redis")
	slices.Sort(want)
	if got := p.ServiceNames(); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	for _, name := range mesh.Services {
		s := p.Services[name]
		if s.Image != env["MESH_IMAGE"] || s.Build == nil {
			t.Errorf("%s: image %q (build %v), want %s, built from the Dockerfile", name, s.Image, s.Build != nil, env["MESH_IMAGE"])
		}
		if !slices.Equal([]string(s.Command), []string{"service", name}) {
			t.Errorf("%s: command %v, want [service %s]", name, s.Command, name)
		}
		if s.ContainerName != "" {
			t.Errorf("%s: container_name %q: a fixed name cannot be scaled", name, s.ContainerName)
		}
		if s.Environment["RALPH_NATS_URL"] == nil || *s.Environment["RALPH_NATS_URL"] != "nats://nats:4222" {
			t.Errorf("%s: RALPH_NATS_URL %v", name, s.Environment["RALPH_NATS_URL"])
		}
		if s.Environment["RALPH_LLM_BASE_URL"] == nil || *s.Environment["RALPH_LLM_BASE_URL"] != env["RALPH_LLM_BASE_URL"] {
			t.Errorf("%s: the settings of the env file do not reach it", name)
		}
		if mesh.NeedsRedis(name) {
			if s.Environment["RALPH_REDIS_URL"] == nil || *s.Environment["RALPH_REDIS_URL"] != "redis://redis:6379/0" {
				t.Errorf("%s: RALPH_REDIS_URL %v", name, s.Environment["RALPH_REDIS_URL"])
			}
			if d, ok := s.DependsOn["redis"]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: depends on redis %+v, want once it is healthy", name, s.DependsOn)
			}
		}
		if _, ok := s.DependsOn["nats"]; !ok {
			t.Errorf("%s does not depend on nats", name)
		}
		if s.HealthCheck == nil || !slices.Equal([]string(s.HealthCheck.Test), []string{"CMD", "ralph", "health"}) {
			t.Errorf("%s: health check %+v, want ralph health", name, s.HealthCheck)
		}
		if s.Restart != "unless-stopped" {
			t.Errorf("%s: restart %q", name, s.Restart)
		}
		if !slices.Equal(s.CapDrop, []string{"ALL"}) || len(s.CapAdd) != 0 || !s.ReadOnly || !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
			t.Errorf("%s: cap_drop %v, cap_add %v, read_only %v, security_opt %v; want every capability dropped, none added, a read-only root, no privilege gain",
				name, s.CapDrop, s.CapAdd, s.ReadOnly, s.SecurityOpt)
		}
		sandboxed := name == "builder" || name == "critic"
		if s.Privileged != sandboxed {
			t.Errorf("%s: privileged %v; only the builder and the critic, for bubblewrap", name, s.Privileged)
		}
		ws := slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Target == "/workspaces" && v.Source == env["MESH_WORKSPACES"] && v.Type == types.VolumeTypeVolume
		})
		if ws != sandboxed {
			t.Errorf("%s: the workspaces volume at /workspaces: %v, want %v", name, ws, sandboxed)
		}
		if published := len(s.Ports) > 0; published != (name == console.Name) {
			t.Errorf("%s: ports %+v; only the console publishes one (scaled services cannot)", name, s.Ports)
		}
	}
	if c := p.Services[console.Name]; len(c.Ports) != 1 || c.Ports[0].Target != 9464 || c.Ports[0].HostIP != "127.0.0.1" {
		t.Errorf("console ports %+v, want its HTTP port 9464 on the host's loopback", c.Ports)
	}

	nats := p.Services["nats"]
	if !slices.Contains(nats.Command, "--jetstream") || !slices.Contains(nats.Command, "--http_port") || !hasVolumeAt(nats, "/data") ||
		nats.Command[slices.Index(nats.Command, "--store_dir")+1] != "/data" {
		t.Errorf("nats: command %v, volumes %+v; want JetStream stored in a volume and the monitoring port", nats.Command, nats.Volumes)
	}
	redis := p.Services["redis"]
	if i := slices.Index(redis.Command, "--appendonly"); i < 0 || redis.Command[i+1] != "yes" || !hasVolumeAt(redis, "/data") {
		t.Errorf("redis: command %v, volumes %+v; want AOF in a volume", redis.Command, redis.Volumes)
	}
	if redis.HealthCheck == nil || len(redis.HealthCheck.Test) == 0 {
		t.Errorf("redis has no health check")
	}
	for _, v := range []string{"nats", "redis", "workspaces"} {
		if _, ok := p.Volumes[v]; !ok {
			t.Errorf("no volume %s", v)
		}
	}

	// The file is in the compose-spec format both docker compose v2 and
	// docker-compose v1 (1.29) read: no version key, no name key.
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "name"} {
		if _, ok := top[k]; ok {
			t.Errorf("docker-compose.yaml has a top-level %q, which docker-compose v1 mishandles", k)
		}
	}
}

// The container tests' override only adds the scripted model.
func TestComposeModelOverride(t *testing.T) {
	envFile := filepath.Join(t.TempDir(), "test.env")
	script, err := filepath.Abs(filepath.Join("testdata", "compose-session.model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(envFile, []byte("MESH_MODEL_SCRIPT="+script+"\nMESH_IMAGE=ralph:test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	override, err := filepath.Abs(filepath.Join("testdata", "compose.model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := loadCompose(t, envFile, override)
	m, ok := p.Services["model"]
	if !ok || len(p.Services) != len(mesh.Services)+3 {
		t.Fatalf("services %v, want the compose file's and model", p.ServiceNames())
	}
	if m.Image != "ralph:test" || !slices.Equal(m.Command[:2], []string{"scriptllm", "serve"}) || !hasVolumeAt(m, "/etc/ralph/model.yaml") {
		t.Errorf("model: %s %v %+v", m.Image, m.Command, m.Volumes)
	}
}

func hasVolumeAt(s types.ServiceConfig, target string) bool {
	return slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == target })
}
