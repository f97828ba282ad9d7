package meshbench_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/meshbench"
	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// modelEnv makes the test binary the model server (what `ralph scriptllm
// serve` is to the ralph binary): the benchmark runs the model as a
// process of its own.
const modelEnv = "RALPH_MESHBENCH_TEST_MODEL_SCRIPT"

func TestMain(m *testing.M) {
	if script := os.Getenv(modelEnv); script != "" {
		os.Exit(serveModel(script))
	}
	os.Exit(m.Run())
}

func serveModel(path string) int {
	s, err := scriptllm.LoadScript(path)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	srv := scriptllm.New(s)
	url, err := srv.Start()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer srv.Close()
	fmt.Printf("scriptllm: test model on %s\n", url)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	return 0
}

func testModel(script string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), modelEnv+"="+script)
	return cmd
}

// TestRunPrintsOneLinePerN runs 2 sessions of 5 steps through the whole
// mesh and reads the figures back from the printed line: the form other
// tools parse, and figures that were measured (not their size: timing is
// not asserted).
func TestRunPrintsOneLinePerN(t *testing.T) {
	cfg := meshconfig.New(t)
	o := meshbench.Options{Config: cfg, Sessions: []int{2}, Steps: 5, Model: testModel, Timeout: 2 * time.Minute, WorkspaceFiles: 300}
	if bin := os.Getenv("RALPH_TEST_NATS_SERVER"); bin != "" {
		// The benchmark's own way: a nats-server process it starts, whose
		// CPU it reads.
		o.NATSServer = bin
	} else {
		o.Config.NATS.URL = meshtest.NATSURL(t)
	}
	var out bytes.Buffer
	o.Progress = &out
	rep, err := meshbench.Run(t.Context(), o)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var last string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "mesh sessions=") {
			last = l
		}
	}
	f, err := meshbench.ParseLine(last)
	if err != nil {
		t.Fatalf("%v\nprinted:\n%s", err, out.String())
	}
	if f.Sessions != 2 {
		t.Errorf("sessions=%d, want 2", f.Sessions)
	}
	for name, v := range map[string]float64{"its_per_s": f.ItsPerS, "step_p50_ms": f.StepP50, "step_p99_ms": f.StepP99,
		"floor_ms": f.Floor, "ratio": f.Ratio, "cpu_ms_per_it": f.CPUPerIt} {
		if v <= 0 {
			t.Errorf("%s=%v, want a positive figure; line: %s", name, v, last)
		}
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	if r.Steps != 10 {
		t.Errorf("%d steps measured, want 2 sessions x 5", r.Steps)
	}
	if r.RedisPerStep <= 0 || r.AllocsPerStep <= 0 || r.Floor.RedisTrips <= 0 {
		t.Errorf("Redis round trips %.1f (floor %d), allocations %.0f per step: want positive counts", r.RedisPerStep, r.Floor.RedisTrips, r.AllocsPerStep)
	}
	if o.NATSServer != "" && !r.NATS.Measured {
		t.Error("the nats-server the benchmark started: CPU not measured")
	}
	// The workspace check's sessions: every step but a task's last ran a
	// command, on both workspaces.
	w := rep.Workspace
	if w == nil {
		t.Fatal("no workspace check measured")
	}
	if w.Files != 300 || w.Empty.N != 2*4*5 || w.Large.N != 2*4*5 || w.Empty.First <= 0 || w.Large.Later <= 0 {
		t.Errorf("workspace check %+v: want 300 files, 40 command steps measured on each workspace (2 sessions of 4 tasks of 5)", *w)
	}
	if !strings.Contains(out.String(), "workspace check (RALPH_BUILDER_HASH_WATCH=on): one command per step") {
		t.Errorf("the workspace check was not printed:\n%s", out.String())
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), last) {
		t.Errorf("the Markdown report lacks the line %q", last)
	}
	if !strings.Contains(md.String(), "## The workspace check on a big workspace") {
		t.Error("the Markdown report lacks the workspace check")
	}
}

