package meshbench

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// Report is a whole benchmark: the machine and each N's result.
type Report struct {
	Machine Machine
	// Command reproduces the run (set by the caller).
	Command string
	Steps   int
	// TaskSteps is the steps each task took (Options.TaskSteps, 1 at least).
	TaskSteps int
	Results   []Result
	// Workspace is the workspace check's measurement, nil when skipped.
	Workspace *WorkspaceResult
}

// Machine is what the figures were measured on.
type Machine struct {
	Cores        int
	CPU          string
	GoVersion    string
	NATSVersion  string
	RedisVersion string
	// NATSCPU and RedisCPU say whether those servers' CPU was read.
	NATSCPU, RedisCPU bool
	// Load is the load average when the run began: the cores may be
	// shared with other work, which the figures then include.
	Load string
}

func machine(s *servers, load string) Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), NATSVersion: s.natsVersion, RedisVersion: s.redisVersion,
		NATSCPU: s.natsCPU != nil, RedisCPU: s.redisCPU != nil, Load: load}
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if info, err := fs.CPUInfo(); err == nil && len(info) > 0 {
			m.CPU = info[0].ModelName
		}
	}
	if m.CPU == "" {
		m.CPU = runtime.GOARCH
	}
	return m
}

// loadAverage is the system's load average, "1 5 15" minutes ("" when
// /proc does not say).
func loadAverage() string {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return ""
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%.2f %.2f %.2f", l.Load1, l.Load5, l.Load15)
}

// redisTripsHow says how Redis round trips are counted.
const redisTripsHow = "a go-redis hook on the mesh's Redis client: one per command sent alone, one per pipeline or transaction"

// WriteText prints r for people, ending with its Line.
func (r Result) WriteText(w io.Writer) error {
	cpu := func(c CPU) string {
		if !c.Measured {
			return "not measured"
		}
		return fmt.Sprintf("%.2f ms", ms(c.PerIt))
	}
	_, err := fmt.Fprintf(w, `sessions=%d: %d steps in %.1f s
  iterations/s          %.0f
  step p50 / p99        %.2f ms / %.2f ms (iteration.requested -> iteration.analyzed)
  step p50, in parts    %.2f ms to iteration.completed (delivery to the builder, its work), %.2f ms more to iteration.analyzed (delivery to the stuck detector, its analysis)
  longest gap           %.0f ms between consecutive analyzed steps
  CPU per iteration     mesh %s, nats-server %s, redis-server %s; model server %s (apart)
  allocations per step  %.0f (this process)
  Redis round trips     %.1f per step (%s)
  floor                 %.2f ms: JetStream publish -> durable consumer -> ack %.2f ms, %d Redis round trips %.2f ms, one HTTP call to the model %.2f ms
%s
`, r.Sessions, r.Steps, r.Wall.Seconds(), r.ItsPerS(), ms(r.StepP50), ms(r.StepP99), ms(r.ToCompleted), ms(r.ToAnalyzed), ms(r.LongestGap),
		cpu(r.Mesh), cpu(r.NATS), cpu(r.Redis), cpu(r.Model), r.AllocsPerStep, r.RedisPerStep, redisTripsHow,
		ms(r.Floor.Total), ms(r.Floor.JetStream), r.Floor.RedisTrips, ms(r.Floor.Redis), ms(r.Floor.HTTP), r.Line())
	return err
}

