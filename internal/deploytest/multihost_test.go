package deploytest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/critic"
)

// cluster is the multi-host test's containers on their private network.
type cluster struct {
	t       *testing.T
	name    string // prefix of every container, the network and the volume
	image   string
	natsURL string

	mu      sync.Mutex
	handled map[string]float64 // container -> most events it was seen to have acked
}

func (c *cluster) container(n string) string { return c.name + "-" + n }

// ip is container n's address on the test network ("" when it has none).
func (c *cluster) ip(n string) string {
	out, err := sh(context.Background(), "docker", "inspect", "-f",
		fmt.Sprintf(`{{with index .NetworkSettings.Networks %q}}{{.IPAddress}}{{end}}`, c.name), c.container(n))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// serviceEnv are the settings every service container gets: the three NATS
// nodes, Redis, the stream replicated three times, the scripted model. A
// short AckWait bounds how long a killed replica's step waits before it is
// delivered again (a running step is kept alive by heartbeats).
func (c *cluster) serviceEnv() []string {
	return []string{
		"RALPH_NATS_URL=" + c.natsURL,
		"RALPH_REDIS_URL=redis://redis:6379/0",
		"RALPH_STREAM_REPLICAS=3",
		"RALPH_STREAM_ACK_WAIT=5s",
		"RALPH_LLM_BASE_URL=http://model:8080/v1",
		"RALPH_BUILDER_MODEL=builder",
		"RALPH_CRITIC_MODEL=critic",
		"RALPH_LOG_LEVEL=info",
	}
}

// run starts a detached container on the network.
func (c *cluster) run(n string, opts []string, args ...string) {
	c.t.Helper()
	base := []string{"run", "-d", "--name", c.container(n), "--network", c.name, "--network-alias", n,
		"--label", "org.ralphmesh.test=" + c.name}
	docker(c.t, append(append(base, opts...), args...)...)
}

// service starts replica n of a Ralph service with the least privilege it
// needs: every container drops every capability, gains none and has a
// read-only root; the builder and the critic run bubblewrap, which needs
// seccomp, AppArmor and the masked system paths unconfined (README).
func (c *cluster) service(n, service string) {
	opts := []string{"--restart", "unless-stopped", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--read-only", "--tmpfs", "/tmp"}
	for _, e := range c.serviceEnv() {
		opts = append(opts, "--env", e)
	}
	if service == builder.Name || service == critic.Name {
		opts = append(opts, "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
			"--security-opt", "systempaths=unconfined", "--volume", c.name+"-ws:/workspaces")
	}
	c.run(n, append(opts, c.image), "service", service)
}

// pollHandled records, until ctx ends, how many events each replica of the
// builder and the critic has acked (ralph_events_handled_total from its
// /metrics), keeping the most seen: a killed replica's count is its last.
func (c *cluster) pollHandled(ctx context.Context, replicas []string) {
	re := regexp.MustCompile(`(?m)^ralph_events_handled_total\{[^}]*outcome="ack"[^}]*\} (\S+)$`)
	client := &http.Client{Timeout: 2 * time.Second}
	for ctx.Err() == nil {
		for _, r := range replicas {
			ip := c.ip(r)
			if ip == "" {
				continue
			}
			resp, err := client.Get("http://" + ip + ":9464/metrics")
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var sum float64
			for _, m := range re.FindAllStringSubmatch(string(body), -1) {
				v, _ := strconv.ParseFloat(m[1], 64)
				sum += v
			}
			c.mu.Lock()
			c.handled[r] = max(c.handled[r], sum)
			c.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// streamLeader is the name of the NATS server leading the session stream.
func (c *cluster) streamLeader() (string, error) {
	stream := events.StreamName("ralph")
	for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
		ip := c.ip(n)
		if ip == "" {
			continue
		}
		resp, err := http.Get("http://" + ip + ":8222/jsz?streams=true")
		if err != nil {
			continue
		}
		var jsz struct {
			Accounts []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, a := range jsz.Accounts {
			for _, s := range a.Streams {
				if s.Name == stream && s.Cluster.Leader != "" {
					return s.Cluster.Leader, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no NATS node names a leader of stream %s", stream)
}

// follower is the session as `ralph run --json` prints it, live.
type follower struct {
	mu     sync.Mutex
	events []events.Envelope
	seen   []time.Time // when each event was read
	change chan struct{}
}

func (f *follower) add(env events.Envelope) {
	f.mu.Lock()
	f.events = append(f.events, env)
	f.seen = append(f.seen, time.Now())
	f.mu.Unlock()
	select {
	case f.change <- struct{}{}:
	default:
	}
}

// stepDone reports whether env completes a step of the session's work.
func stepDone(env events.Envelope) bool {
	switch env.Type {
	case events.IterationCompleted, events.CritiqueCompleted, events.TaskCompleted, events.SessionCompleted:
		return true
	}
	return false
}

// wait waits until an event read after `after` satisfies cond, and returns
// when it was read.
func (f *follower) wait(t *testing.T, within time.Duration, what string, after time.Time, cond func(events.Envelope) bool) time.Time {
	t.Helper()
	deadline := time.After(within)
	for {
		f.mu.Lock()
		for i, env := range f.events {
			if f.seen[i].After(after) && cond(env) {
				at := f.seen[i]
				f.mu.Unlock()
				return at
			}
		}
		f.mu.Unlock()
		select {
		case <-f.change:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			f.mu.Lock()
			n := len(f.events)
			f.mu.Unlock()
			t.Fatalf("%s: not within %s (%d events followed)", what, within, n)
		}
	}
}

func taskStarted(id string) func(events.Envelope) bool {
	return func(env events.Envelope) bool { return env.Type == events.TaskStarted && env.Task == id }
}

// fault is one injected failure and how long the mesh took to complete its
// next step after it began and after it ended.
type fault struct {
	what                 string
	sinceBegin, sinceEnd time.Duration
}

// The multi-host end-to-end test: a three-node NATS JetStream cluster with
// the stream replicated three times, Redis with AOF, the scripted model and
// every service in its own container (two builders, two critics) on a
// private network; a four-task session runs while a builder is killed in
// the middle of a step, the NATS node leading the stream is stopped and
// started again, a critic is cut off the network for 10 s and Redis is
// restarted. The session completes; no shell command ran twice; the replay
// shows every step once, in order; both replicas of the builder and of the
// critic did work; every service reports healthy.
func TestMultiHost(t *testing.T) {
	requireDocker(t)
	c := &cluster{t: t, name: "ralphmh-" + suffix(), image: ralphImage(t), handled: map[string]float64{},
		natsURL: "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	t.Cleanup(func() {
		ids := strings.Fields(combined(context.Background(), "docker", "ps", "-aq", "--filter", "label=org.ralphmesh.test="+c.name))
		if t.Failed() {
			for _, id := range ids {
				name := strings.TrimSpace(combined(context.Background(), "docker", "inspect", "-f", "{{.Name}}", id))
				t.Logf("--- %s\n%s", name, tail(id))
			}
		}
		if len(ids) > 0 {
			combined(context.Background(), "docker", append([]string{"rm", "-f", "-v"}, ids...)...)
		}
		combined(context.Background(), "docker", "network", "rm", c.name)
		combined(context.Background(), "docker", "volume", "rm", c.name+"-ws")
	})
	docker(t, "network", "create", "--label", "org.ralphmesh.test="+c.name, c.name)
	docker(t, "volume", "create", "--label", "org.ralphmesh.test="+c.name, c.name+"-ws")
	start := time.Now()

	routes := "nats://nats-1:6222,nats://nats-2:6222,nats://nats-3:6222"
	for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
		c.run(n, []string{"nats:" + natsMinor(t)}, "--jetstream", "--store_dir", "/data", "--server_name", n,
			"--cluster_name", "ralph", "--cluster", "nats://0.0.0.0:6222", "--routes", routes, "--http_port", "8222")
	}
	c.run("redis", []string{"redis:7"}, "redis-server", "--appendonly", "yes", "--appendfsync", "everysec")
	c.run("model", []string{"--no-healthcheck", "--read-only", "--cap-drop", "ALL",
		"--volume", abs("testdata/multihost.model.yaml") + ":/etc/ralph/model.yaml:ro", c.image},
		"scriptllm", "serve", "--script", "/etc/ralph/model.yaml", "--addr", ":8080")
	eventually(t, 2*time.Minute, "the NATS cluster ready with JetStream", func() (bool, string) {
		for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
			ip := c.ip(n)
			resp, err := http.Get("http://" + ip + ":8222/healthz")
			if err != nil {
				return false, n + ": " + err.Error()
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, n + ": " + resp.Status
			}
		}
		return true, ""
	})

	replicas := []string{"builder-1", "builder-2", "critic-1", "critic-2"}
	for _, r := range replicas {
		c.service(r, strings.TrimRight(r, "-12"))
	}
	var all []string
	all = append(all, replicas...)
	for _, s := range mesh.Services {
		if s != builder.Name && s != critic.Name {
			c.service(s, s)
			all = append(all, s)
		}
	}
	for _, n := range all {
		eventually(t, 2*time.Minute, n+" serving", func() (bool, string) {
			return logged(c.container(n), "service running"), tail(c.container(n))
		})
	}
	fmt.Printf("multihost: 3 NATS nodes, Redis, the model and %d service containers serving in %s\n", len(all), time.Since(start).Round(time.Second))
	pollCtx, stopPolling := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() { c.pollHandled(pollCtx, replicas); close(polled) }()
	defer func() { stopPolling(); <-polled }()

	// The session, followed live by `ralph run --json` in a container of
	// its own.
	session := "mh-" + suffix()
	docker(t, "run", "--rm", "--volume", c.name+"-ws:/workspaces", "--entrypoint", "sh", c.image, "-c", initWorkspace("/workspaces/mh"))
	runArgs := []string{"run", "--rm", "--name", c.container("runner"), "--network", c.name, "--label", "org.ralphmesh.test=" + c.name,
		"--no-healthcheck", "--volume", c.name + "-ws:/workspaces", "--volume", abs("testdata/multihost.prd.yaml") + ":/prd.yaml:ro"}
	for _, e := range c.serviceEnv() {
		runArgs = append(runArgs, "--env", e)
	}
	runArgs = append(runArgs, c.image, "run", "/prd.yaml", "--workspace", "/workspaces/mh", "--session", session, "--json")
	runCtx, cancelRun := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancelRun()
	runner := exec.CommandContext(runCtx, "docker", runArgs...)
	stdout, err := runner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	runErr, err := os.Create(filepath.Join(t.TempDir(), "runner.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer runErr.Close()
	runner.Stderr = runErr
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(runErr.Name())
			t.Logf("ralph run's stderr:\n%s", b)
		}
	})
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	f := &follower{change: make(chan struct{}, 1)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 1<<20), 8<<20)
		for sc.Scan() {
			var env events.Envelope
			if json.Unmarshal(sc.Bytes(), &env) == nil {
				f.add(env)
			}
		}
	}()
	sessionStart := time.Now()

	var faults []fault
	recovered := func(what string, begin, end time.Time) {
		done := f.wait(t, 3*time.Minute, "a step completed after: "+what, begin, stepDone)
		fl := fault{what, done.Sub(begin), max(0, done.Sub(end))}
		faults = append(faults, fl)
		fmt.Printf("multihost: %s: next step completed %s after it began, %s after it ended\n", what,
			fl.sinceBegin.Round(10*time.Millisecond), fl.sinceEnd.Round(10*time.Millisecond))
	}

	// 1. Kill the builder running T1's command, in the middle of it; it is
	// started again as an orchestrator would.
	var victim string
	eventually(t, 2*time.Minute, "a builder running T1's command", func() (bool, string) {
		for _, b := range []string{"builder-1", "builder-2"} {
			out, _ := sh(context.Background(), "docker", "top", c.container(b))
			if strings.Contains(out, "sleep 10") {
				victim = b
				return true, ""
			}
		}
		return false, "no builder runs it"
	})
	begin := time.Now()
	docker(t, "kill", c.container(victim))
	recovered("kill "+victim+" in the middle of a step", begin, time.Now())
	docker(t, "start", c.container(victim))

	// 2. Stop the NATS node leading the stream while T2's command runs,
	// and start it again.
	f.wait(t, 3*time.Minute, "task T2 started", sessionStart, taskStarted("T2"))
	leader, err := c.streamLeader()
	if err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	docker(t, "stop", "--time", "2", c.container(leader))
	time.Sleep(2 * time.Second)
	docker(t, "start", c.container(leader))
	recovered("stop "+leader+" (the stream's leader), start it again", begin, time.Now())

	// 3. Cut a critic off the network for 10 s across T3's review: from 8 s
	// into T3's 15-s command to 18 s. The server drops critic-1's pull
	// requests when they expire (5 s, pkg/bus fetchWait), so the review,
	// asked for at about 15.5 s, can only go to critic-2: both critics do
	// work whatever order their pulls took before.
	f.wait(t, 3*time.Minute, "task T3 started", sessionStart, taskStarted("T3"))
	time.Sleep(8 * time.Second)
	begin = time.Now()
	docker(t, "network", "disconnect", c.name, c.container("critic-1"))
	time.Sleep(10 * time.Second)
	docker(t, "network", "connect", "--alias", "critic-1", c.name, c.container("critic-1"))
	recovered("cut critic-1 off the network for 10s", begin, time.Now())

	// 4. Restart Redis while T4's command runs (AOF keeps the state).
	f.wait(t, 3*time.Minute, "task T4 started", sessionStart, taskStarted("T4"))
	begin = time.Now()
	docker(t, "restart", "--time", "2", c.container("redis"))
	recovered("restart redis", begin, time.Now())

	<-read
	if err := runner.Wait(); err != nil {
		t.Fatalf("ralph run: %v", err)
	}
	f.mu.Lock()
	got := slices.Clone(f.events)
	f.mu.Unlock()
	if len(got) == 0 || got[len(got)-1].Type != events.SessionCompleted {
		t.Fatalf("the session did not complete: %v", typesOf(got))
	}
	fmt.Printf("multihost: session %s completed in %s\n", session, time.Since(sessionStart).Round(time.Second))

	// No command ran twice: each task's id is in the workspace's log once,
	// and the session's iteration records show each command once.
	log := docker(t, "run", "--rm", "--volume", c.name+"-ws:/workspaces", "--entrypoint", "cat", c.image, "/workspaces/mh/commands.log")
	ids := []string{"T1 run-4f1a9c", "T2 run-b83e07", "T3 run-19d6c2", "T4 run-e5a870"}
	if want := strings.Join(ids, "\n") + "\n"; log != want {
		t.Errorf("commands.log:\n%s\nwant each command's line once, in order:\n%s", log, want)
	}
	replay := docker(t, append(append([]string{"run", "--rm", "--network", c.name, "--no-healthcheck"}, envFlags(c.serviceEnv())...),
		c.image, "replay", session, "--json")...)
	replayed := decodeEvents(t, replay)
	for _, id := range ids {
		runs := 0
		for _, env := range replayed {
			if env.Type != events.IterationCompleted {
				continue
			}
			var r events.IterationRecord
			if err := env.Decode(&r); err != nil {
				t.Fatal(err)
			}
			for _, call := range r.ToolCalls {
				if call.Name == "run" && strings.Contains(string(call.Args), id) {
					runs++
				}
			}
		}
		if runs != 1 {
			t.Errorf("the records show the command of %q %d times, want once", id, runs)
		}
	}
	checkReplay(t, replayed, got)

	// Both replicas of the builder and of the critic did work.
	stopPolling()
	<-polled
	for _, r := range replicas {
		c.mu.Lock()
		n := c.handled[r]
		c.mu.Unlock()
		if n == 0 {
			t.Errorf("%s acked no event: the replicas did not share the work", r)
		}
		fmt.Printf("multihost: %s acked %.0f events\n", r, n)
	}

	fmt.Printf("multihost: recovery times, from the fault to the next completed step (since it began / since it ended):\n")
	for _, fl := range faults {
		fmt.Printf("multihost:   %-55s %8s / %s\n", fl.what, fl.sinceBegin.Round(10*time.Millisecond), fl.sinceEnd.Round(10*time.Millisecond))
	}

	// Every service's health check (ralph health, its /readyz) passes.
	for _, n := range all {
		eventually(t, 90*time.Second, n+" healthy", func() (bool, string) {
			out, _ := sh(context.Background(), "docker", "inspect", "-f", "{{.State.Health.Status}}", c.container(n))
			status := strings.TrimSpace(out)
			return status == "healthy", "health " + status + ": " +
				combined(context.Background(), "docker", "inspect", "-f", "{{range .State.Health.Log}}{{.Output}}{{end}}", c.container(n))
		})
	}
}

func envFlags(env []string) []string {
	var out []string
	for _, e := range env {
		out = append(out, "--env", e)
	}
	return out
}

func decodeEvents(t *testing.T, jsonl string) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	for _, line := range strings.Split(strings.TrimSpace(jsonl), "\n") {
		var env events.Envelope
		if err := json.Unmarshal([]byte(line), &env); err != nil {
			t.Fatalf("replay line %q: %v", line, err)
		}
		out = append(out, env)
	}
	return out
}

func typesOf(envs []events.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = string(e.Type)
	}
	return out
}

// checkReplay: the replay holds every event once, steps in order (never
// going back), iterations numbered 1..N with none missing or repeated, and
// the same events the live follower saw.
func checkReplay(t *testing.T, replayed, live []events.Envelope) {
	t.Helper()
	seen := map[string]bool{}
	step, iteration := 0, 0
	for _, env := range replayed {
		if seen[env.ID] {
			t.Errorf("event %s is in the replay twice", env.ID)
		}
		seen[env.ID] = true
		// The summarizer takes a task's learnings into the memory while
		// the next task runs (best effort, off the loop's path); its
		// event carries the step of the task.completed it answers, so it
		// may follow a later step.
		if env.Type == events.MemoryUpdated {
			continue
		}
		if env.Step < step {
			t.Errorf("event %s (step %d) after step %d: out of order", env.ID, env.Step, step)
		}
		step = max(step, env.Step)
		if env.Type == events.IterationCompleted {
			iteration++
			if env.Step != iteration {
				t.Errorf("iteration.completed of step %d where step %d comes next", env.Step, iteration)
			}
		}
	}
	// ralph run stops at the session's end; the memory of the last task
	// may still follow it in the stream.
	if end := slices.IndexFunc(replayed, func(e events.Envelope) bool { return e.Type == events.SessionCompleted }); end >= 0 {
		for _, env := range replayed[end+1:] {
			if env.Type != events.MemoryUpdated {
				t.Errorf("event %s follows the session's end", env.ID)
			}
		}
		replayed = replayed[:end+1]
	}
	if !slices.Equal(typesOf(replayed), typesOf(live)) {
		t.Errorf("the replay differs from what ralph run followed:\n%v\n%v", typesOf(replayed), typesOf(live))
	}
	fmt.Fprintf(os.Stdout, "multihost: replay: %d events, %d iterations, each once and in order\n", len(replayed), iteration)
}

// natsMinor is the nats image's tag docker-compose.yaml names (the one
// scripts/images.sh makes).
func natsMinor(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*image:\s*nats:(\S+)`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("docker-compose.yaml names no nats image")
	}
	return string(m[1])
}