// With --task-steps 3 every task takes three steps, the first two reading
// a file: a run of 6 steps per session is two tasks each, and every step
// is measured, in its two parts.
func TestRunTasksOfSeveralSteps(t *testing.T) {
	cfg := meshconfig.New(t)
	o := meshbench.Options{Config: cfg, Sessions: []int{2}, Steps: 6, TaskSteps: 3, Model: testModel, Timeout: 2 * time.Minute}
	o.Config.NATS.URL = meshtest.NATSURL(t)
	var out bytes.Buffer
	o.Progress = &out
	rep, err := meshbench.Run(t.Context(), o)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	r := rep.Results[0]
	if r.Steps != 12 {
		t.Errorf("%d steps measured, want 2 sessions x 6", r.Steps)
	}
	if r.ToCompleted <= 0 || r.ToAnalyzed <= 0 || r.ToCompleted+r.ToAnalyzed > 2*r.StepP99 {
		t.Errorf("the step's parts %v and %v: want two positive medians within the step's (p50 %v)", r.ToCompleted, r.ToAnalyzed, r.StepP50)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "tasks of 3 steps each") {
		t.Errorf("the Markdown report does not say the tasks took 3 steps:\n%s", md.String())
	}
}

func TestValidate(t *testing.T) {
	cfg := meshconfig.New(t)
	model := func(string) *exec.Cmd { return exec.Command("true") }
	ok := meshbench.Options{Config: cfg, Sessions: []int{1, 10}, Steps: 5, Model: model}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	noURLs := cfg
	noURLs.NATS.URL, noURLs.Redis.URL = "", ""
	for _, tc := range []struct {
		name string
		edit func(*meshbench.Options)
		want string
	}{
		{"no sessions", func(o *meshbench.Options) { o.Sessions = nil }, "--sessions"},
		{"zero sessions", func(o *meshbench.Options) { o.Sessions = []int{1, 0} }, "--sessions 0"},
		{"too many sessions", func(o *meshbench.Options) { o.Sessions = []int{meshbench.MaxSessions + 1} }, "--sessions"},
		{"zero steps", func(o *meshbench.Options) { o.Steps = 0 }, "--steps 0"},
		{"more steps than tasks", func(o *meshbench.Options) { o.Steps = meshbench.MaxSteps(cfg, 1) + 1 }, "RALPH_PRD_MAX_TASKS"},
		{"zero task steps", func(o *meshbench.Options) { o.TaskSteps = -1 }, "--task-steps -1"},
		{"too many task steps", func(o *meshbench.Options) { o.TaskSteps = meshbench.MaxTaskSteps + 1; o.Steps = 2 * o.TaskSteps }, "--task-steps"},
		{"steps not a multiple of task steps", func(o *meshbench.Options) { o.TaskSteps = 2 }, "multiple of --task-steps 2"},
		{"no model", func(o *meshbench.Options) { o.Model = nil }, "model"},
		{"negative workspace files", func(o *meshbench.Options) { o.WorkspaceFiles = -1 }, "--workspace-files -1"},
		{"no NATS", func(o *meshbench.Options) { o.Config = noURLs; o.RedisServer = "redis-server" }, "--nats-server"},
		{"no Redis", func(o *meshbench.Options) { o.Config = noURLs; o.NATSServer = "nats-server" }, "RALPH_REDIS_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestParseLine(t *testing.T) {
	f, err := meshbench.ParseLine("mesh sessions=100 its_per_s=1234 step_p50_ms=1.20 step_p99_ms=3.40 floor_ms=0.90 ratio=1.33 cpu_ms_per_it=0.95")
	if err != nil {
		t.Fatal(err)
	}
	want := meshbench.Figures{Sessions: 100, ItsPerS: 1234, StepP50: 1.2, StepP99: 3.4, Floor: 0.9, Ratio: 1.33, CPUPerIt: 0.95}
	if f != want {
		t.Errorf("ParseLine = %+v, want %+v", f, want)
	}
	for _, bad := range []string{"", "mesh sessions=1", "mesh sessions=1 its_per_s=1 step_p50_ms=1 step_p99_ms=3.40 floor_ms=0.90 ratio=1.33 cpu_ms_per_it=0.95"} {
		if _, err := meshbench.ParseLine(bad); err == nil {
			t.Errorf("ParseLine(%q): no error", bad)
		}
	}
}