// WriteMarkdown writes the report as docs/performance.md has it.
func (rep Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, `# Performance: one step of the mesh

Written by `+"`ralph bench mesh`"+` (internal/meshbench); regenerate it with the command below.

The whole mesh (builder, critic, stuck detector) runs in one process against one JetStream server and
one Redis, with the scripted model (pkg/scriptllm, `+"`ralph scriptllm serve`"+`) answering instantly from a
process of its own. Each of N concurrent sessions takes %d steps: %s, approved by the critic; each N
runs on a fresh mesh (its own prefix), warmed up by one session of %d tasks that is not measured. A
step is measured from iteration.requested to iteration.analyzed (the builder's model call, its tools and
state, iteration.completed, the stuck detector's analysis), by the times the events carry; **to
completed** is the part up to iteration.completed (the step's delivery to the builder and its work
there), **to analyzed** the rest (the delivery to the stuck detector and its analysis), medians.

- **its/s**: steps analyzed per second, from the first session.started to the last step.
- **CPU ms/it**: CPU time (user + system) per step of each process: the mesh from getrusage, the
  servers and the model from /proc/<pid>/stat (Redis's pid from INFO server). **cpu_ms_per_it** is
  mesh + nats-server + Redis, the issue's target; the model server's own is apart.
- **allocs/step**: runtime.MemStats.Mallocs of the mesh process over the run, per step.
- **Redis RT/step**: Redis round trips per step, counted by %s.
  Every round trip of the mesh over the run is counted: that includes the critic's review and the
  task's bookkeeping, not only the step's own, and the floor makes as many.
- **floor**: measured after each N on the same servers, on connections of its own, %d times: one
  JetStream publish -> durable pull consumer -> confirmed ack, as many sequential Redis round trips
  as the step made (rounded), one HTTP call to the model server; the median of the sum.
  **ratio** = step p50 / floor.
- **longest gap**: the longest time between two consecutive analyzed steps (the stall check).

## Machine

| | |
|---|---|
| cores | %d |
| CPU | %s |
| Go | %s |
| nats-server | %s%s |
| Redis | %s%s |
| load average (1, 5, 15 min) when the run began | %s |

## Command

`+"```"+`
%s
`+"```"+`

## Results

| sessions | its/s | step p50 ms | step p99 ms | floor ms | ratio | cpu ms/it | mesh | nats-server | Redis | model | allocs/step | Redis RT/step | longest gap ms |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
`, rep.Steps, rep.shape(), warmupTasks, redisTripsHow, floorRounds, m.Cores, m.CPU, m.GoVersion, m.NATSVersion, notMeasured(m.NATSCPU), m.RedisVersion, notMeasured(m.RedisCPU), m.Load, rep.Command)
	cpu := func(c CPU) string {
		if !c.Measured {
			return "–"
		}
		return fmt.Sprintf("%.2f", ms(c.PerIt))
	}
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "| %d | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %s | %.0f | %.1f | %.0f |\n",
			r.Sessions, r.ItsPerS(), ms(r.StepP50), ms(r.StepP99), ms(r.Floor.Total), r.Ratio(), ms(r.CPUPerIt()),
			cpu(r.Mesh), cpu(r.NATS), cpu(r.Redis), cpu(r.Model), r.AllocsPerStep, r.RedisPerStep, ms(r.LongestGap))
	}
	b.WriteString("\nThe step and the floor, piece by piece (medians, ms):\n\n| sessions | step to completed | step to analyzed | JetStream round trip | Redis round trips | Redis ms | HTTP call |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "| %d | %.2f | %.2f | %.2f | %d | %.2f | %.2f |\n", r.Sessions, ms(r.ToCompleted), ms(r.ToAnalyzed),
			ms(r.Floor.JetStream), r.Floor.RedisTrips, ms(r.Floor.Redis), ms(r.Floor.HTTP))
	}
	if w := rep.Workspace; w != nil {
		fmt.Fprintf(&b, `
## The workspace check on a big workspace

One session of %d tasks of %d steps, every step but the last of a task running one command in the
sandbox (`+"`echo N > out.txt`"+`), on a one-file workspace and on one of %d files (small files in
nested directories, older than the check's racy margin), %d sessions of each, alternating; medians of the steps
that ran a command, in ms, with `+"`RALPH_BUILDER_HASH_WATCH=%s`"+`. A task's first step follows a review
(the critic's verify command may have written, on another host too), so with `+"`on`"+` the check lstat's
every file then, and with `+"`host`"+` (every builder and critic on this host) only what the kernel
(inotify) reported changed, as at the later steps.

| steps | one-file workspace | %d files | difference |
|---|---:|---:|---:|
| a task's first step | %.2f | %.2f | %+.2f |
| its later steps | %.2f | %.2f | %+.2f |
`, wsTasks, wsSteps, w.Files, wsRounds, w.Watch, w.Files,
			ms(w.Empty.First), ms(w.Large.First), ms(w.ExtraFirst()), ms(w.Empty.Later), ms(w.Large.Later), ms(w.Extra()))
	}
	if ts := rep.Targets(); len(ts) > 0 {
		b.WriteString("\n## Targets (issue 13)\n\n| target | want | measured | |\n|---|---|---|---|\n")
		for _, t := range ts {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Want, t.Got, t.verdict())
		}
	}
	b.WriteString("\nThe lines `ralph bench mesh` ends each N with:\n\n```\n")
	for _, r := range rep.Results {
		b.WriteString(r.Line() + "\n")
	}
	b.WriteString("```\n\n## Chart\n\n")
	b.WriteString(rep.Chart())
	_, err := io.WriteString(w, b.String())
	return err
}

