// Package health owns what a process tells an orchestrator about itself,
// on the listener of /metrics: /healthz says it is alive (every run loop it
// started is still running and its connections have not closed for good;
// failing it gets the process restarted), /readyz that it is ready for work
// (NATS connected, Redis answering, every service's consumer bound, not
// shutting down). Both answer JSON naming each check, 200 or 503. It knows
// nothing of NATS or Redis: the mesh registers its checks as functions.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// DefaultTimeout bounds one check: a Redis that takes longer to answer a
// PING is not ready, and a probe never waits for a dead server's TCP
// timeout.
const DefaultTimeout = 2 * time.Second

// Check reports a problem, or nil; it must give up when ctx ends.
type Check func(ctx context.Context) error

// Result is one check's outcome in a Report.
type Result struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Report is the body of /healthz and /readyz.
type Report struct {
	// Status is "alive" or "not alive" (/healthz), "ready" or "not ready"
	// (/readyz).
	Status string   `json:"status"`
	Checks []Result `json:"checks"`
}

// OK reports whether every check passed.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// Failing names the checks that failed with their errors, "name: error;
// ...", for a log line or a terminal.
func (r Report) Failing() string {
	s := ""
	for _, c := range r.Checks {
		if c.OK {
			continue
		}
		if s != "" {
			s += "; "
		}
		s += c.Name + ": " + c.Error
	}
	return s
}

// loop is where a service's run loop is.
type loop int

const (
	starting loop = iota // its consumer is not bound yet
	bound                // consuming
	ended                // Run returned
)

type named struct {
	name  string
	check Check
}

// Health is one process's probes. The zero value is not usable: New.
type Health struct {
	timeout time.Duration

	mu       sync.Mutex
	live     []named
	ready    []named
	order    []string
	loops    map[string]loop
	endedErr map[string]error
	stopping error
}

// New makes a Health whose checks each get timeout (DefaultTimeout when
// zero or negative).
func New(timeout time.Duration) *Health {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Health{timeout: timeout, loops: map[string]loop{}, endedErr: map[string]error{}}
}

// Live adds a check /healthz runs: something the process cannot recover
// from on its own, such as a connection closed for good.
func (h *Health) Live(name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live = append(h.live, named{name, c})
}

// Ready adds a check /readyz runs: a dependency the process needs now,
// such as a server it must reach.
func (h *Health) Ready(name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = append(h.ready, named{name, c})
}

// Starting records that the process runs service: it is not ready until
// Bound(service), and not alive once its loop Ended while the process was
// not stopping.
func (h *Health) Starting(service string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.loops[service]; !ok {
		h.order = append(h.order, service)
	}
	h.loops[service] = starting
	delete(h.endedErr, service)
}

// Bound records that service's consumer exists and its loop is consuming.
func (h *Health) Bound(service string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.loops[service]; !ok {
		h.order = append(h.order, service)
	}
	h.loops[service] = bound
}

// Ended records that service's run loop returned, with err (nil for a
// clean stop).
func (h *Health) Ended(service string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.loops[service]; !ok {
		h.order = append(h.order, service)
	}
	h.loops[service] = ended
	h.endedErr[service] = err
}

// Stopping records that the process is shutting down because of cause: it
// is no longer ready (no new work should be routed to it) but stays alive
// while it drains.
func (h *Health) Stopping(cause error) {
	if cause == nil {
		cause = errors.New("stopping")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping == nil {
		h.stopping = cause
	}
}

// Liveness runs the live checks and the run loops' state: a loop that
// ended while the process was not stopping is a process to restart.
func (h *Health) Liveness(ctx context.Context) Report {
	h.mu.Lock()
	checks := append([]named(nil), h.live...)
	var loops []Result
	for _, s := range h.order {
		r := Result{Name: "loop " + s, OK: true}
		if h.loops[s] == ended && h.stopping == nil {
			r.OK, r.Error = false, endedText(h.endedErr[s])
		}
		loops = append(loops, r)
	}
	h.mu.Unlock()
	return report("alive", "not alive", append(h.run(ctx, checks), loops...))
}

// Readiness runs the ready checks and the run loops' state: every loop
// must be bound, and the process not stopping.
func (h *Health) Readiness(ctx context.Context) Report {
	h.mu.Lock()
	checks := append([]named(nil), h.ready...)
	var loops []Result
	if h.stopping != nil {
		loops = append(loops, Result{Name: "process", Error: "stopping: " + h.stopping.Error()})
	}
	if len(h.order) == 0 {
		loops = append(loops, Result{Name: "services", Error: "no service started yet"})
	}
	for _, s := range h.order {
		r := Result{Name: "consumer " + s}
		switch h.loops[s] {
		case starting:
			r.Error = "not bound yet"
		case ended:
			r.Error = endedText(h.endedErr[s])
		default:
			r.OK = true
		}
		loops = append(loops, r)
	}
	h.mu.Unlock()
	return report("ready", "not ready", append(h.run(ctx, checks), loops...))
}

func endedText(err error) string {
	if err == nil {
		return "run loop ended"
	}
	return "run loop ended: " + err.Error()
}

func report(good, bad string, results []Result) Report {
	r := Report{Status: good, Checks: results}
	if r.Checks == nil {
		r.Checks = []Result{}
	}
	if !r.OK() {
		r.Status = bad
	}
	return r
}

// run runs checks at once, each under the timeout, in their order.
func (h *Health) run(ctx context.Context, checks []named) []Result {
	out := make([]Result, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, h.timeout)
			defer cancel()
			out[i] = Result{Name: c.name, OK: true}
			if err := c.check(cctx); err != nil {
				out[i] = Result{Name: c.name, Error: err.Error()}
			}
		})
	}
	wg.Wait()
	return out
}

// LiveHandler serves /healthz.
func (h *Health) LiveHandler() http.Handler { return handler(h.Liveness) }

// ReadyHandler serves /readyz.
func (h *Health) ReadyHandler() http.Handler { return handler(h.Readiness) }

func handler(probe func(context.Context) Report) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "GET or HEAD only", http.StatusMethodNotAllowed)
			return
		}
		rep := probe(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !rep.OK() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
}

// Probe asks url (a /healthz or /readyz) and returns its report; err is
// set when no report could be had (nothing listening, not a report). A
// report that is not OK is not an error: the caller reads it.
func Probe(ctx context.Context, client *http.Client, url string) (Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Report{}, fmt.Errorf("probe %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Report{}, fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Report{}, fmt.Errorf("probe %s: read the answer: %w", url, err)
	}
	var rep Report
	if err := json.Unmarshal(body, &rep); err != nil || rep.Status == "" {
		return Report{}, fmt.Errorf("probe %s: HTTP %d without a health report (is this a Ralph mesh process?)", url, resp.StatusCode)
	}
	if (resp.StatusCode == http.StatusOK) != rep.OK() {
		return Report{}, fmt.Errorf("probe %s: HTTP %d does not match the report %q", url, resp.StatusCode, rep.Status)
	}
	return rep, nil
}