// shape says what the sessions' tasks were.
func (rep Report) shape() string {
	if rep.TaskSteps <= 1 {
		return "one task per step, finished by the builder in one model call"
	}
	return fmt.Sprintf("tasks of %d steps each, the first %d reading a file of the workspace each (read_file), the last saying the task is done", rep.TaskSteps, rep.TaskSteps-1)
}

func notMeasured(ok bool) string {
	if ok {
		return ""
	}
	return " (not started by the benchmark: its CPU is not measured)"
}

// chartWidth is the longest bar of the text chart.
const chartWidth = 50

// Chart draws iterations/s and step p99 against N as text bars.
func (rep Report) Chart() string {
	var b strings.Builder
	var topIts float64
	var topP99 time.Duration
	for _, r := range rep.Results {
		topIts, topP99 = max(topIts, r.ItsPerS()), max(topP99, r.StepP99)
	}
	bar := func(v, top float64) string {
		if top <= 0 {
			return ""
		}
		return strings.Repeat("█", max(1, int(v/top*chartWidth+0.5)))
	}
	b.WriteString("```\niterations/s against sessions\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "%6d | %-*s %.0f\n", r.Sessions, chartWidth, bar(r.ItsPerS(), topIts), r.ItsPerS())
	}
	b.WriteString("\nstep p99 (ms) against sessions\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "%6d | %-*s %.2f\n", r.Sessions, chartWidth, bar(float64(r.StepP99), float64(topP99)), ms(r.StepP99))
	}
	b.WriteString("```\n")
	return b.String()
}

// WriteFile writes the Markdown report to path.
func (rep Report) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := rep.WriteMarkdown(f); err != nil {
		f.Close()
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return nil
}

// Figures are what a Line says.
type Figures struct {
	Sessions                                          int
	ItsPerS, StepP50, StepP99, Floor, Ratio, CPUPerIt float64
}

// linePattern is Result.Line's form.
var linePattern = regexp.MustCompile(`^mesh sessions=(\d+) its_per_s=(\d+) step_p50_ms=(\d+\.\d\d) step_p99_ms=(\d+\.\d\d) floor_ms=(\d+\.\d\d) ratio=(\d+\.\d\d) cpu_ms_per_it=(\d+\.\d\d)$`)

// ParseLine reads a line `ralph bench mesh` ends each N with (times in
// milliseconds).
func ParseLine(line string) (Figures, error) {
	m := linePattern.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return Figures{}, fmt.Errorf("not a mesh benchmark line: %q", line)
	}
	var f Figures
	var err error
	if f.Sessions, err = strconv.Atoi(m[1]); err != nil {
		return f, fmt.Errorf("sessions=%s: %w", m[1], err)
	}
	for i, p := range []*float64{&f.ItsPerS, &f.StepP50, &f.StepP99, &f.Floor, &f.Ratio, &f.CPUPerIt} {
		if *p, err = strconv.ParseFloat(m[i+2], 64); err != nil {
			return f, fmt.Errorf("%q: %w", m[i+2], err)
		}
	}
	return f, nil
}
