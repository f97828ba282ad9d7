package stuckbench

// The corpus in corpus/ is generated from the trajectories below, so that
// each one reads as a story and the hashes, token counts and iteration
// numbers stay consistent. After changing a trajectory run
//
//	go test ./internal/stuckbench/ -run TestCorpusGenerated -update
//
// and commit the JSONL and labels.json it writes; without -update the test
// fails when the committed files and the generator disagree.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

var update = flag.Bool("update", false, "rewrite corpus/ from corpus_gen_test.go")

// tgen builds one trajectory step by step, keeping a model of the
// workspace (file contents, so that a revert really restores the hash) and
// of the context size.
type tgen struct {
	t     Trajectory
	task  string
	it    int
	files map[string]string
	ctx   int
}

func newGen(file string, label Label, pattern, resembles, kind, desc string) *tgen {
	return &tgen{
		t:     Trajectory{File: file, Label: label, Pattern: pattern, Resembles: resembles, Kind: kind, Description: desc},
		task:  "T1",
		files: map[string]string{},
		ctx:   3200,
	}
}

func stuckT(file, pattern, desc string) *tgen {
	return newGen(file, LabelStuck, pattern, "", "", desc)
}

// healthyT is a healthy trajectory that looks like pattern resembles, of
// look-alike kind kind (what makes it look like a loop: "distinct_reads",
// "polling_with_progress", ...).
func healthyT(file, resembles, kind, desc string) *tgen {
	return newGen(file, LabelHealthy, "", resembles, kind, desc)
}

// seed puts a file in the workspace before the trajectory starts.
func (g *tgen) seed(path, content string) *tgen {
	g.files[path] = content
	return g
}

// loop marks the next iteration as the onset.
func (g *tgen) loop() *tgen {
	g.t.Onset = g.it + 1
	return g
}

// startTask switches to another task for the following iterations.
func (g *tgen) startTask(id string) *tgen {
	g.task = id
	return g
}

type stepOpt func(g *tgen, r *events.IterationRecord)

// step records one iteration: the model's text and what it did. Like the
// builder, a turn without tool calls is a completion claim.
func (g *tgen) step(text string, opts ...stepOpt) *tgen {
	g.it++
	r := events.IterationRecord{Iteration: g.it, TaskID: g.task, AssistantText: text}
	before := g.ctx
	for _, o := range opts {
		o(g, &r)
	}
	if r.Compacted {
		before = g.ctx
	}
	r.ClaimedDone = len(r.ToolCalls) == 0
	grow := 120 + len(text)/4
	for _, c := range r.ToolCalls {
		grow += 30 + (len(c.Args)+len(c.Output)+len(c.Error))/4
	}
	g.ctx += grow
	r.ContextTokens = g.ctx
	r.Usage = events.Usage{InputTokens: before, OutputTokens: 40 + len(text)/4 + 35*len(r.ToolCalls)}
	r.WorkspaceHash = g.hash()
	g.t.Records = append(g.t.Records, r)
	return g
}

func (g *tgen) hash() string {
	paths := make([]string, 0, len(g.files))
	for p := range g.files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	sum := sha256.New()
	fmt.Fprint(sum, g.t.File)
	for _, p := range paths {
		fmt.Fprintf(sum, "%s\x00%s\n", p, g.files[p])
	}
	return "sha256:" + hex.EncodeToString(sum.Sum(nil))
}

func args(kv ...string) json.RawMessage {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func addCall(r *events.IterationRecord, c events.ToolCall) {
	c.ID = fmt.Sprintf("call_%d_%d", r.Iteration, len(r.ToolCalls)+1)
	r.ToolCalls = append(r.ToolCalls, c)
}

func changed(r *events.IterationRecord, path string) {
	if !slices.Contains(r.FilesChanged, path) {
		r.FilesChanged = append(r.FilesChanged, path)
	}
}

func read(path, content string) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		addCall(r, events.ToolCall{Name: "read_file", Args: args("path", path), Output: content})
	}
}

func write(path, content string) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		g.files[path] = content
		addCall(r, events.ToolCall{Name: "write_file", Args: args("path", path, "content", content),
			Output: fmt.Sprintf("wrote %d bytes to %s", len(content), path)})
		changed(r, path)
	}
}

func edit(path, old, new string) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		cur := g.files[path]
		if strings.Contains(cur, old) {
			g.files[path] = strings.Replace(cur, old, new, 1)
		} else {
			// A file the trajectory did not seed: record that it changed.
			g.files[path] = cur + "\x00" + old + "\x00" + new
		}
		addCall(r, events.ToolCall{Name: "edit_file", Args: args("path", path, "old", old, "new", new),
			Output: "replaced 1 occurrence in " + path})
		changed(r, path)
	}
}

func editNotFound(path, old, new string) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		addCall(r, events.ToolCall{Name: "edit_file", Args: args("path", path, "old", old, "new", new),
			Error: fmt.Sprintf("edit_file: argument \"old\" was not found in %q; it must match the file exactly, including whitespace (read_file shows the current content)", path)})
	}
}

// run is a shell command; a generated file (a build artifact, a lock file)
// can be named in touches.
func run(cmd, output string, exit int, touches ...string) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		for _, f := range touches {
			g.files[f] = g.files[f] + "+"
		}
		addCall(r, events.ToolCall{Name: "run", Args: args("command", cmd), Output: output, ExitCode: exit})
	}
}

func search(pattern, path, output string) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		addCall(r, events.ToolCall{Name: "search", Args: args("pattern", pattern, "path", path), Output: output})
	}
}

func listDir(path, output string) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		addCall(r, events.ToolCall{Name: "list_dir", Args: args("path", path), Output: output})
	}
}

func tests(passed, failed int, failing ...string) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		r.Tests = &events.TestResult{Passed: passed, Failed: failed, Failing: failing}
	}
}

// compacted marks the iteration as one whose context was compacted down to
// tokens before it ran.
func compacted(tokens int) stepOpt {
	return func(g *tgen, r *events.IterationRecord) {
		r.Compacted = true
		g.ctx = tokens
	}
}

// ---------------------------------------------------------------------
// Realistic outputs.

func goTestFail(pkg, test, file string, line int, msg, dur string) string {
	return fmt.Sprintf("--- FAIL: %s (0.00s)\n    %s:%d: %s\nFAIL\nFAIL\t%s\t%s\nFAIL\n", test, file, line, msg, pkg, dur)
}

func goTestOK(pkgs ...string) string {
	var b strings.Builder
	for i, p := range pkgs {
		fmt.Fprintf(&b, "ok  \t%s\t0.%03ds\n", p, 11+7*i)
	}
	return b.String()
}

func pytestFail(collected, passed int, nodeid, assertion, tmp, dur string) string {
	return fmt.Sprintf(`============================= test session starts ==============================
platform linux -- Python 3.12.3, pytest-8.2.1, pluggy-1.5.0
rootdir: /work/pipeline
collected %d items

tests/test_export.py ....F.........                                      [100%%]

=================================== FAILURES ===================================
%s

tmp_path = PosixPath('%s')

E       %s

=========================== short test summary info ============================
FAILED %s - %s
========================= 1 failed, %d passed in %s =========================
`, collected, "_____ "+nodeid+" _____", tmp, assertion, nodeid, assertion, passed, dur)
}

func npmEresolve(stamp string) string {
	return `npm ERR! code ERESOLVE
npm ERR! ERESOLVE unable to resolve dependency tree
npm ERR!
npm ERR! While resolving: web@0.1.0
npm ERR! Found: react@18.3.1
npm ERR! node_modules/react
npm ERR!   react@"^18.2.0" from the root project
npm ERR!
npm ERR! Could not resolve dependency:
npm ERR! peer react@"^16.8.5 || ^17.0.0" from react-beautiful-dnd@13.1.1
npm ERR! node_modules/react-beautiful-dnd
npm ERR!   react-beautiful-dnd@"^13.1.1" from the root project
npm ERR!
npm ERR! Fix the upstream dependency conflict, or retry
npm ERR! this command with --force or --legacy-peer-deps
npm ERR!
npm ERR! A complete log of this run can be found in: /root/.npm/_logs/` + stamp + `-debug-0.log
`
}

const ordersHandler = `package api

import (
	"encoding/json"
	"net/http"

	"github.com/acme/orders/internal/store"
)

type Handler struct{ Store *store.Store }

func (h *Handler) GetOrder(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	o, err := h.Store.Order(r.Context(), id)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	json.NewEncoder(w).Encode(o)
}
`

const ordersRoutes = `package api

import "net/http"

func Routes(h *Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", h.GetOrder)
	return mux
}
`

const ordersStore = `package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
)

var ErrNotFound = errors.New("order not found")

type Store struct{ pool *pgxpool.Pool }

func (s *Store) Order(ctx context.Context, id string) (Order, error) {
	var o Order
	err := s.pool.QueryRow(ctx, "SELECT id, total FROM orders WHERE id = $1", id).Scan(&o.ID, &o.Total)
	return o, err
}
`

const configGo = `package config

import (
	"os"
	"time"
)

type Config struct {
	Addr    string
	Timeout time.Duration
}

func Load() Config {
	c := Config{Addr: ":8080", Timeout: 30 * time.Second}
	if v := os.Getenv("ORDERS_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			c.Timeout = d
		}
	}
	return c
}
`

const exportPy = `import csv


def export(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "amount"])
        for r in rows:
            w.writerow([r["id"], r["name"], r["amount"]])
`

// ---------------------------------------------------------------------
// The trajectories.

func corpusTrajectories() []*tgen {
	var all []*tgen
	all = append(all, repetitiveTrajectories()...)
	all = append(all, circularTrajectories()...)
	all = append(all, errorLoopTrajectories()...)
	all = append(all, noProgressTrajectories()...)
	all = append(all, alternatingTrajectories()...)
	all = append(all, monologueTrajectories()...)
	all = append(all, chantingTrajectories()...)
	all = append(all, compactionTrajectories()...)
	return all
}

func repetitiveTrajectories() []*tgen {
	const again = "Let me look at the handler again to see how the order id reaches the store."
	stuck1 := stuckT("stuck_repetitive_reread_handler.jsonl", "repetitive_output",
		"after fixing the route the model says the same sentence and re-reads handler.go three times").
		seed("internal/api/handler.go", ordersHandler).
		step("I'll start by listing the API package.", listDir("internal/api", "handler.go\nroutes.go\nroutes_test.go")).
		step("The route uses a path value; reading routes.go.", read("internal/api/routes.go", ordersRoutes)).
		step("Adding the DELETE route.", edit("internal/api/routes.go", `mux.HandleFunc("GET /orders/{id}", h.GetOrder)`,
			`mux.HandleFunc("GET /orders/{id}", h.GetOrder)`+"\n\tmux.HandleFunc(\"DELETE /orders/{id}\", h.DeleteOrder)")).
		step(again, read("internal/api/handler.go", ordersHandler)).
		loop().
		step(again, read("internal/api/handler.go", ordersHandler)).
		step(again, read("internal/api/handler.go", ordersHandler)).
		step(again, read("internal/api/handler.go", ordersHandler))

	claim := "I have added the currency column to the CSV export and updated the tests. The task is complete."
	stuck2 := stuckT("stuck_repetitive_identical_claims.jsonl", "repetitive_output",
		"the critic rejects the claim three times and the model answers with the identical text each time").
		seed("pipeline/export.py", exportPy).
		step("Reading the exporter.", read("pipeline/export.py", exportPy)).
		step("Adding the currency column to the header and rows.", edit("pipeline/export.py", `w.writerow(["id", "name", "amount"])`, `w.writerow(["id", "name", "amount", "currency"])`)).
		step("Running the export tests.", run("pytest -q tests/test_export.py", "14 passed in 0.38s", 0), tests(14, 0)).
		step(claim).
		loop().
		step(claim).
		step(claim)

	const rerun = "The export test still fails on the header. Running pytest again to see the failure."
	fail := pytestFail(14, 13, "tests/test_export.py::test_export_writes_header",
		"AssertionError: assert 'id,name,amount' == 'id,name,amount,currency'", "/tmp/pytest-of-root/pytest-7/test_export_writes_header0", "0.41s")
	stuck3 := stuckT("stuck_repetitive_pytest_same_words.jsonl", "repetitive_output",
		"same sentence, same pytest run and byte-identical failure three times with no edit").
		seed("pipeline/export.py", exportPy).
		step("Running the tests first.", run("pytest -q", fail, 1), tests(13, 1, "test_export_writes_header")).
		step("Reading the exporter.", read("pipeline/export.py", exportPy)).
		loop().
		step(rerun, run("pytest -q tests/test_export.py", fail, 1), tests(13, 1, "test_export_writes_header")).
		step(rerun, run("pytest -q tests/test_export.py", fail, 1), tests(13, 1, "test_export_writes_header")).
		step(rerun, run("pytest -q tests/test_export.py", fail, 1), tests(13, 1, "test_export_writes_header"))

	plan := func(n int) string {
		return fmt.Sprintf("Attempt %d: the migration failed because the orders table already exists. I will run the migration again with the same settings and check the output carefully this time.", n)
	}
	migFail := "migrate: error: migration 0003_add_currency.sql failed: ERROR: relation \"orders\" already exists (SQLSTATE 42P07)\n"
	stuck4 := stuckT("stuck_repetitive_attempt_numbers.jsonl", "repetitive_output",
		"near-identical text that only changes the attempt number, over the same failing migrate call").
		step("Listing the migrations.", listDir("migrations", "0001_init.sql\n0002_customers.sql\n0003_add_currency.sql")).
		step("Reading the new migration.", read("migrations/0003_add_currency.sql", "CREATE TABLE orders (id text primary key, total bigint, currency text);\n")).
		step(plan(1), run("migrate -path migrations -database $DATABASE_URL up", migFail, 1)).
		loop().
		step(plan(2), run("migrate -path migrations -database $DATABASE_URL up", migFail, 1)).
		step(plan(3), run("migrate -path migrations -database $DATABASE_URL up", migFail, 1))

	healthy1 := healthyT("healthy_stock_phrase_rename.jsonl", "repetitive_output", "stock_phrase_over_new_work",
		"the same stock sentence over a rename applied to a different file each iteration").
		step("Searching for the old logger.", search(`log\.Printf`, "internal", "internal/api/handler.go:31: log.Printf(\"get %s\", id)\ninternal/store/pool.go:22: log.Printf(\"connect\")\ninternal/config/config.go:18: log.Printf(\"timeout %v\", d)")).
		step("Switching this file to slog.", edit("internal/api/handler.go", `log.Printf("get %s", id)`, `slog.Info("get order", "id", id)`)).
		step("Switching this file to slog.", edit("internal/store/pool.go", `log.Printf("connect")`, `slog.Info("connect")`)).
		step("Switching this file to slog.", edit("internal/config/config.go", `log.Printf("timeout %v", d)`, `slog.Info("timeout", "value", d)`)).
		step("Building.", run("go build ./...", "", 0)).
		step("Every log.Printf in internal/ now uses slog and the build passes.")

	healthy2 := healthyT("healthy_polling_rollout.jsonl", "repetitive_output", "polling_with_progress",
		"the same words while polling a rollout: three polls time out, but the count of updated replicas moves each time").
		step("Applying the manifest.", run("kubectl apply -f deploy/orders.yaml", "deployment.apps/orders configured\n", 0)).
		step("Waiting for the rollout to finish.", run("kubectl rollout status deploy/orders --timeout=30s", "Waiting for deployment \"orders\" rollout to finish: 0 of 3 updated replicas are available...\nerror: timed out waiting for the condition\n", 1)).
		step("Waiting for the rollout to finish.", run("kubectl rollout status deploy/orders --timeout=30s", "Waiting for deployment \"orders\" rollout to finish: 1 of 3 updated replicas are available...\nerror: timed out waiting for the condition\n", 1)).
		step("Waiting for the rollout to finish.", run("kubectl rollout status deploy/orders --timeout=30s", "Waiting for deployment \"orders\" rollout to finish: 2 of 3 updated replicas are available...\nerror: timed out waiting for the condition\n", 1)).
		step("Waiting for the rollout to finish.", run("kubectl rollout status deploy/orders --timeout=30s", "deployment \"orders\" successfully rolled out\n", 0)).
		step("The orders deployment is rolled out with 3 of 3 replicas available.")

	const fixing = "Fixing the duration parsing and re-running the config tests."
	healthy3 := healthyT("healthy_same_words_edit_test.jsonl", "repetitive_output", "stock_phrase_over_new_work",
		"the same sentence each iteration, but each one edits config.go differently and the failure changes").
		seed("internal/config/config.go", configGo).
		step("Running the config tests.", run("go test ./internal/config/", goTestFail("github.com/acme/orders/internal/config", "TestLoadTimeout", "config_test.go", 21, `Load().Timeout = 30s, want 1m30s (ORDERS_TIMEOUT="90")`, "0.004s"), 1), tests(6, 1, "TestLoadTimeout")).
		step(fixing, edit("internal/config/config.go", "if d, err := time.ParseDuration(v); err == nil {", "if d, err := parseTimeout(v); err == nil {"),
			run("go test ./internal/config/", "# github.com/acme/orders/internal/config\ninternal/config/config.go:16:19: undefined: parseTimeout\nFAIL\tgithub.com/acme/orders/internal/config [build failed]\n", 1)).
		step(fixing, edit("internal/config/config.go", "func Load() Config {", "func parseTimeout(v string) (time.Duration, error) {\n\tif n, err := strconv.Atoi(v); err == nil {\n\t\treturn time.Duration(n) * time.Second, nil\n\t}\n\treturn time.ParseDuration(v)\n}\n\nfunc Load() Config {"),
			run("go test ./internal/config/", "# github.com/acme/orders/internal/config\ninternal/config/config.go:17:13: undefined: strconv\nFAIL\tgithub.com/acme/orders/internal/config [build failed]\n", 1)).
		step(fixing, edit("internal/config/config.go", "import (\n\t\"os\"", "import (\n\t\"os\"\n\t\"strconv\""),
			run("go test ./internal/config/", goTestOK("github.com/acme/orders/internal/config"), 0), tests(7, 0)).
		step("ORDERS_TIMEOUT now accepts plain seconds as well as Go durations; the config tests pass.")

	healthy4 := healthyT("healthy_check_then_read_new_files.jsonl", "repetitive_output", "distinct_reads",
		"\"Let me check ...\" with a different file each time, short exploration before an edit").
		step("Let me check the store first.", read("internal/store/store.go", ordersStore)).
		step("Let me check the handler next.", read("internal/api/handler.go", ordersHandler)).
		step("Let me check the routes next.", read("internal/api/routes.go", ordersRoutes)).
		step("Mapping ErrNotFound to 404 in the handler.", edit("internal/api/handler.go", "http.Error(w, err.Error(), http.StatusInternalServerError)",
			"status := http.StatusInternalServerError\n\t\tif errors.Is(err, store.ErrNotFound) {\n\t\t\tstatus = http.StatusNotFound\n\t\t}\n\t\thttp.Error(w, err.Error(), status)")).
		step("Running the API tests.", run("go test ./internal/api/", goTestOK("github.com/acme/orders/internal/api"), 0), tests(9, 0)).
		step("GET /orders/{id} answers 404 for an unknown order; tests pass.")

	return []*tgen{stuck1, stuck2, stuck3, stuck4, healthy1, healthy2, healthy3, healthy4}
}

func circularTrajectories() []*tgen {
	stuck1 := stuckT("stuck_circular_reread_config.jsonl", "circular_tools",
		"re-reads config.go three times with different words and nothing changing").
		seed("internal/config/config.go", configGo).
		step("Looking at the layout.", listDir(".", "cmd/\ngo.mod\ngo.sum\ninternal/\nREADME.md")).
		step("Reading the config loader.", read("internal/config/config.go", configGo)).
		loop().
		step("I need to see how the timeout default is set.", read("internal/config/config.go", configGo)).
		step("Let me re-check the environment handling in Load.", read("internal/config/config.go", configGo))

	pingPong := stuckT("stuck_alternating_search_list.jsonl", "alternating",
		"ping-pongs between a search and a directory listing with the same results and no change").
		step("Where is the retry policy defined?", search("RetryPolicy", ".", "internal/client/retry.go:9:type RetryPolicy struct {\ninternal/client/client.go:27:\tRetry RetryPolicy")).
		step("Listing the client package.", listDir("internal/client", "client.go\nclient_test.go\nretry.go")).
		loop().
		step("Searching for the policy again to find where it is applied.", search("RetryPolicy", ".", "internal/client/retry.go:9:type RetryPolicy struct {\ninternal/client/client.go:27:\tRetry RetryPolicy")).
		step("Checking which files the client package has.", listDir("internal/client", "client.go\nclient_test.go\nretry.go")).
		step("Where is RetryPolicy used?", search("RetryPolicy", ".", "internal/client/retry.go:9:type RetryPolicy struct {\ninternal/client/client.go:27:\tRetry RetryPolicy"))

	stuck3 := stuckT("stuck_circular_edit_not_found.jsonl", "circular_tools",
		"the same edit_file call fails identically three times; byte-identical results, so circular_tools wins the tie with action_error_loop").
		seed("internal/api/routes.go", ordersRoutes).
		step("Reading the routes.", read("internal/api/routes.go", ordersRoutes)).
		step("Registering the health route.", editNotFound("internal/api/routes.go", "mux := http.NewServeMux()\n    mux.HandleFunc", "mux := http.NewServeMux()\n    mux.HandleFunc(\"GET /healthz\", health)\n    mux.HandleFunc")).
		loop().
		step("That edit should work; trying it again.", editNotFound("internal/api/routes.go", "mux := http.NewServeMux()\n    mux.HandleFunc", "mux := http.NewServeMux()\n    mux.HandleFunc(\"GET /healthz\", health)\n    mux.HandleFunc")).
		step("Applying the health route edit.", editNotFound("internal/api/routes.go", "mux := http.NewServeMux()\n    mux.HandleFunc", "mux := http.NewServeMux()\n    mux.HandleFunc(\"GET /healthz\", health)\n    mux.HandleFunc"))

	gitStatus := "On branch feat/currency\nChanges not staged for commit:\n\tmodified:   pipeline/export.py\n\nno changes added to commit"
	gitDiff := "diff --git a/pipeline/export.py b/pipeline/export.py\n-        w.writerow([\"id\", \"name\", \"amount\"])\n+        w.writerow([\"id\", \"name\", \"amount\", \"currency\"])\n"
	stuck4 := stuckT("stuck_circular_git_status_diff.jsonl", "circular_tools",
		"after an edit the model keeps checking git status and git diff, which never change").
		seed("pipeline/export.py", exportPy).
		step("Adding the currency column.", edit("pipeline/export.py", `w.writerow(["id", "name", "amount"])`, `w.writerow(["id", "name", "amount", "currency"])`)).
		step("Checking what changed.", run("git status", gitStatus, 0), run("git diff", gitDiff, 0)).
		loop().
		step("Let me confirm the diff is what I expect.", run("git diff", gitDiff, 0)).
		step("Verifying the working tree before going on.", run("git status", gitStatus, 0), run("git diff", gitDiff, 0))

	healthy1 := healthyT("healthy_tests_rerun_after_edits.jsonl", "circular_tools", "rerun_after_edit",
		"the same go test command after each edit, failing the same way twice and then passing").
		seed("internal/config/config.go", configGo).
		step("Running the tests.", run("go test ./internal/config/", goTestFail("github.com/acme/orders/internal/config", "TestLoadAddr", "config_test.go", 14, `Load().Addr = ":8080", want ":9090"`, "0.003s"), 1), tests(6, 1, "TestLoadAddr")).
		step("Reading ORDERS_ADDR too.", edit("internal/config/config.go", "c := Config{Addr: \":8080\", Timeout: 30 * time.Second}", "c := Config{Addr: \":8080\", Timeout: 30 * time.Second}\n\tif v := os.Getenv(\"ORDER_ADDR\"); v != \"\" {\n\t\tc.Addr = v\n\t}"),
			run("go test ./internal/config/", goTestFail("github.com/acme/orders/internal/config", "TestLoadAddr", "config_test.go", 14, `Load().Addr = ":8080", want ":9090"`, "0.003s"), 1), tests(6, 1, "TestLoadAddr")).
		step("The variable name was wrong.", edit("internal/config/config.go", `os.Getenv("ORDER_ADDR")`, `os.Getenv("ORDERS_ADDR ")`),
			run("go test ./internal/config/", goTestFail("github.com/acme/orders/internal/config", "TestLoadAddr", "config_test.go", 14, `Load().Addr = ":8080", want ":9090"`, "0.003s"), 1), tests(6, 1, "TestLoadAddr")).
		step("A stray space in the name.", edit("internal/config/config.go", `os.Getenv("ORDERS_ADDR ")`, `os.Getenv("ORDERS_ADDR")`),
			run("go test ./internal/config/", goTestOK("github.com/acme/orders/internal/config"), 0), tests(7, 0)).
		step("ORDERS_ADDR is honoured; the config tests pass.")

	healthy2 := healthyT("healthy_read_edit_read.jsonl", "circular_tools", "rerun_after_edit",
		"reads the same file again after each of its own edits (the content differs each time)").
		seed("internal/api/handler.go", ordersHandler).
		step("Reading the handler.", read("internal/api/handler.go", ordersHandler)).
		step("Adding the not-found mapping.", edit("internal/api/handler.go", "http.Error(w, err.Error(), http.StatusInternalServerError)", "writeError(w, err)")).
		step("Reading it back to place the helper.", read("internal/api/handler.go", strings.Replace(ordersHandler, "http.Error(w, err.Error(), http.StatusInternalServerError)", "writeError(w, err)", 1))).
		step("Adding writeError.", edit("internal/api/handler.go", "func (h *Handler) GetOrder", "func writeError(w http.ResponseWriter, err error) {\n\tstatus := http.StatusInternalServerError\n\tif errors.Is(err, store.ErrNotFound) {\n\t\tstatus = http.StatusNotFound\n\t}\n\thttp.Error(w, err.Error(), status)\n}\n\nfunc (h *Handler) GetOrder")).
		step("Reading the result once more before building.", read("internal/api/handler.go", "package api\n\n// ... writeError and GetOrder\n")).
		step("Building and testing.", run("go test ./internal/api/", goTestOK("github.com/acme/orders/internal/api"), 0), tests(10, 0)).
		step("The handler maps store.ErrNotFound to 404 through writeError; tests pass.")

	healthy3 := healthyT("healthy_reread_after_compaction.jsonl", "circular_tools", "reread_after_compaction",
		"reads two files, the context is compacted, reads them once more and edits").
		seed("internal/store/store.go", ordersStore).
		step("Reading the store.", read("internal/store/store.go", ordersStore)).
		step("Reading the handler.", read("internal/api/handler.go", ordersHandler)).
		step("Searching for callers of Order.", search(`\.Order\(`, "internal", "internal/api/handler.go:14:\to, err := h.Store.Order(r.Context(), id)")).
		step("The summary lost the query; reading the store again.", compacted(2900), read("internal/store/store.go", ordersStore)).
		step("Returning ErrNotFound for no rows.", edit("internal/store/store.go", "return o, err", "if errors.Is(err, pgx.ErrNoRows) {\n\t\treturn o, ErrNotFound\n\t}\n\treturn o, err")).
		step("Testing the store.", run("go test ./internal/store/", goTestOK("github.com/acme/orders/internal/store"), 0), tests(5, 0)).
		step("Store.Order returns ErrNotFound when no row matches.")

	healthy4 := healthyT("healthy_wait_for_db_changing.jsonl", "circular_tools", "polling_with_progress",
		"polls pg_isready while the database container starts; the answer changes").
		step("Starting the database.", run("docker compose up -d db", " Container orders-db-1  Started\n", 0)).
		step("Waiting for Postgres.", run("pg_isready -h localhost -p 5432", "localhost:5432 - no response\n", 2)).
		step("Still starting; checking again.", run("pg_isready -h localhost -p 5432", "localhost:5432 - rejecting connections\n", 1)).
		step("Checking again.", run("pg_isready -h localhost -p 5432", "localhost:5432 - accepting connections\n", 0)).
		step("Running the store integration tests.", run("go test -tags integration ./internal/store/", goTestOK("github.com/acme/orders/internal/store"), 0), tests(12, 0)).
		step("The store integration tests pass against the compose database.")

	stuck2 := stuckT("stuck_circular_batched_reread.jsonl", "circular_tools",
		"each iteration reads something new alongside config.go, which it has already read and which has not changed").
		seed("internal/config/config.go", configGo).
		step("Reading the config loader and its test.", read("internal/config/config.go", configGo), read("internal/config/config_test.go", "func TestLoadTimeout(t *testing.T) { /* ORDERS_TIMEOUT=90 */ }\n")).
		loop().
		step("Reading the config loader and where it is called.", read("internal/config/config.go", configGo), search("config.Load", ".", "cmd/orders/main.go:12:\tcfg := config.Load()")).
		step("Reading the config loader next to the server set-up.", read("internal/config/config.go", configGo), read("cmd/orders/main.go", "package main\n\nfunc main() {\n\tcfg := config.Load()\n\t// ...\n}\n"))

	healthy5 := healthyT("healthy_same_file_across_tasks.jsonl", "circular_tools", "task_switch",
		"two tasks both start by reading config.go; each task reads it twice at most").
		seed("internal/config/config.go", configGo).
		step("Reading the config loader.", read("internal/config/config.go", configGo)).
		step("Checking the default address again before the change.", read("internal/config/config.go", configGo)).
		step("Making the address configurable.", edit("internal/config/config.go", "c := Config{Addr: \":8080\"", "c := Config{Addr: envOr(\"ORDERS_ADDR\", \":8080\")")).
		step("ORDERS_ADDR sets the listen address.").
		startTask("T2").
		step("Reading the config loader for the timeout task.", read("internal/config/config.go", strings.Replace(configGo, "c := Config{Addr: \":8080\"", "c := Config{Addr: envOr(\"ORDERS_ADDR\", \":8080\")", 1))).
		step("Looking at the loader once more for the duration parsing.", read("internal/config/config.go", strings.Replace(configGo, "c := Config{Addr: \":8080\"", "c := Config{Addr: envOr(\"ORDERS_ADDR\", \":8080\")", 1))).
		step("Accepting plain seconds.", edit("internal/config/config.go", "time.ParseDuration(v)", "parseTimeout(v)")).
		step("ORDERS_TIMEOUT accepts plain seconds.")

	return []*tgen{stuck1, stuck2, stuck3, stuck4, pingPong, healthy1, healthy2, healthy3, healthy4, healthy5}
}

func errorLoopTrajectories() []*tgen {
	stuck1 := stuckT("stuck_error_npm_eresolve.jsonl", "action_error_loop",
		"npm install fails with the same ERESOLVE conflict three times; only the debug-log timestamp differs").
		seed("web/package.json", `{"dependencies": {"react": "^18.2.0"}}`).
		step("Adding the drag-and-drop library.", edit("web/package.json", `"react": "^18.2.0"`, `"react": "^18.2.0", "react-beautiful-dnd": "^13.1.1"`)).
		step("Installing dependencies.", run("cd web && npm install", npmEresolve("2026-01-18T10_22_33_123Z"), 1)).
		loop().
		step("The install failed; retrying.", run("cd web && npm install", npmEresolve("2026-01-18T10_23_05_871Z"), 1)).
		step("Maybe the registry was slow. Installing again.", run("cd web && npm install", npmEresolve("2026-01-18T10_23_41_002Z"), 1))

	healthz := func(ms int) string {
		return fmt.Sprintf("curl: (7) Failed to connect to localhost port 8080 after %d ms: Couldn't connect to server\n", ms)
	}
	stuck2 := stuckT("stuck_error_curl_server_not_running.jsonl", "action_error_loop",
		"curls a server that the model never started (background processes do not survive); connection refused three times").
		step("Building the server.", run("go build -o bin/orders ./cmd/orders", "", 0)).
		step("Starting it in the background.", run("./bin/orders &", "", 0)).
		step("Checking the health endpoint.", run("curl -sf http://localhost:8080/healthz", healthz(0), 7)).
		loop().
		step("It may need a moment; waiting and checking again.", run("sleep 2", "", 0), run("curl -sf http://localhost:8080/healthz", healthz(3), 7)).
		step("Checking the health endpoint once more.", run("curl -sf http://localhost:8080/healthz", healthz(1), 7))

	portErr := func(id string) string {
		return " Container orders-db-1  Creating\n Container orders-db-1  Created\n Container orders-db-1  Starting\nError response from daemon: driver failed programming external connectivity on endpoint orders-db-1 (" +
			id + "): Bind for 0.0.0.0:5432 failed: port is already allocated\n"
	}
	stuck3 := stuckT("stuck_error_docker_port_allocated.jsonl", "action_error_loop",
		"docker compose up fails on an allocated port three times, each with a new endpoint id; the model reads files in between").
		step("Reading the compose file.", read("docker-compose.yaml", "services:\n  db:\n    image: postgres:16\n    ports: [\"5432:5432\"]\n")).
		step("Starting the database.", run("docker compose up -d db", portErr("3f9a1c07be52d1e6a8f0c4b2d9e7a615c3b8f2e4d6a1c9b7e5f3a2d8c6b4e1f0"), 1)).
		loop().
		step("Checking the env file for the port.", read(".env", "DATABASE_URL=postgres://orders:orders@localhost:5432/orders\n"),
			run("docker compose up -d db", portErr("a81d4c9e2f7b03c65e1a9d8f4b2c7e0a3d6f9b1c5e8a2d4f7b0c3e6a9d1f4b8c"), 1)).
		step("Trying to bring the database up again.", run("docker compose up -d db", portErr("0c5e8b2d7f1a4c9e6b3d0f8a5c2e7b4d1f9a6c3e0b8d5f2a7c4e1b9d6f3a0c8e"), 1))

	pyFail := func(n int, dur string) string {
		return pytestFail(14, 13, "tests/test_export.py::test_export_writes_header",
			"AssertionError: assert 'id,name,amount' == 'id,name,amount,currency'",
			fmt.Sprintf("/tmp/pytest-of-root/pytest-%d/test_export_writes_header0", n), dur)
	}
	stuck4 := stuckT("stuck_error_pytest_tmp_path.jsonl", "action_error_loop",
		"pytest fails the same assertion three times with no edit; tmp_path and duration differ each run").
		seed("pipeline/export.py", exportPy).
		step("Reading the exporter.", read("pipeline/export.py", exportPy)).
		step("Running the export tests.", run("pytest -q tests/test_export.py", pyFail(7, "0.41s"), 1), tests(13, 1, "test_export_writes_header")).
		loop().
		step("Reading the test to understand the expectation.", read("tests/test_export.py", "def test_export_writes_header(tmp_path):\n    export([], tmp_path / \"out.csv\")\n    assert (tmp_path / \"out.csv\").read_text().splitlines()[0] == \"id,name,amount,currency\"\n"),
			run("pytest -q tests/test_export.py", pyFail(8, "0.39s"), 1), tests(13, 1, "test_export_writes_header")).
		step("Running the export tests again.", run("pytest -q tests/test_export.py", pyFail(9, "0.44s"), 1), tests(13, 1, "test_export_writes_header"))

	goFail := func(dur string) string {
		return goTestFail("github.com/acme/orders/internal/auth", "TestTokenExpiry", "token_test.go", 48, "token expired at 2026-01-18 10:41:07 +0000 UTC, want valid", dur)
	}
	stuck5 := stuckT("stuck_error_go_test_durations.jsonl", "action_error_loop",
		"go test on the auth package fails the same way three times while the model only reads and searches; durations differ").
		step("Running the auth tests.", run("go test ./internal/auth/", goFail("0.012s"), 1), tests(11, 1, "TestTokenExpiry")).
		loop().
		step("Reading the token code.", read("internal/auth/token.go", "package auth\n\nfunc (t Token) Valid(now time.Time) bool { return now.Before(t.Expiry) }\n"),
			run("go test ./internal/auth/", goFail("0.009s"), 1), tests(11, 1, "TestTokenExpiry")).
		step("Searching for where the clock comes from.", search("time.Now", "internal/auth", "internal/auth/token.go:22:\tissued := time.Now()"),
			run("go test ./internal/auth/", goFail("0.014s"), 1), tests(11, 1, "TestTokenExpiry")).
		step("Running the auth tests once more.", run("go test ./internal/auth/", goFail("0.011s"), 1), tests(11, 1, "TestTokenExpiry"))

	const nothingThrown = "Expected app.RefundExceedsCaptureException to be thrown, but nothing was thrown."
	const wrongType = "Unexpected exception type thrown, expected: <app.RefundExceedsCaptureException> but was: <java.lang.IllegalArgumentException>"
	gradle := func(msg string, secs int, executed int) string {
		return fmt.Sprintf(`> Task :app:compileJava UP-TO-DATE
> Task :app:test FAILED

OrderServiceTest > refundCannotExceedCapture() FAILED
    org.opentest4j.AssertionFailedError: %s
        at app.OrderServiceTest.refundCannotExceedCapture(OrderServiceTest.java:42)

12 tests completed, 1 failed

FAILURE: Build failed with an exception.

BUILD FAILED in %ds
5 actionable tasks: %d executed, %d up-to-date
`, msg, secs, executed, 5-executed)
	}
	stuck6 := stuckT("stuck_error_gradle_after_tdd.jsonl", "action_error_loop",
		"a productive test-first start, then the same Gradle test failure re-run with only reads in between; build time and task counts differ each run").
		seed("app/src/main/java/app/OrderService.java", "class OrderService {\n  Refund refund(Order o, long amount) { return new Refund(o, amount); }\n}\n").
		step("Writing the test first.", write("app/src/test/java/app/OrderServiceTest.java", "class OrderServiceTest {\n  @Test void refundCannotExceedCapture() { /* ... */ }\n}\n")).
		step("Running it to see it fail.", run("./gradlew test", gradle(nothingThrown, 6, 3), 1), tests(11, 1, "refundCannotExceedCapture")).
		step("Adding the check.", edit("app/src/main/java/app/OrderService.java", "return new Refund(o, amount);", "if (amount > o.captured()) throw new IllegalArgumentException();\n    return new Refund(o, amount);")).
		step("Running the tests.", run("./gradlew test", gradle(wrongType, 4, 2), 1), tests(11, 1, "refundCannotExceedCapture")).
		step("The wrong exception type; reading the test again.", read("app/src/test/java/app/OrderServiceTest.java", "class OrderServiceTest {\n  @Test void refundCannotExceedCapture() {\n    assertThrows(RefundExceedsCaptureException.class, () -> svc.refund(order, 2000));\n  }\n}\n")).
		loop().
		step("Running the tests again to double-check.", run("./gradlew test", gradle(wrongType, 3, 1), 1), tests(11, 1, "refundCannotExceedCapture")).
		step("Reading the exception class.", read("app/src/main/java/app/RefundExceedsCaptureException.java", "class RefundExceedsCaptureException extends RuntimeException {}\n")).
		step("Running the test suite.", run("./gradlew test", gradle(wrongType, 4, 1), 1), tests(11, 1, "refundCannotExceedCapture")).
		step("Checking the exception hierarchy.", search("RefundExceedsCaptureException", "app/src", "app/src/main/java/app/RefundExceedsCaptureException.java:1:class RefundExceedsCaptureException extends RuntimeException {}")).
		step("Running the tests once more.", run("./gradlew test", gradle(wrongType, 3, 1), 1), tests(11, 1, "refundCannotExceedCapture"))

	healthy1 := healthyT("healthy_npm_fixed_after_failure.jsonl", "action_error_loop", "failure_then_fix",
		"npm install fails with ERESOLVE, the model swaps the library for a maintained fork, install succeeds").
		seed("web/package.json", `{"dependencies": {"react": "^18.2.0", "react-beautiful-dnd": "^13.1.1"}}`).
		step("Installing dependencies.", run("cd web && npm install", npmEresolve("2026-01-18T11_02_10_441Z"), 1)).
		step("react-beautiful-dnd does not support React 18; switching to @hello-pangea/dnd.", edit("web/package.json", `"react-beautiful-dnd": "^13.1.1"`, `"@hello-pangea/dnd": "^16.6.0"`)).
		step("Installing again.", run("cd web && npm install", "added 214 packages, and audited 215 packages in 7s\n\nfound 0 vulnerabilities\n", 0, "web/package-lock.json")).
		step("Updating the import.", edit("web/src/Board.tsx", `from "react-beautiful-dnd"`, `from "@hello-pangea/dnd"`)).
		step("Building.", run("cd web && npm run build", "> web@0.1.0 build\n> vite build\n\n✓ 112 modules transformed.\n✓ built in 2.41s\n", 0)).
		step("The board uses @hello-pangea/dnd, which supports React 18; install and build pass.")

	healthy2 := healthyT("healthy_flaky_test_passes_on_retry.jsonl", "action_error_loop", "transient_failure",
		"a flaky test fails, passes on a re-run, fails again: the changing outcome is not a loop").
		step("Running the client tests.", run("go test ./internal/client/", goTestFail("github.com/acme/orders/internal/client", "TestRetryBackoff", "retry_test.go", 33, "elapsed 212ms, want < 200ms", "0.231s"), 1), tests(17, 1, "TestRetryBackoff")).
		step("A timing assertion; running it again to see if it is flaky.", run("go test ./internal/client/", goTestOK("github.com/acme/orders/internal/client"), 0), tests(18, 0)).
		step("Running it with -count=5.", run("go test -count=5 -run TestRetryBackoff ./internal/client/", goTestFail("github.com/acme/orders/internal/client", "TestRetryBackoff", "retry_test.go", 33, "elapsed 207ms, want < 200ms", "1.020s"), 1)).
		step("It is flaky. Giving the assertion headroom.", edit("internal/client/retry_test.go", "elapsed > 200*time.Millisecond", "elapsed > 400*time.Millisecond"),
			run("go test -count=20 -run TestRetryBackoff ./internal/client/", goTestOK("github.com/acme/orders/internal/client"), 0), tests(18, 0)).
		step("TestRetryBackoff was timing-sensitive; with a 400ms bound it passes 20 runs in a row.")

	healthy3 := healthyT("healthy_compile_errors_one_by_one.jsonl", "action_error_loop", "changing_failures",
		"go build fails after each edit, but each time with the next compile error, until it builds").
		step("Building after the refactor.", run("go build ./...", "# github.com/acme/orders/internal/store\ninternal/store/pool.go:14:9: undefined: pgxpool.Connect\n", 1)).
		step("pgx v5 renamed Connect to New.", edit("internal/store/pool.go", "pgxpool.Connect(ctx, url)", "pgxpool.New(ctx, url)"),
			run("go build ./...", "# github.com/acme/orders/internal/store\ninternal/store/pool.go:21:12: pool.Acquire undefined (type *pgxpool.Pool has no field or method Acquire, but does have method AcquireFunc)\n", 1)).
		step("Using QueryRow directly instead of acquiring.", edit("internal/store/pool.go", "conn, err := pool.Acquire(ctx)", "row := pool.QueryRow(ctx, q)"),
			run("go build ./...", "# github.com/acme/orders/internal/store\ninternal/store/pool.go:23:3: declared and not used: row\n", 1)).
		step("Scanning the row.", edit("internal/store/pool.go", "row := pool.QueryRow(ctx, q)", "err := pool.QueryRow(ctx, q).Scan(&n)"),
			run("go build ./...", "", 0)).
		step("The store builds against pgx v5.")

	healthy4 := healthyT("healthy_retry_after_network_error.jsonl", "action_error_loop", "transient_failure",
		"go get fails twice in a row with two different transient network errors, then succeeds without any change").
		step("Adding the dependency.", run("go get github.com/jackc/pgx/v5@v5.6.0", "go: downloading github.com/jackc/pgx/v5 v5.6.0\ngo: github.com/jackc/pgx/v5@v5.6.0: Get \"https://proxy.golang.org/github.com/jackc/pgx/v5/@v/v5.6.0.zip\": dial tcp 142.250.74.113:443: i/o timeout\n", 1)).
		step("A network timeout; retrying.", run("go get github.com/jackc/pgx/v5@v5.6.0", "go: downloading github.com/jackc/pgx/v5 v5.6.0\ngo: github.com/jackc/pgx/v5@v5.6.0: Get \"https://proxy.golang.org/github.com/jackc/pgx/v5/@v/v5.6.0.zip\": read tcp 10.0.0.4:51824->142.250.74.113:443: read: connection reset by peer\n", 1)).
		step("The proxy is flaky today; one more try.", run("go get github.com/jackc/pgx/v5@v5.6.0", "go: downloading github.com/jackc/pgx/v5 v5.6.0\ngo: added github.com/jackc/pgx/v5 v5.6.0\n", 0, "go.mod", "go.sum")).
		step("Building.", run("go build ./...", "", 0)).
		step("pgx v5.6.0 is in go.mod and the module builds.")

	healthy5 := healthyT("healthy_two_failures_then_new_approach.jsonl", "action_error_loop", "failure_then_fix",
		"an edit fails twice (whitespace mismatch), then the model reads the file and rewrites the function").
		seed("internal/api/routes.go", ordersRoutes).
		step("Registering the health route.", editNotFound("internal/api/routes.go", "mux := http.NewServeMux()\n    mux.HandleFunc", "mux := http.NewServeMux()\n    mux.HandleFunc(\"GET /healthz\", health)\n    mux.HandleFunc")).
		step("Trying the edit again.", editNotFound("internal/api/routes.go", "mux := http.NewServeMux()\n    mux.HandleFunc", "mux := http.NewServeMux()\n    mux.HandleFunc(\"GET /healthz\", health)\n    mux.HandleFunc")).
		step("The file must use tabs; reading it.", read("internal/api/routes.go", ordersRoutes)).
		step("Rewriting routes.go.", write("internal/api/routes.go", strings.Replace(ordersRoutes, "mux := http.NewServeMux()\n", "mux := http.NewServeMux()\n\tmux.HandleFunc(\"GET /healthz\", health)\n", 1))).
		step("Testing.", run("go test ./internal/api/", goTestOK("github.com/acme/orders/internal/api"), 0), tests(10, 0)).
		step("GET /healthz is registered; tests pass.")

	push := func(stamp, msg, id string) string {
		return "The push refers to repository [registry.acme.dev/orders/api]\n5f70bf18a086: Preparing\n" + stamp + " " + msg + " (request id " + id + ")\n"
	}
	stuck7 := stuckT("stuck_error_docker_push_denied.jsonl", "action_error_loop",
		"docker push is refused three times with no login in between; the message varies (denied, unauthorized) along with the timestamp and request id").
		step("Building the image.", run("docker build -t registry.acme.dev/orders/api:1.4 .", "Successfully built 5f70bf18a086\nSuccessfully tagged registry.acme.dev/orders/api:1.4\n", 0)).
		step("Pushing it.", run("docker push registry.acme.dev/orders/api:1.4", push("2026/01/18 10:41:07", "denied: requested access to the resource is denied", "7f3a9c21"), 1)).
		loop().
		step("The registry may be slow; pushing again.", run("docker push registry.acme.dev/orders/api:1.4", push("2026/01/18 10:41:39", "unauthorized: authentication required", "91bd0e4f"), 1)).
		step("One more push.", run("docker push registry.acme.dev/orders/api:1.4", push("2026/01/18 10:42:02", "denied: requested access to the resource is denied", "c0ffee17"), 1))

	return []*tgen{stuck1, stuck2, stuck3, stuck4, stuck5, stuck6, stuck7, healthy1, healthy2, healthy3, healthy4, healthy5}
}

func noProgressTrajectories() []*tgen {
	serverFail := goTestFail("github.com/acme/orders/cmd/orders", "TestServerStarts", "main_test.go", 40, "server did not become ready within 5s", "5.012s")
	const serverMain = "package main\n\nfunc main() {\n\tcfg := config.Load()\n\tsrv := &http.Server{Addr: cfg.Addr, ReadTimeout: cfg.ReadTimeout}\n\tlog.Fatal(srv.ListenAndServe())\n}\n"
	stuck1 := stuckT("stuck_noprogress_reads_cycling.jsonl", "no_progress",
		"after the tests reveal a failure the model reads the start-up code, the env, the fixtures and the probe, then goes round the same four again: nothing new comes back").
		seed("internal/config/config.go", configGo).
		step("Adding the read timeout.", edit("internal/config/config.go", "Timeout time.Duration", "Timeout     time.Duration\n\tReadTimeout time.Duration")).
		step("Running all tests.", run("go test ./...", serverFail, 1), tests(41, 1, "TestServerStarts")).
		step("Looking at the server start-up.", read("cmd/orders/main.go", serverMain)).
		step("Checking the environment the test sets.", run("env | grep ORDERS_", "ORDERS_ADDR=:0\n", 0)).
		step("Listing the test fixtures.", listDir("cmd/orders/testdata", "config.env\nready.txt")).
		step("Searching for the readiness probe.", search("ready", "cmd/orders", "cmd/orders/main_test.go:33:\twaitReady(t, addr, 5*time.Second)")).
		loop().
		step("Going back to the start-up code.", read("cmd/orders/main.go", serverMain)).
		step("Re-checking the environment.", run("env | grep ORDERS_", "ORDERS_ADDR=:0\n", 0)).
		step("Listing the fixtures once more.", listDir("cmd/orders/testdata", "config.env\nready.txt")).
		step("Where is the readiness probe again?", search("ready", "cmd/orders", "cmd/orders/main_test.go:33:\twaitReady(t, addr, 5*time.Second)"))

	loadFail := goTestFail("github.com/acme/orders/internal/config", "TestLoadTimeout", "config_test.go", 21, `Load().Timeout = 30s, want 1m30s (ORDERS_TIMEOUT="90")`, "0.004s")
	stuck7 := stuckT("stuck_noprogress_same_failure_no_edits.jsonl", "no_progress",
		"the same failing test run five ways (package, pattern, -v, -count=1, the Makefile's target) with no change in between: every run answers the same").
		seed("internal/config/config.go", configGo).
		step("Running the config tests.", run("go test ./internal/config/", loadFail, 1), tests(6, 1, "TestLoadTimeout")).
		loop().
		step("Running only the failing test.", run("go test -run TestLoadTimeout ./internal/config/", loadFail, 1), tests(0, 1, "TestLoadTimeout")).
		step("With -v to see more.", run("go test -v -run TestLoadTimeout ./internal/config/", "=== RUN   TestLoadTimeout\n"+loadFail, 1), tests(0, 1, "TestLoadTimeout")).
		step("Without the test cache.", run("go test -count=1 ./internal/config/", loadFail, 1), tests(6, 1, "TestLoadTimeout")).
		step("Through the Makefile's target.", run("go test ./internal/config/...", loadFail, 1), tests(6, 1, "TestLoadTimeout"))

	parseFail := goTestFail("github.com/acme/orders/internal/config", "TestParseDuration", "duration_test.go", 27, `ParseDuration("90m") = 0s, want 1h30m0s`, "0.004s")
	stuck2 := stuckT("stuck_noprogress_same_failing_test_edits.jsonl", "no_progress",
		"edits duration.go four times in different ways; TestParseDuration fails identically after each").
		seed("internal/config/duration.go", "package config\n\nfunc ParseDuration(s string) time.Duration {\n\tn, _ := strconv.Atoi(strings.TrimSuffix(s, \"m\"))\n\treturn time.Duration(n)\n}\n").
		step("Running the config tests.", run("go test ./internal/config/", parseFail, 1), tests(8, 1, "TestParseDuration")).
		loop().
		step("Trimming whitespace first.", edit("internal/config/duration.go", "strings.TrimSuffix(s, \"m\")", "strings.TrimSuffix(strings.TrimSpace(s), \"m\")"),
			run("go test ./internal/config/", parseFail, 1), tests(8, 1, "TestParseDuration")).
		step("Handling the error from Atoi.", edit("internal/config/duration.go", "n, _ := strconv.Atoi", "n, err := strconv.Atoi"),
			run("go test ./internal/config/", parseFail, 1), tests(8, 1, "TestParseDuration")).
		step("Returning zero on error explicitly.", edit("internal/config/duration.go", "return time.Duration(n)", "if err != nil {\n\t\treturn 0\n\t}\n\treturn time.Duration(n)"),
			run("go test ./internal/config/", parseFail, 1), tests(8, 1, "TestParseDuration")).
		step("Lower-casing the unit.", edit("internal/config/duration.go", "strings.TrimSpace(s)", "strings.ToLower(strings.TrimSpace(s))"),
			run("go test ./internal/config/", parseFail, 1), tests(8, 1, "TestParseDuration"))

	undefined := "# github.com/acme/orders/internal/store\ninternal/store/pool.go:14:9: undefined: pgxpool.Connect\n"
	stuck3 := stuckT("stuck_noprogress_same_error_many_commands.jsonl", "no_progress",
		"the same undefined: pgxpool.Connect from go build, go vet and go test while the model edits go.mod and main.go").
		step("Building.", run("go build ./...", undefined, 1)).
		loop().
		step("Maybe the module version is stale; bumping pgx.", edit("go.mod", "github.com/jackc/pgx/v5 v5.5.0", "github.com/jackc/pgx/v5 v5.6.0"),
			run("go vet ./internal/store/", "# github.com/acme/orders/internal/store\nvet: internal/store/pool.go:14:9: undefined: pgxpool.Connect\n", 1)).
		step("Tidying modules.", run("go mod tidy", "", 0, "go.sum"),
			run("go test ./internal/store/", undefined+"FAIL\tgithub.com/acme/orders/internal/store [build failed]\n", 1)).
		step("Passing the context explicitly in main.", edit("cmd/orders/main.go", "store.Open(url)", "store.Open(context.Background(), url)"),
			run("go build ./...", undefined, 1)).
		step("Clearing the build cache.", run("go clean -cache", "", 0),
			run("go vet ./...", "# github.com/acme/orders/internal/store\nvet: internal/store/pool.go:14:9: undefined: pgxpool.Connect\n", 1))

	headerFail := func(n int, dur string) string {
		return pytestFail(14, 13, "tests/test_export.py::test_export_writes_header",
			"AssertionError: assert 'id,name,amount' == 'id,name,amount,currency'", fmt.Sprintf("/tmp/pytest-of-root/pytest-%d/test_export_writes_header0", n), dur)
	}
	stuck4 := stuckT("stuck_noprogress_pytest_edits_wrong_file.jsonl", "no_progress",
		"keeps editing the CLI wrapper, never the exporter; the same header assertion fails across reads, edits and runs").
		seed("pipeline/cli.py", "import sys\nfrom pipeline.export import export\n\n\ndef main():\n    export(load(sys.argv[1]), sys.argv[2])\n").
		step("Running the tests.", run("pytest -q", headerFail(3, "0.52s"), 1), tests(13, 1, "test_export_writes_header")).
		loop().
		step("Reading the CLI.", read("pipeline/cli.py", "import sys\nfrom pipeline.export import export\n\n\ndef main():\n    export(load(sys.argv[1]), sys.argv[2])\n")).
		step("Passing the columns through the CLI.", edit("pipeline/cli.py", "export(load(sys.argv[1]), sys.argv[2])", "export(load(sys.argv[1]), sys.argv[2], columns=COLUMNS)"),
			run("pytest -q tests/test_export.py", headerFail(4, "0.44s"), 1), tests(13, 1, "test_export_writes_header")).
		step("Defining COLUMNS in the CLI.", edit("pipeline/cli.py", "import sys\n", "import sys\n\nCOLUMNS = [\"id\", \"name\", \"amount\", \"currency\"]\n"),
			run("pytest -q tests/test_export.py", headerFail(5, "0.47s"), 1), tests(13, 1, "test_export_writes_header")).
		step("Running the full suite.", run("pytest -q", headerFail(6, "0.58s"), 1), tests(13, 1, "test_export_writes_header"))

	const ciYAML = "jobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/setup-go@v5\n        with: {go-version: '1.22'}\n      - run: go test ./...\n"
	const ciLog = "--- FAIL: TestLoadTimeout (0.00s)\n    config_test.go:21: Load().Timeout = 30s, want 1m30s\n"
	localOK := goTestOK("github.com/acme/orders/cmd/orders", "github.com/acme/orders/internal/api", "github.com/acme/orders/internal/config")
	stuck5 := stuckT("stuck_noprogress_ci_investigation.jsonl", "no_progress",
		"a CI failure the model cannot reproduce; it goes round the workflow, the local run, the Go version and the CI log twice, changing nothing and learning nothing the second time").
		step("Reading the CI workflow.", read(".github/workflows/ci.yaml", ciYAML)).
		step("Running the tests locally.", run("go test ./...", localOK, 0), tests(42, 0)).
		step("They pass here. Checking the local Go version.", run("go version", "go version go1.26.0 linux/amd64\n", 0)).
		step("Reading the CI log the task attached.", read("ci-failure.log", ciLog)).
		loop().
		step("Back to the workflow to compare.", read(".github/workflows/ci.yaml", ciYAML)).
		step("Running the tests locally again.", run("go test ./...", localOK, 0), tests(42, 0)).
		step("Checking the Go version once more.", run("go version", "go version go1.26.0 linux/amd64\n", 0)).
		step("Re-reading the CI log.", read("ci-failure.log", ciLog))

	tsErr := "src/session.ts(14,22): error TS2339: Property 'userId' does not exist on type 'Session'.\n"
	stuck6 := stuckT("stuck_noprogress_ts_error_across_commands.jsonl", "no_progress",
		"the same TS2339 error from tsc, the build and the tests while the model edits unrelated type files").
		step("Type-checking.", run("cd web && npx tsc --noEmit", tsErr, 2)).
		loop().
		step("Adding userId to the API types.", edit("web/src/api/types.ts", "export interface User {", "export interface User {\n  userId: string;"),
			run("cd web && npm run build", "\n> web@0.1.0 build\n> tsc && vite build\n\n"+tsErr, 2)).
		step("Re-exporting the types.", edit("web/src/api/index.ts", "export * from './client';", "export * from './client';\nexport * from './types';"),
			run("cd web && npx tsc --noEmit", tsErr, 2)).
		step("Reading the session module.", read("web/src/session.ts", "import type { Session } from './auth';\n\nexport function currentUser(s: Session) {\n  return s.userId;\n}\n"),
			run("cd web && npm test -- --run", "\n> web@0.1.0 test\n> tsc --noEmit && vitest --run\n\n"+tsErr, 2)).
		step("Restarting the TypeScript server cache.", run("cd web && rm -rf node_modules/.cache", "", 0),
			run("cd web && npx tsc --noEmit", tsErr, 2))

	healthy6 := healthyT("healthy_investigation_new_reads.jsonl", "no_progress", "distinct_reads",
		"after the tests reveal a failure the model reads the start-up code, the env, the fixtures, the probe and a fixture file, each new, then fixes the cause").
		seed("internal/config/config.go", configGo).
		step("Adding the read timeout.", edit("internal/config/config.go", "Timeout time.Duration", "Timeout     time.Duration\n\tReadTimeout time.Duration")).
		step("Running all tests.", run("go test ./...", serverFail, 1), tests(41, 1, "TestServerStarts")).
		step("Looking at the server start-up.", read("cmd/orders/main.go", serverMain)).
		step("Checking the environment the test sets.", run("env | grep ORDERS_", "ORDERS_ADDR=:0\n", 0)).
		step("Listing the test fixtures.", listDir("cmd/orders/testdata", "config.env\nready.txt")).
		step("Searching for the readiness probe.", search("ready", "cmd/orders", "cmd/orders/main_test.go:33:\twaitReady(t, addr, 5*time.Second)")).
		step("Reading the fixture environment.", read("cmd/orders/testdata/config.env", "ORDERS_READ_TIMEOUT=0\n")).
		step("A zero read timeout must mean the default.", edit("internal/config/config.go", "return c\n}", "if c.ReadTimeout == 0 {\n\t\tc.ReadTimeout = c.Timeout\n\t}\n\treturn c\n}"),
			run("go test ./...", goTestOK("github.com/acme/orders/cmd/orders", "github.com/acme/orders/internal/config"), 0), tests(42, 0)).
		step("A zero ORDERS_READ_TIMEOUT falls back to the request timeout, so the server becomes ready; all tests pass.")

	twelve := healthyT("healthy_twelve_distinct_reads.jsonl", "no_progress", "distinct_reads",
		"twelve iterations of reading files not read before, across a service it does not know yet, then the change").
		step("Reading the entry point.", read("cmd/billing/main.go", "package main\n\nfunc main() { /* wires billing */ }\n"))
	for i, f := range []string{"invoice.go", "line.go", "tax.go", "fx.go", "rates.go", "store.go", "handler.go", "routes.go", "events.go", "pdf.go", "mail.go"} {
		twelve.step(fmt.Sprintf("Reading %s (%d of 11 billing files).", f, i+1), read("internal/billing/"+f, "package billing\n\n// "+f+"\n"))
	}
	twelve.step("Rounding converted amounts in fx.go.", edit("internal/billing/fx.go", "// fx.go", "func convert(a int64, r float64) int64 { return int64(math.Round(float64(a) * r)) }"),
		run("go test ./internal/billing/", goTestOK("github.com/acme/billing/internal/billing"), 0), tests(31, 0)).
		step("Converted amounts are rounded to the minor unit; billing tests pass.")

	const readme = "# orders\n\nRun `make dev` to start the service.\n"
	healthy7 := healthyT("healthy_shell_mix_with_repeats.jsonl", "no_progress", "shell_mix_with_repeats",
		"ls, pwd and reads of two files with a repeat or two (the same listing, the same file again), and something new every few steps, then the edit").
		step("What is here?", run("ls", "README.md\ncmd\ngo.mod\ninternal\n", 0)).
		step("Where am I?", run("pwd", "/work/orders\n", 0)).
		step("Reading the entry point.", read("cmd/orders/main.go", serverMain)).
		step("Reading the config loader.", read("internal/config/config.go", configGo)).
		step("Listing again to find the docs.", run("ls", "README.md\ncmd\ngo.mod\ninternal\n", 0)).
		step("Reading the README.", read("README.md", readme)).
		step("Checking the directory once more.", run("pwd", "/work/orders\n", 0)).
		step("Back to the loader for the defaults.", read("internal/config/config.go", configGo)).
		step("Checking the module's Go version.", run("cat go.mod", "module github.com/acme/orders\n\ngo 1.26\n", 0)).
		step("Reading the address from ORDERS_ADDR.", edit("internal/config/config.go", "c := Config{Addr: \":8080\"", "c := Config{Addr: envOr(\"ORDERS_ADDR\", \":8080\")"),
			run("go build ./...", "", 0)).
		step("ORDERS_ADDR sets the listen address; the module builds.")

	healthy1 := healthyT("healthy_build_feature_file_by_file.jsonl", "no_progress", "piecewise_build",
		"an end-to-end test keeps failing the same way while the feature is built one new file per iteration").
		step("Running the e2e test that defines the feature.", run("go test ./e2e/", goTestFail("github.com/acme/orders/e2e", "TestRefundFlow", "refund_test.go", 25, "POST /orders/o-1/refunds: status 404, want 201", "0.091s"), 1), tests(6, 1, "TestRefundFlow")).
		step("Adding the refund model.", write("internal/refund/refund.go", "package refund\n\ntype Refund struct{ ID, OrderID string; Amount int64 }\n"),
			run("go test ./e2e/", goTestFail("github.com/acme/orders/e2e", "TestRefundFlow", "refund_test.go", 25, "POST /orders/o-1/refunds: status 404, want 201", "0.090s"), 1), tests(6, 1, "TestRefundFlow")).
		step("Adding the refund store.", write("internal/refund/store.go", "package refund\n\nfunc (s *Store) Create(ctx context.Context, r Refund) error { /* ... */ }\n"),
			run("go test ./e2e/", goTestFail("github.com/acme/orders/e2e", "TestRefundFlow", "refund_test.go", 25, "POST /orders/o-1/refunds: status 404, want 201", "0.093s"), 1), tests(6, 1, "TestRefundFlow")).
		step("Adding the handler.", write("internal/api/refunds.go", "package api\n\nfunc (h *Handler) CreateRefund(w http.ResponseWriter, r *http.Request) { /* ... */ }\n"),
			run("go test ./e2e/", goTestFail("github.com/acme/orders/e2e", "TestRefundFlow", "refund_test.go", 25, "POST /orders/o-1/refunds: status 404, want 201", "0.088s"), 1), tests(6, 1, "TestRefundFlow")).
		step("Adding the migration.", write("migrations/0004_refunds.sql", "CREATE TABLE refunds (id text primary key, order_id text references orders, amount bigint);\n"),
			run("go test ./e2e/", goTestFail("github.com/acme/orders/e2e", "TestRefundFlow", "refund_test.go", 25, "POST /orders/o-1/refunds: status 404, want 201", "0.095s"), 1), tests(6, 1, "TestRefundFlow")).
		step("Wiring the route.", edit("internal/api/routes.go", `mux.HandleFunc("GET /orders/{id}", h.GetOrder)`, `mux.HandleFunc("GET /orders/{id}", h.GetOrder)`+"\n\tmux.HandleFunc(\"POST /orders/{id}/refunds\", h.CreateRefund)"),
			run("go test ./e2e/", goTestOK("github.com/acme/orders/e2e"), 0), tests(7, 0)).
		step("Refunds are modelled, stored, served at POST /orders/{id}/refunds and migrated; TestRefundFlow passes.")

	healthy2 := healthyT("healthy_tdd_failing_set_shrinks.jsonl", "no_progress", "changing_failures",
		"five test runs in a row with failures, but the failing set shrinks after each edit").
		step("Running the new validation tests.", run("go test ./internal/api/", "--- FAIL: TestValidateEmpty\n--- FAIL: TestValidateTotal\n--- FAIL: TestValidateCurrency\nFAIL\n", 1), tests(9, 3, "TestValidateCurrency", "TestValidateEmpty", "TestValidateTotal")).
		step("Rejecting an empty id.", edit("internal/api/validate.go", "return nil", "if o.ID == \"\" {\n\t\treturn errEmptyID\n\t}\n\treturn nil"),
			run("go test ./internal/api/", "--- FAIL: TestValidateTotal\n--- FAIL: TestValidateCurrency\nFAIL\n", 1), tests(10, 2, "TestValidateCurrency", "TestValidateTotal")).
		step("Rejecting negative totals.", edit("internal/api/validate.go", "return errEmptyID\n\t}", "return errEmptyID\n\t}\n\tif o.Total < 0 {\n\t\treturn errNegativeTotal\n\t}"),
			run("go test ./internal/api/", "--- FAIL: TestValidateCurrency\nFAIL\n", 1), tests(11, 1, "TestValidateCurrency")).
		step("Checking the currency list.", read("internal/api/currency.go", "package api\n\nvar currencies = map[string]bool{\"EUR\": true, \"USD\": true}\n")).
		step("Rejecting unknown currencies.", edit("internal/api/validate.go", "return errNegativeTotal\n\t}", "return errNegativeTotal\n\t}\n\tif !currencies[o.Currency] {\n\t\treturn errCurrency\n\t}"),
			run("go test ./internal/api/", goTestOK("github.com/acme/orders/internal/api"), 0), tests(12, 0)).
		step("Validation rejects empty ids, negative totals and unknown currencies; all API tests pass.")

	healthy3 := healthyT("healthy_batched_exploration.jsonl", "no_progress", "distinct_reads",
		"reads eleven different files in four iterations, then writes the change: exploration, not a stall").
		step("Getting the lay of the land.", listDir(".", "cmd/\ne2e/\ninternal/\nmigrations/\ngo.mod"), listDir("internal", "api/\nauth/\nclient/\nconfig/\nrefund/\nstore/")).
		step("Reading the API layer.", read("internal/api/handler.go", ordersHandler), read("internal/api/routes.go", ordersRoutes), read("internal/api/validate.go", "package api\n\nfunc validate(o Order) error { return nil }\n")).
		step("Reading the store and its migration.", read("internal/store/store.go", ordersStore), read("migrations/0001_init.sql", "CREATE TABLE orders (id text primary key, total bigint);\n"), read("internal/store/pool.go", "package store\n\nfunc Open(ctx context.Context, url string) (*Store, error) { /* ... */ }\n")).
		step("Reading how auth and config are wired.", read("internal/auth/middleware.go", "package auth\n\nfunc Middleware(next http.Handler) http.Handler { /* ... */ }\n"), read("cmd/orders/main.go", "package main\n\nfunc main() { /* ... */ }\n"), read("internal/config/config.go", configGo)).
		step("Adding the list endpoint.", edit("internal/api/routes.go", `mux.HandleFunc("GET /orders/{id}", h.GetOrder)`, `mux.HandleFunc("GET /orders/{id}", h.GetOrder)`+"\n\tmux.HandleFunc(\"GET /orders\", h.ListOrders)"),
			write("internal/api/list.go", "package api\n\nfunc (h *Handler) ListOrders(w http.ResponseWriter, r *http.Request) { /* ... */ }\n")).
		step("Testing.", run("go test ./...", goTestOK("github.com/acme/orders/internal/api", "github.com/acme/orders/internal/store"), 0), tests(44, 0)).
		step("GET /orders lists orders; all tests pass.")

	healthy4 := healthyT("healthy_four_quiet_then_fix.jsonl", "no_progress", "short_investigation",
		"four iterations of investigation without a change (one short of the span), then the fix").
		step("Running the tests.", run("go test ./internal/auth/", goTestFail("github.com/acme/orders/internal/auth", "TestTokenExpiry", "token_test.go", 48, "token expired, want valid", "0.010s"), 1), tests(11, 1, "TestTokenExpiry")).
		step("Reading the token code.", read("internal/auth/token.go", "package auth\n\nfunc (t Token) Valid() bool { return time.Now().Before(t.Expiry) }\n")).
		step("Reading the test.", read("internal/auth/token_test.go", "func TestTokenExpiry(t *testing.T) {\n\ttok := Token{Expiry: fixedNow.Add(time.Hour)}\n\tif !tok.Valid() { t.Fatal(\"token expired, want valid\") }\n}\n")).
		step("Looking for a clock abstraction.", search("type Clock", "internal", "internal/auth/clock.go:5:type Clock func() time.Time")).
		step("Passing the clock into Valid.", edit("internal/auth/token.go", "func (t Token) Valid() bool { return time.Now().Before(t.Expiry) }", "func (t Token) Valid(now Clock) bool { return now().Before(t.Expiry) }"),
			edit("internal/auth/token_test.go", "tok.Valid()", "tok.Valid(func() time.Time { return fixedNow })"),
			run("go test ./internal/auth/", goTestOK("github.com/acme/orders/internal/auth"), 0), tests(12, 0)).
		step("Token.Valid takes a Clock, so the test no longer depends on the wall clock; auth tests pass.")

	healthy5 := healthyT("healthy_debugging_message_changes.jsonl", "no_progress", "changing_failures",
		"the same test fails after every edit for five iterations, but the failure message moves each time").
		seed("pipeline/export.py", exportPy).
		step("Running the export test.", run("pytest -q tests/test_export.py", pytestFail(14, 13, "tests/test_export.py::test_export_amounts", "AssertionError: assert '12.5' == '12.50'", "/tmp/pytest-of-root/pytest-11/test_export_amounts0", "0.40s"), 1), tests(13, 1, "test_export_amounts")).
		step("Formatting amounts with two decimals.", edit("pipeline/export.py", `r["amount"]]`, `f"{r['amount']:.2f}"]`),
			run("pytest -q tests/test_export.py", pytestFail(14, 13, "tests/test_export.py::test_export_amounts", "TypeError: unsupported format string passed to NoneType.__format__", "/tmp/pytest-of-root/pytest-12/test_export_amounts0", "0.38s"), 1), tests(13, 1, "test_export_amounts")).
		step("Some rows have no amount; writing an empty cell for those.", edit("pipeline/export.py", `f"{r['amount']:.2f}"]`, `fmt_amount(r.get("amount"))]`),
			run("pytest -q tests/test_export.py", pytestFail(14, 13, "tests/test_export.py::test_export_amounts", "NameError: name 'fmt_amount' is not defined", "/tmp/pytest-of-root/pytest-13/test_export_amounts0", "0.39s"), 1), tests(13, 1, "test_export_amounts")).
		step("Defining fmt_amount.", edit("pipeline/export.py", "import csv\n", "import csv\nfrom decimal import Decimal\n\n\ndef fmt_amount(a):\n    return \"\" if a is None else f\"{Decimal(a):.2f}\"\n"),
			run("pytest -q tests/test_export.py", pytestFail(14, 13, "tests/test_export.py::test_export_amounts", "decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]", "/tmp/pytest-of-root/pytest-14/test_export_amounts0", "0.41s"), 1), tests(13, 1, "test_export_amounts")).
		step("Amounts can be floats; converting through str.", edit("pipeline/export.py", "Decimal(a)", "Decimal(str(a))"),
			run("pytest -q tests/test_export.py", pytestFail(14, 13, "tests/test_export.py::test_export_amounts", "AssertionError: assert '' == '0.00'", "/tmp/pytest-of-root/pytest-15/test_export_amounts0", "0.40s"), 1), tests(13, 1, "test_export_amounts")).
		step("Zero must be written as 0.00, only None is empty; the check was right, the fixture row has amount 0 as a string.", edit("pipeline/export.py", "if a is None", "if a is None or a == \"\""),
			run("pytest -q tests/test_export.py", "14 passed in 0.37s\n", 0), tests(14, 0)).
		step("Amounts are written with two decimals and missing amounts as empty cells; export tests pass.")

	return []*tgen{stuck1, stuck2, stuck3, stuck4, stuck5, stuck6, stuck7, healthy1, healthy2, healthy3, healthy4, healthy5, healthy6, twelve, healthy7}
}

func alternatingTrajectories() []*tgen {
	timeoutTest := func(want string) string {
		return goTestFail("github.com/acme/orders/internal/config", "TestDefaults", "config_test.go", 12, "Timeout = "+want, "0.003s")
	}
	stuck1 := stuckT("stuck_alternating_edit_revert_timeout.jsonl", "alternating",
		"changes the default timeout 30s->60s to fix one test, which breaks another, and reverts; twice").
		seed("internal/config/config.go", configGo).
		step("Running the config tests.", run("go test ./internal/config/", timeoutTest("30s, want 1m0s"), 1), tests(6, 1, "TestDefaults")).
		step("Reading the defaults.", read("internal/config/config.go", configGo)).
		step("Raising the default timeout to 60s.", edit("internal/config/config.go", "Timeout: 30 * time.Second", "Timeout: 60 * time.Second"),
			run("go test ./internal/config/", goTestFail("github.com/acme/orders/internal/config", "TestServerTimeouts", "server_test.go", 30, "write timeout 60s exceeds the 45s proxy limit", "0.004s"), 1), tests(6, 1, "TestServerTimeouts")).
		loop().
		step("That breaks the proxy limit; going back to 30s.", edit("internal/config/config.go", "Timeout: 60 * time.Second", "Timeout: 30 * time.Second"),
			run("go test ./internal/config/", timeoutTest("30s, want 1m0s"), 1), tests(6, 1, "TestDefaults")).
		step("TestDefaults wants 60s; setting it to 60s.", edit("internal/config/config.go", "Timeout: 30 * time.Second", "Timeout: 60 * time.Second"),
			run("go test ./internal/config/", goTestFail("github.com/acme/orders/internal/config", "TestServerTimeouts", "server_test.go", 30, "write timeout 60s exceeds the 45s proxy limit", "0.004s"), 1), tests(6, 1, "TestServerTimeouts")).
		step("The proxy limit again; reverting to 30s.", edit("internal/config/config.go", "Timeout: 60 * time.Second", "Timeout: 30 * time.Second"),
			run("go test ./internal/config/", timeoutTest("30s, want 1m0s"), 1), tests(6, 1, "TestDefaults"))

	stuck2 := stuckT("stuck_alternating_two_reads.jsonl", "alternating",
		"reads handler.go, then routes.go, then handler.go, then routes.go: same content, nothing changes").
		step("Listing the API package.", listDir("internal/api", "handler.go\nroutes.go\nroutes_test.go")).
		step("Reading the handler.", read("internal/api/handler.go", ordersHandler)).
		step("Now the routes, to see how the handler is registered.", read("internal/api/routes.go", ordersRoutes)).
		loop().
		step("Back to the handler to check the path value name.", read("internal/api/handler.go", ordersHandler)).
		step("And the routes again for the pattern syntax.", read("internal/api/routes.go", ordersRoutes))

	goMod := "module github.com/acme/orders\n\ngo 1.26\n\nrequire github.com/jackc/pgx/v5 v5.5.0\n"
	stuck3 := stuckT("stuck_alternating_gomod_versions.jsonl", "alternating",
		"flips pgx between v5.5.0 and v5.6.0 in go.mod, each version failing to build a different file").
		seed("go.mod", goMod).
		step("Building.", run("go build ./...", "# github.com/acme/orders/internal/store\ninternal/store/pool.go:14:9: undefined: pgxpool.Connect\n", 1)).
		step("Upgrading pgx to v5.6.0.", edit("go.mod", "pgx/v5 v5.5.0", "pgx/v5 v5.6.0"),
			run("go build ./...", "# github.com/acme/orders/internal/store\ninternal/store/batch.go:31:17: b.QueuedQueries undefined (type *pgx.Batch has no field or method QueuedQueries)\n", 1)).
		loop().
		step("v5.6.0 breaks batch.go; going back to v5.5.0.", edit("go.mod", "pgx/v5 v5.6.0", "pgx/v5 v5.5.0"),
			run("go build ./...", "# github.com/acme/orders/internal/store\ninternal/store/pool.go:14:9: undefined: pgxpool.Connect\n", 1)).
		step("pool.go needs v5.6.0; upgrading again.", edit("go.mod", "pgx/v5 v5.5.0", "pgx/v5 v5.6.0"),
			run("go build ./...", "# github.com/acme/orders/internal/store\ninternal/store/batch.go:31:17: b.QueuedQueries undefined (type *pgx.Batch has no field or method QueuedQueries)\n", 1)).
		step("Downgrading to v5.5.0 for batch.go.", edit("go.mod", "pgx/v5 v5.6.0", "pgx/v5 v5.5.0"),
			run("go build ./...", "# github.com/acme/orders/internal/store\ninternal/store/pool.go:14:9: undefined: pgxpool.Connect\n", 1))

	claim := "The export now includes the currency column and the tests pass, so the task is complete."
	headerFail := func(n int) string {
		return pytestFail(14, 13, "tests/test_export.py::test_export_writes_header",
			"AssertionError: assert 'id,name,amount' == 'id,name,amount,currency'", fmt.Sprintf("/tmp/pytest-of-root/pytest-%d/test_export_writes_header0", n), "0.4"+fmt.Sprint(n)+"s")
	}
	stuck4 := stuckT("stuck_alternating_claim_and_test.jsonl", "alternating",
		"claims done, the critic rejects, re-runs the same failing test, claims done again: A/B/A/B with nothing changing").
		seed("pipeline/export.py", exportPy).
		step("Adding the currency to each row.", edit("pipeline/export.py", `r["amount"]]`, `r["amount"], r["currency"]]`)).
		step("Running the tests.", run("pytest -q tests/test_export.py", headerFail(2), 1), tests(13, 1, "test_export_writes_header")).
		step(claim).
		loop().
		step("The critic says the header test fails; running it.", run("pytest -q tests/test_export.py", headerFail(3), 1), tests(13, 1, "test_export_writes_header")).
		step(claim)

	quotesBefore := "import { api } from \"./api\";\n"
	stuck5 := stuckT("stuck_alternating_lint_quotes.jsonl", "alternating",
		"lint wants single quotes, prettier wants double quotes; the model flips index.ts between them").
		seed("web/src/index.ts", quotesBefore).
		step("Linting.", run("cd web && npx eslint src", "/work/web/src/index.ts\n  1:21  error  Strings must use singlequote  quotes\n\n✖ 1 problem (1 error, 0 warnings)\n", 1)).
		step("Switching to single quotes.", edit("web/src/index.ts", "\"./api\"", "'./api'"),
			run("cd web && npx prettier --check src", "Checking formatting...\n[warn] src/index.ts\n[warn] Code style issues found in the above file. Run Prettier with --write to fix.\n", 1)).
		loop().
		step("Prettier wants double quotes; switching back.", edit("web/src/index.ts", "'./api'", "\"./api\""),
			run("cd web && npx eslint src", "/work/web/src/index.ts\n  1:21  error  Strings must use singlequote  quotes\n\n✖ 1 problem (1 error, 0 warnings)\n", 1)).
		step("ESLint wants single quotes.", edit("web/src/index.ts", "\"./api\"", "'./api'"),
			run("cd web && npx prettier --check src", "Checking formatting...\n[warn] src/index.ts\n[warn] Code style issues found in the above file. Run Prettier with --write to fix.\n", 1)).
		step("Back to double quotes for prettier.", edit("web/src/index.ts", "'./api'", "\"./api\""),
			run("cd web && npx eslint src", "/work/web/src/index.ts\n  1:21  error  Strings must use singlequote  quotes\n\n✖ 1 problem (1 error, 0 warnings)\n", 1))

	healthy1 := healthyT("healthy_try_once_and_revert.jsonl", "alternating", "try_and_revert",
		"tries a larger timeout, sees it break a test, reverts once and fixes the test's expectation instead").
		seed("internal/config/config.go", configGo).
		step("Running the config tests.", run("go test ./internal/config/", timeoutTest("30s, want 1m0s"), 1), tests(6, 1, "TestDefaults")).
		step("Trying a 60s default.", edit("internal/config/config.go", "Timeout: 30 * time.Second", "Timeout: 60 * time.Second"),
			run("go test ./internal/config/", goTestFail("github.com/acme/orders/internal/config", "TestServerTimeouts", "server_test.go", 30, "write timeout 60s exceeds the 45s proxy limit", "0.004s"), 1), tests(6, 1, "TestServerTimeouts")).
		step("The proxy limit is a hard constraint; reverting.", edit("internal/config/config.go", "Timeout: 60 * time.Second", "Timeout: 30 * time.Second"),
			run("go test ./internal/config/", timeoutTest("30s, want 1m0s"), 1), tests(6, 1, "TestDefaults")).
		step("Reading the failing test.", read("internal/config/config_test.go", "func TestDefaults(t *testing.T) {\n\tif got := Load().Timeout; got != time.Minute {\n\t\tt.Errorf(\"Timeout = %v, want 1m0s\", got)\n\t}\n}\n")).
		step("The PRD keeps 30s; the test's expectation was stale.", edit("internal/config/config_test.go", "got != time.Minute", "got != 30*time.Second"),
			run("go test ./internal/config/", goTestOK("github.com/acme/orders/internal/config"), 0), tests(7, 0)).
		step("The default stays 30s (under the 45s proxy limit) and TestDefaults now expects it.")

	healthy2 := healthyT("healthy_read_edit_test_cycle.jsonl", "alternating", "work_cycle",
		"a normal cycle: read, edit, test, three times over different functions").
		step("Reading the validator.", read("internal/api/validate.go", "package api\n\nfunc validate(o Order) error { return nil }\n")).
		step("Checking the id.", edit("internal/api/validate.go", "return nil }", "if o.ID == \"\" { return errEmptyID }\n\treturn nil }")).
		step("Testing.", run("go test ./internal/api/", "--- FAIL: TestValidateTotal\nFAIL\n", 1), tests(10, 1, "TestValidateTotal")).
		step("Reading the total test.", read("internal/api/validate_test.go", "func TestValidateTotal(t *testing.T) { /* negative totals are rejected */ }\n")).
		step("Checking the total.", edit("internal/api/validate.go", "return nil }", "if o.Total < 0 { return errNegativeTotal }\n\treturn nil }")).
		step("Testing.", run("go test ./internal/api/", goTestOK("github.com/acme/orders/internal/api"), 0), tests(11, 0)).
		step("Reading the handler to call the validator.", read("internal/api/handler.go", ordersHandler)).
		step("Calling validate in CreateOrder.", edit("internal/api/handler.go", "func (h *Handler) GetOrder", "func (h *Handler) CreateOrder(w http.ResponseWriter, r *http.Request) {\n\t// decode, validate, store\n}\n\nfunc (h *Handler) GetOrder")).
		step("Testing.", run("go test ./internal/api/", goTestOK("github.com/acme/orders/internal/api"), 0), tests(12, 0)).
		step("CreateOrder validates ids and totals; tests pass.")

	healthy3 := healthyT("healthy_poll_two_jobs.jsonl", "alternating", "polling_with_progress",
		"polls two CI jobs in turn while both make progress").
		step("Triggering the pipeline.", run("gh workflow run ci.yaml --ref feat/refunds", "✓ Created workflow_dispatch event for ci.yaml at feat/refunds\n", 0)).
		step("Checking the test job.", run("gh run view --job test --json status,conclusion", `{"status":"queued","conclusion":""}`, 0)).
		step("Checking the lint job.", run("gh run view --job lint --json status,conclusion", `{"status":"in_progress","conclusion":""}`, 0)).
		step("Checking the test job.", run("gh run view --job test --json status,conclusion", `{"status":"in_progress","conclusion":""}`, 0)).
		step("Checking the lint job.", run("gh run view --job lint --json status,conclusion", `{"status":"completed","conclusion":"success"}`, 0)).
		step("Checking the test job.", run("gh run view --job test --json status,conclusion", `{"status":"completed","conclusion":"success"}`, 0)).
		step("Both CI jobs passed on feat/refunds.")

	healthy4 := healthyT("healthy_compaction_then_reread_pair.jsonl", "alternating", "reread_after_compaction",
		"reads a pair of files, the context is compacted, reads the pair again once, then edits").
		step("Reading the handler.", read("internal/api/handler.go", ordersHandler)).
		step("Reading the routes.", read("internal/api/routes.go", ordersRoutes)).
		step("The summary dropped the code; reading the handler again.", compacted(3100), read("internal/api/handler.go", ordersHandler)).
		step("And the routes again.", read("internal/api/routes.go", ordersRoutes)).
		step("Adding the DELETE route and handler.", edit("internal/api/routes.go", `mux.HandleFunc("GET /orders/{id}", h.GetOrder)`, `mux.HandleFunc("GET /orders/{id}", h.GetOrder)`+"\n\tmux.HandleFunc(\"DELETE /orders/{id}\", h.DeleteOrder)"),
			edit("internal/api/handler.go", "func (h *Handler) GetOrder", "func (h *Handler) DeleteOrder(w http.ResponseWriter, r *http.Request) { /* ... */ }\n\nfunc (h *Handler) GetOrder")).
		step("Testing.", run("go test ./internal/api/", goTestOK("github.com/acme/orders/internal/api"), 0), tests(11, 0)).
		step("DELETE /orders/{id} is routed to DeleteOrder; tests pass.")

	return []*tgen{stuck1, stuck2, stuck3, stuck4, stuck5, healthy1, healthy2, healthy3, healthy4}
}

func monologueTrajectories() []*tgen {
	stuck1 := stuckT("stuck_monologue_paraphrased_claims.jsonl", "monologue",
		"the critic keeps pointing at a missing retry limit; the model restates its summary in new words without touching code").
		step("Reading the client.", read("internal/client/client.go", "package client\n\nfunc (c *Client) Do(req *http.Request) (*http.Response, error) { /* ... */ }\n")).
		step("Adding retries with exponential backoff.", write("internal/client/retry.go", "package client\n\nfunc (c *Client) doWithRetry(req *http.Request) (*http.Response, error) {\n\tfor attempt := 0; ; attempt++ { /* backoff */ }\n}\n")).
		step("Testing.", run("go test ./internal/client/", goTestOK("github.com/acme/orders/internal/client"), 0), tests(18, 0)).
		step("I added retries with exponential backoff to the HTTP client in retry.go, and the client tests pass.").
		loop().
		step("The HTTP client now retries failed requests with exponential backoff, implemented in retry.go; the client tests pass.").
		step("Retries with exponential backoff are implemented for the HTTP client in retry.go and the client tests pass, so the task is done.")

	stuck2 := stuckT("stuck_monologue_apologies.jsonl", "monologue",
		"apologises and re-asserts the 404 behaviour three times instead of adding the missing test the critic asked for").
		step("Mapping not-found errors.", edit("internal/api/handler.go", "http.Error(w, err.Error(), http.StatusInternalServerError)", "writeError(w, err)")).
		step("Testing.", run("go test ./internal/api/", goTestOK("github.com/acme/orders/internal/api"), 0), tests(10, 0)).
		step("GET /orders/{id} now returns 404 when the order does not exist, and the API tests pass.").
		loop().
		step("You're right, I apologize for the confusion. GET /orders/{id} returns 404 for an order that does not exist, and the API tests pass.").
		step("I apologize again. To clarify: when the order does not exist, GET /orders/{id} returns 404, and the tests in the API package pass.")

	stuck3 := stuckT("stuck_monologue_insists_tests_pass.jsonl", "monologue",
		"the critic's verify command fails, the model insists the tests pass in three tool-less replies").
		step("Writing the migration.", write("migrations/0004_refunds.sql", "CREATE TABLE refunds (id text primary key, order_id text, amount bigint);\n")).
		step("Running the store tests.", run("go test ./internal/store/", goTestOK("github.com/acme/orders/internal/store"), 0), tests(12, 0)).
		step("The refunds migration is written and the store tests pass.").
		loop().
		step("The store tests pass with the new refunds migration; I believe the verify command result is outdated.").
		step("As stated, the refunds migration is in place and the store tests pass. The verify command must be outdated.").
		step("The refunds migration exists and the store tests pass; the verify command is outdated, so the task is complete.")

	stuck4 := stuckT("stuck_monologue_plan_restated.jsonl", "monologue",
		"asked to implement pagination, the model keeps describing the plan it would follow instead of doing it").
		step("Reading the list handler.", read("internal/api/list.go", "package api\n\nfunc (h *Handler) ListOrders(w http.ResponseWriter, r *http.Request) { /* all orders */ }\n")).
		step("Plan: add limit and cursor query parameters to ListOrders, pass them to the store as a keyset condition on id, and return next_cursor in the response body.").
		loop().
		step("To implement pagination I will add limit and cursor query parameters to ListOrders, pass them to the store as a keyset condition on id, and return next_cursor in the response.").
		step("Pagination plan: ListOrders reads the limit and cursor parameters, the store applies a keyset condition on id, and the response carries next_cursor.")

	stuck5 := stuckT("stuck_monologue_second_task.jsonl", "monologue",
		"task T1 ends with one accepted claim; in T2 the model makes one edit and then restates its claim instead of adding the missing test").
		step("Adding the index migration.", write("migrations/0005_orders_created_at.sql", "CREATE INDEX orders_created_at ON orders (created_at);\n")).
		step("The index migration is written; it speeds up listing orders by creation time.").
		startTask("T2").
		step("Sorting the list endpoint by creation time.", edit("internal/api/list.go", "ORDER BY id", "ORDER BY created_at DESC, id")).
		step("ListOrders now returns the newest orders first, using the created_at index.").
		loop().
		step("The list endpoint returns the newest orders first; it sorts by created_at and uses the new index.").
		step("As implemented, ListOrders sorts by created_at, newest first, backed by the created_at index.")

	healthy1 := healthyT("healthy_two_claims_then_tools.jsonl", "monologue", "claims_then_work",
		"two tool-less replies to the critic, then the model acts on the feedback with tools").
		step("Adding retries.", write("internal/client/retry.go", "package client\n\n// retry with backoff\n")).
		step("Retries with exponential backoff are in retry.go and the client tests pass.").
		step("Retries with exponential backoff are implemented in retry.go; the client tests pass.").
		step("The critic wants a retry cap; adding MaxAttempts.", edit("internal/client/retry.go", "// retry with backoff", "// retry with backoff, at most MaxAttempts times\nconst MaxAttempts = 5"),
			run("go test ./internal/client/", goTestOK("github.com/acme/orders/internal/client"), 0), tests(19, 0)).
		step("Retries stop after MaxAttempts (5); tests pass.")

	healthy2 := healthyT("healthy_revised_written_answer.jsonl", "monologue", "written_answer_revisions",
		"a writing task: each tool-less reply to the critic is a revised answer with substantially new content").
		step("Reading the incident log.", read("incidents/2026-01-12.md", "10:02 p99 latency 4s\n10:05 pool exhausted\n10:20 rollback\n")).
		step("Summary: on 12 January the orders API slowed down because the database connection pool was exhausted; rolling back the release fixed it.").
		step("Revised summary: at 10:02 UTC p99 latency reached four seconds; by 10:05 every pooled Postgres connection was busy because release 2.14 held transactions open across HTTP retries. Reverting 2.14 at 10:20 restored latency.").
		step("Final version with impact and follow-ups: roughly eighteen minutes of degraded checkout, about 3 percent failed payments. Follow-ups: cap client retries, add pool saturation alerting, and forbid network calls inside transactions.")

	healthy3 := healthyT("healthy_claims_with_fixes_between.jsonl", "monologue", "claims_then_work",
		"claims, rejection, a fix with tools, claims again: the tool-less turns are not consecutive").
		step("Adding the currency column.", edit("pipeline/export.py", `"amount"]`, `"amount", "currency"]`)).
		step("The export writes the currency column.").
		step("The critic says rows lack the value; adding it.", edit("pipeline/export.py", `r["amount"]]`, `r["amount"], r["currency"]]`),
			run("pytest -q", "14 passed in 0.40s\n", 0), tests(14, 0)).
		step("The export writes the currency header and value; tests pass.").
		step("The critic wants the README updated; documenting the column.", edit("README.md", "| amount |", "| amount |\n| currency | ISO 4217 code |")).
		step("Currency is exported, tested and documented in the README.")

	healthy4 := healthyT("healthy_explanation_task.jsonl", "monologue", "written_answer_revisions",
		"an explain-the-code task answered in three tool-less turns that each cover a different part").
		step("Reading the auth middleware.", read("internal/auth/middleware.go", "package auth\n\nfunc Middleware(next http.Handler) http.Handler { /* bearer token, verify, context */ }\n")).
		step("The middleware reads the bearer token from the Authorization header, verifies its signature against the JWKS cache, and stores the claims in the request context.").
		step("Expired tokens are rejected with 401 before the signature check, and keys rotate every six hours; a missing kid triggers one JWKS refresh.").
		step("Downstream handlers read claims through auth.FromContext, which panics outside the middleware by design so that unauthenticated routes fail loudly in tests.")

	const notes = "Release 2.15 adds refunds: POST /orders/{id}/refunds creates a refund of at most the captured amount, and every order now carries its currency."
	const upgrade = " Upgrading: apply migration 0004 before deploying the new binary; existing orders get the EUR currency, and the refunds table starts empty."
	healthy5 := healthyT("healthy_release_notes_revisions.jsonl", "monologue", "written_answer_revisions",
		"a writing task: each revision keeps the previous notes and adds the section the critic asked for").
		step("Reading the changelog entries since 2.14.", read("CHANGELOG.md", "- refunds endpoint\n- order currency\n- ORDERS_TIMEOUT accepts seconds\n- 404 for unknown orders\n")).
		step(notes).
		step(notes + upgrade).
		step(notes + upgrade + " Behaviour changes: ORDERS_TIMEOUT accepts plain seconds as well as Go durations, and unknown order ids answer 404 instead of 500, so clients that retried on 500 should stop retrying.")

	return []*tgen{stuck1, stuck2, stuck3, stuck4, stuck5, healthy1, healthy2, healthy3, healthy4, healthy5}
}

func chantingTrajectories() []*tgen {
	const para = "I need to make sure the refund amount never exceeds the captured amount of the order."
	stuck1 := stuckT("stuck_chanting_paragraph_within.jsonl", "chanting",
		"one response degenerates into the same sentence four times in a row").
		step("Reading the refund handler.", read("internal/api/refunds.go", "package api\n\nfunc (h *Handler) CreateRefund(w http.ResponseWriter, r *http.Request) { /* ... */ }\n")).
		step("Reading the order store.", read("internal/store/store.go", ordersStore)).
		loop().
		step("Checking the refund limit. "+para+" "+para+" "+para+" "+para, read("internal/refund/refund.go", "package refund\n\ntype Refund struct{ ID, OrderID string; Amount int64 }\n"))

	cycle := "The test expects a 201 status for a valid refund. The handler returns 404 because the route is missing. "
	stuck2 := stuckT("stuck_chanting_cycle_within.jsonl", "chanting",
		"a response cycles through the same two sentences three times").
		step("Running the e2e test.", run("go test ./e2e/", goTestFail("github.com/acme/orders/e2e", "TestRefundFlow", "refund_test.go", 25, "POST /orders/o-1/refunds: status 404, want 201", "0.091s"), 1), tests(6, 1, "TestRefundFlow")).
		loop().
		step("Looking at the failure. "+cycle+cycle+cycle+"Let me check the routes.", read("internal/api/routes.go", ordersRoutes))

	const signoff = "I will keep verifying every assumption carefully before making any change to the code."
	stuck3 := stuckT("stuck_chanting_appended_signoff.jsonl", "chanting",
		"every response ends with the same long sign-off while the model reads and changes nothing").
		step("Running the tests.", run("go test ./internal/auth/", goTestFail("github.com/acme/orders/internal/auth", "TestTokenExpiry", "token_test.go", 48, "token expired, want valid", "0.010s"), 1), tests(11, 1, "TestTokenExpiry")).
		step("The expiry check fails. "+signoff, read("internal/auth/token.go", "package auth\n\nfunc (t Token) Valid() bool { return time.Now().Before(t.Expiry) }\n")).
		loop().
		step("The token uses the wall clock. "+signoff, read("internal/auth/token_test.go", "func TestTokenExpiry(t *testing.T) { /* fixedNow */ }\n")).
		step("The test uses a fixed time in 2025. "+signoff, search("fixedNow", "internal/auth", "internal/auth/token_test.go:9:var fixedNow = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)"))

	const apology = "I apologize for the oversight and I will be more careful with the remaining steps of this task."
	stuck4 := stuckT("stuck_chanting_apology_appended.jsonl", "chanting",
		"after a failed build each response closes with the same apology; the model runs different diagnostics, nothing changes").
		step("Building the web app.", run("cd web && npm run build", "\n> web@0.1.0 build\n> tsc && vite build\n\nsrc/session.ts(14,22): error TS2339: Property 'userId' does not exist on type 'Session'.\n", 2)).
		step("The build fails on session.ts. "+apology, read("web/src/session.ts", "export function currentUser(s: Session) {\n  return s.userId;\n}\n")).
		loop().
		step("Session comes from auth.ts. "+apology, read("web/src/auth.ts", "export interface Session {\n  user: { id: string };\n}\n")).
		step("Checking the TypeScript version. "+apology, run("cd web && npx tsc --version", "Version 5.5.4\n", 0))

	healthy1 := healthyT("healthy_templated_report.jsonl", "chanting", "template_repeats",
		"a migration report that says the same sentence under three different headings: a template, not a chant").
		step("Checking each service for the deprecated client.", search("oldclient", "services", "services/billing/go.mod:7\nservices/shipping/go.mod:9\nservices/search/go.mod:6")).
		step("Reading the three go.mod files.", read("services/billing/go.mod", "require github.com/acme/oldclient v1.2.0 // indirect\n"), read("services/shipping/go.mod", "require github.com/acme/oldclient v1.2.0 // indirect\n"), read("services/search/go.mod", "require github.com/acme/oldclient v1.2.0 // indirect\n")).
		step("## billing\nThe deprecated client is only an indirect dependency and needs no change.\n## shipping\nThe deprecated client is only an indirect dependency and needs no change.\n## search\nThe deprecated client is only an indirect dependency and needs no change.")

	healthy2 := healthyT("healthy_signoff_while_editing.jsonl", "chanting", "stock_phrase_over_new_work",
		"the same closing sentence on responses that each edit a different file: a verbal tic during real work").
		step("Renaming in the handler. I will run the full test suite once every file is updated.", edit("internal/api/handler.go", "Store.Order(", "Store.GetOrder(")).
		step("Renaming in the list endpoint. I will run the full test suite once every file is updated.", edit("internal/api/list.go", "Store.Orders(", "Store.ListOrders(")).
		step("Renaming in the store. I will run the full test suite once every file is updated.", edit("internal/store/store.go", "func (s *Store) Order(", "func (s *Store) GetOrder(")).
		step("Running the suite.", run("go test ./...", goTestOK("github.com/acme/orders/internal/api", "github.com/acme/orders/internal/store"), 0), tests(44, 0)).
		step("Store methods are renamed to GetOrder and ListOrders across the API; all tests pass.")

	healthy3 := healthyT("healthy_code_block_repeats.jsonl", "chanting", "code_blocks",
		"a response with a code block whose lines repeat (if err != nil { return err }) and a numbered test plan").
		step("Reading the store.", read("internal/store/store.go", ordersStore)).
		step("Here is the plan for the transaction.\n```go\nif err != nil {\n\treturn fmt.Errorf(\"begin refund transaction for this order: %w\", err)\n}\nif err != nil {\n\treturn fmt.Errorf(\"begin refund transaction for this order: %w\", err)\n}\nif err != nil {\n\treturn fmt.Errorf(\"begin refund transaction for this order: %w\", err)\n}\n```\nCase 1: refund of the full captured amount must succeed for the order.\nCase 2: refund of the full captured amount must succeed for the order.\nCase 3: refund of the full captured amount must succeed for the order.",
			write("internal/store/refund.go", "package store\n\nfunc (s *Store) Refund(ctx context.Context, r Refund) error { /* tx */ }\n")).
		step("Testing.", run("go test ./internal/store/", goTestOK("github.com/acme/orders/internal/store"), 0), tests(13, 0)).
		step("Store.Refund runs in one transaction; store tests pass.")

	healthy4 := healthyT("healthy_stock_sentence_exploration.jsonl", "chanting", "stock_phrase_over_new_work",
		"the same whole sentence (no other text) over reads of three different files, then an edit").
		step("Let me read the next file that handles the refund request end to end.", read("internal/api/refunds.go", "package api\n\nfunc (h *Handler) CreateRefund(w http.ResponseWriter, r *http.Request) { /* ... */ }\n")).
		step("Let me read the next file that handles the refund request end to end.", read("internal/refund/service.go", "package refund\n\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error) { /* ... */ }\n")).
		step("Let me read the next file that handles the refund request end to end.", read("internal/refund/store.go", "package refund\n\nfunc (s *Store) Create(ctx context.Context, r Refund) error { /* ... */ }\n")).
		step("Capping the refund at the captured amount.", edit("internal/refund/service.go", "/* ... */", "if amount > captured { return Refund{}, ErrExceedsCapture }"),
			run("go test ./internal/refund/", goTestOK("github.com/acme/orders/internal/refund"), 0), tests(7, 0)).
		step("Refunds above the captured amount are rejected with ErrExceedsCapture; tests pass.")

	healthy5 := healthyT("healthy_quoted_log_lines.jsonl", "chanting", "quoted_material",
		"the model quotes a server log whose retry line repeats, then fixes the cause").
		step("Running the integration tests.", run("go test -tags integration ./internal/store/", goTestFail("github.com/acme/orders/internal/store", "TestMain", "main_test.go", 19, "database not ready after 10s", "10.004s"), 1), tests(0, 1, "TestMain")).
		step("Reading the test log.", read("internal/store/testdata/server.log", strings.Repeat("retrying connection to postgres at localhost:5432 in 2 seconds\n", 5))).
		step("The log explains it:\n> retrying connection to postgres at localhost:5432 in 2 seconds\n> retrying connection to postgres at localhost:5432 in 2 seconds\n> retrying connection to postgres at localhost:5432 in 2 seconds\nNothing starts the database before the tests, so I will start it in TestMain.",
			edit("internal/store/main_test.go", "func TestMain(m *testing.M) {", "func TestMain(m *testing.M) {\n\tstopDB := startPostgres()\n\tdefer stopDB()")).
		step("Running the integration tests.", run("go test -tags integration ./internal/store/", goTestOK("github.com/acme/orders/internal/store"), 0), tests(12, 0)).
		step("TestMain starts a throwaway Postgres, so the integration tests no longer wait for a database that never comes up.")

	stuck5 := stuckT("stuck_chanting_thinking_done.jsonl", "chanting",
		"after two reads one response degenerates into \"Thinking... Done.\" thirty times").
		step("Reading the refund service.", read("internal/refund/service.go", "package refund\n\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error) { /* ... */ }\n")).
		step("Reading the captures.", read("internal/refund/captures.go", "package refund\n\nfunc (s *Service) captured(ctx context.Context, orderID string) (int64, error) { /* ... */ }\n")).
		loop().
		step(strings.Repeat("Thinking... Done. ", 30), read("internal/refund/store.go", "package refund\n\nfunc (s *Store) Create(ctx context.Context, r Refund) error { /* ... */ }\n"))

	stuck6 := stuckT("stuck_chanting_short_thought.jsonl", "chanting",
		"a five-word thought, one per line, repeated four times in one response").
		step("Running the refund tests.", run("go test ./internal/refund/", goTestFail("github.com/acme/orders/internal/refund", "TestRefundCap", "refund_test.go", 18, "refund of 2000 accepted, want ErrExceedsCapture", "0.006s"), 1), tests(6, 1, "TestRefundCap")).
		loop().
		step("The cap is not enforced.\nI should check the service.\nI should check the service.\nI should check the service.\nI should check the service.",
			read("internal/refund/service.go", "package refund\n\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error) { /* ... */ }\n"))

	const noStop = "comparing the refund amount with the captured amount of the order and the refunds already made against it before the new refund is stored "
	stuck7 := stuckT("stuck_chanting_passage_no_stop.jsonl", "chanting",
		"a passage of about 140 characters with no full stop in it, said three times in a row in one response").
		step("Reading the refund service.", read("internal/refund/service.go", "package refund\n\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error) { /* ... */ }\n")).
		loop().
		step("The check I need is "+strings.Repeat(noStop, 3)+"and that is all", read("internal/refund/store.go", "package refund\n\nfunc (s *Store) Create(ctx context.Context, r Refund) error { /* ... */ }\n"))

	healthy6 := healthyT("healthy_list_shared_prefixes.jsonl", "chanting", "list_shared_prefix",
		"a plan whose bullet items all start with the same long phrase, then the work it lists").
		step("Plan:\n- Add the currency column to the CSV export of orders\n- Add the currency column to the CSV export of refunds\n"+
			"- Add the currency column to the CSV export of invoices\n- Add the currency column to the CSV export of payouts",
			search("writerow", "pipeline", "pipeline/orders.py:7\npipeline/refunds.py:7\npipeline/invoices.py:7\npipeline/payouts.py:7")).
		step("Orders first.", edit("pipeline/orders.py", `"amount"]`, `"amount", "currency"]`)).
		step("Then refunds, invoices and payouts.", edit("pipeline/refunds.py", `"amount"]`, `"amount", "currency"]`),
			edit("pipeline/invoices.py", `"amount"]`, `"amount", "currency"]`), edit("pipeline/payouts.py", `"amount"]`, `"amount", "currency"]`)).
		step("Testing.", run("pytest -q", "28 passed in 0.61s\n", 0), tests(28, 0)).
		step("All four CSV exports carry the currency column; tests pass.")

	healthy7 := healthyT("healthy_markdown_table_report.jsonl", "chanting", "table_dividers",
		"a report as a markdown table with dividers and the same cell text in every row").
		step("Checking each service for the deprecated client.", search("oldclient", "services", "services/billing/go.mod:7\nservices/shipping/go.mod:9\nservices/search/go.mod:6")).
		step("| service | uses oldclient | change needed |\n|---|---|---|\n| billing | only as an indirect dependency | none for this migration |\n" +
			"| shipping | only as an indirect dependency | none for this migration |\n| search | only as an indirect dependency | none for this migration |\n" +
			"|---|---|---|\n\n---\n\nNo service imports the deprecated client directly, so nothing needs to change.")

	const key = "The refund must never exceed what was captured for the order."
	healthy8 := healthyT("healthy_repeats_far_apart.jsonl", "chanting", "far_repeats",
		"an explanation that states its key rule at the start, in the middle and at the end, with the reasoning between").
		step("Reading the refund service.", read("internal/refund/service.go", "package refund\n\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error) { /* ... */ }\n")).
		step(key + " The service loads the order's captures and the refunds already made, and subtracts one from the other to get what is left. " +
			key + " Partial captures count one by one, so an order captured in two parts can be refunded up to their sum. " + key)

	healthy9 := healthyT("healthy_code_block_closing.jsonl", "chanting", "code_blocks",
		"three responses in a row end with the same quoted code block (the function under discussion) while the model reads different callers").
		step("Reading the function.", read("internal/refund/service.go", "package refund\n\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error) { /* ... */ }\n")).
		step("Who calls it from the API?\n```go\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error)\n```",
			search("Create(", "internal/api", "internal/api/refunds.go:22:\tr, err := h.Refunds.Create(ctx, id, req.Amount)")).
		step("And from the support tool?\n```go\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error)\n```",
			search("Create(", "cmd/support", "cmd/support/refund.go:40:\tif _, err := svc.Create(ctx, orderID, amt); err != nil {")).
		step("And from the nightly job?\n```go\nfunc (s *Service) Create(ctx context.Context, orderID string, amount int64) (Refund, error)\n```",
			search("Create(", "cmd/nightly", "cmd/nightly/reconcile.go:57:\t_, err := refunds.Create(ctx, o.ID, diff)")).
		step("Adding the idempotency key to every caller.", edit("internal/refund/service.go", "func (s *Service) Create(", "func (s *Service) Create(key string, ")).
		step("Create takes an idempotency key; the three callers are listed for the follow-up.")

	return []*tgen{stuck1, stuck2, stuck3, stuck4, stuck5, stuck6, stuck7, healthy1, healthy2, healthy3, healthy4, healthy5, healthy6, healthy7, healthy8, healthy9}
}

func compactionTrajectories() []*tgen {
	bigStore := strings.Repeat(ordersStore, 12)
	bigHandler := strings.Repeat(ordersHandler, 12)

	stuck1 := stuckT("stuck_compaction_thrash_rereads.jsonl", "compaction_loop",
		"large files fill the context; after each compaction the model re-reads the same files and the context is compacted again").
		step("Adding the currency column to the migration.", write("migrations/0003_add_currency.sql", "ALTER TABLE orders ADD COLUMN currency text NOT NULL DEFAULT 'EUR';\n")).
		step("Reading the store to select the new column.", read("internal/store/store.go", bigStore)).
		step("Reading the handler that encodes orders.", read("internal/api/handler.go", bigHandler)).
		loop().
		step("The summary lost the store details; reading it again.", compacted(6100), read("internal/store/store.go", bigStore)).
		step("Compacted again; the handler is gone from the context, reading it.", compacted(6300), read("internal/api/handler.go", bigHandler))

	stuck2 := stuckT("stuck_compaction_every_iteration.jsonl", "compaction_loop",
		"the context is compacted on every iteration and the model re-runs the same big search each time").
		step("Searching for every use of the order total.", search("Total", ".", strings.Repeat("internal/api/handler.go:17:\tjson.NewEncoder(w).Encode(o.Total)\n", 80))).
		step("Reading the order type.", read("internal/store/order.go", "package store\n\ntype Order struct{ ID string; Total int64 }\n")).
		loop().
		step("Searching for the total's uses again after the summary.", compacted(7000), search("Total", ".", strings.Repeat("internal/api/handler.go:17:\tjson.NewEncoder(w).Encode(o.Total)\n", 80))).
		step("Searching again; the summary dropped the list.", compacted(7050), search("Total", ".", strings.Repeat("internal/api/handler.go:17:\tjson.NewEncoder(w).Encode(o.Total)\n", 80)))

	failing := goTestFail("github.com/acme/orders/internal/store", "TestOrderTotals", "store_test.go", 61, "total = 1250, want 1250.00 EUR", "0.210s")
	stuck3 := stuckT("stuck_compaction_same_failing_test.jsonl", "compaction_loop",
		"a failing test and large fixtures: each compaction is followed by re-reading the fixtures and the same failing run").
		step("Formatting totals with their currency.", edit("internal/store/store.go", "return o, err", "o.Display = fmt.Sprint(o.Total)\n\treturn o, err")).
		step("Running the store tests.", run("go test ./internal/store/", failing, 1), tests(11, 1, "TestOrderTotals")).
		step("Reading the fixtures.", read("internal/store/testdata/orders.json", strings.Repeat(`{"id":"o-1","total":1250,"currency":"EUR"},`, 120))).
		loop().
		step("Context was compacted; re-reading the fixtures.", compacted(5800), read("internal/store/testdata/orders.json", strings.Repeat(`{"id":"o-1","total":1250,"currency":"EUR"},`, 120))).
		step("Running the store tests again.", run("go test ./internal/store/", failing, 1), tests(11, 1, "TestOrderTotals")).
		step("Compacted again; re-reading the fixtures to compare totals.", compacted(5900), read("internal/store/testdata/orders.json", strings.Repeat(`{"id":"o-1","total":1250,"currency":"EUR"},`, 120)))

	stuck4 := stuckT("stuck_compaction_listing_loop.jsonl", "compaction_loop",
		"a monorepo listing too large for the context: after each compaction the model lists the same directories again").
		step("Listing the repository.", listDir(".", strings.Repeat("services/svc-a/\n", 120))).
		step("Listing the services.", listDir("services", strings.Repeat("svc-a/\nsvc-b/\n", 90))).
		loop().
		step("After compaction: listing the repository again to find the billing service.", compacted(6500), listDir(".", strings.Repeat("services/svc-a/\n", 120))).
		step("Listing the services again.", listDir("services", strings.Repeat("svc-a/\nsvc-b/\n", 90))).
		step("Compacted again; starting over with the repository listing.", compacted(6600), listDir(".", strings.Repeat("services/svc-a/\n", 120)))

	healthy1 := healthyT("healthy_compaction_then_edits.jsonl", "compaction_loop", "compaction_then_work",
		"two compactions under context pressure, each followed by re-reading the file to edit and editing it: progress, not a loop").
		step("Reading the store.", read("internal/store/store.go", bigStore)).
		step("Reading the handler.", read("internal/api/handler.go", bigHandler)).
		step("Re-reading the query after compaction and selecting the currency.", compacted(5200), read("internal/store/store.go", bigStore),
			edit("internal/store/store.go", "SELECT id, total FROM orders", "SELECT id, total, currency FROM orders")).
		step("Checking how the handler encodes orders.", read("internal/api/handler.go", bigHandler)).
		step("Compacted again; re-reading the store to scan the new column, then encoding it.", compacted(5600), read("internal/store/store.go", bigStore),
			edit("internal/api/handler.go", "json.NewEncoder(w).Encode(o)", "json.NewEncoder(w).Encode(orderJSON(o))")).
		step("Testing.", run("go test ./...", goTestOK("github.com/acme/orders/internal/api", "github.com/acme/orders/internal/store"), 0), tests(44, 0)).
		step("Orders carry their currency from the database to the JSON response; tests pass.")

	healthy2 := healthyT("healthy_compaction_exploring_new_files.jsonl", "compaction_loop", "compaction_then_work",
		"compactions while exploring a large codebase, each followed by files not read before").
		step("Reading the billing service entry point.", read("services/billing/main.go", strings.Repeat("// billing\n", 250))).
		step("Reading the invoice model.", compacted(5000), read("services/billing/invoice.go", strings.Repeat("// invoice\n", 250))).
		step("Reading the tax rules.", read("services/billing/tax.go", strings.Repeat("// tax\n", 250))).
		step("Reading the currency conversion.", compacted(5100), read("services/billing/fx.go", strings.Repeat("// fx\n", 250)), read("services/billing/rates.go", strings.Repeat("// rates\n", 300))).
		step("Rounding conversions to the currency's minor unit.", edit("services/billing/fx.go", "return amount * rate", "return roundMinor(amount*rate, to)")).
		step("Testing.", run("go test ./services/billing/...", goTestOK("github.com/acme/billing"), 0), tests(31, 0)).
		step("Converted amounts are rounded to the target currency's minor unit; billing tests pass.")

	healthy3 := healthyT("healthy_single_compaction_reread.jsonl", "compaction_loop", "reread_after_compaction",
		"one compaction, a re-read of what the task needs, then the fix").
		step("Running the store tests.", run("go test ./internal/store/", failing, 1), tests(11, 1, "TestOrderTotals")).
		step("Reading the store.", read("internal/store/store.go", bigStore)).
		step("Re-reading the store after compaction.", compacted(5800), read("internal/store/store.go", bigStore)).
		step("Formatting totals with the currency.", edit("internal/store/store.go", "return o, err", "o.Display = formatMoney(o.Total, o.Currency)\n\treturn o, err"),
			run("go test ./internal/store/", goTestOK("github.com/acme/orders/internal/store"), 0), tests(12, 0)).
		step("Order totals are displayed with their currency; store tests pass.")

	healthy4 := healthyT("healthy_compaction_two_tasks.jsonl", "compaction_loop", "task_switch",
		"a compaction in each of two tasks; the second task reads files of its own").
		step("Reading the store for T1.", read("internal/store/store.go", bigStore)).
		step("Adding the index.", compacted(5000), write("migrations/0005_orders_created_at.sql", "CREATE INDEX orders_created_at ON orders (created_at);\n")).
		step("The index migration is written.").
		startTask("T2").
		step("Reading the refund store for T2.", read("internal/refund/store.go", strings.Repeat("// refund store\n", 250))).
		step("Reading the refund service after compaction.", compacted(5200), read("internal/refund/service.go", strings.Repeat("// refund service\n", 250))).
		step("Adding the idempotency key.", edit("internal/refund/service.go", "func (s *Service) Create(", "func (s *Service) Create(idempotencyKey string, ")).
		step("Refund creation takes an idempotency key.")

	return []*tgen{stuck1, stuck2, stuck3, stuck4, healthy1, healthy2, healthy3, healthy4}
}

// ---------------------------------------------------------------------

func renderCorpus(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	var m struct {
		Trajectories []Trajectory `json:"trajectories"`
	}
	for _, g := range corpusTrajectories() {
		if _, dup := out[g.t.File]; dup {
			t.Fatalf("generator: %s twice", g.t.File)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		for _, r := range g.t.Records {
			if err := enc.Encode(r); err != nil {
				t.Fatal(err)
			}
		}
		out[g.t.File] = b.Bytes()
		m.Trajectories = append(m.Trajectories, g.t)
	}
	labels, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out[LabelsFile] = append(labels, '\n')
	return out
}

func TestCorpusGenerated(t *testing.T) {
	want := renderCorpus(t)
	if *update {
		old, _ := filepath.Glob(filepath.Join("corpus", "*.jsonl"))
		for _, f := range old {
			if _, keep := want[filepath.Base(f)]; !keep {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.MkdirAll("corpus", 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range want {
			if err := os.WriteFile(filepath.Join("corpus", name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join("corpus", name))
		if err != nil {
			t.Errorf("%v (run with -update)", err)
			continue
		}
		if !bytes.Equal(got, data) {
			t.Errorf("corpus/%s differs from the generator (run with -update)", name)
		}
	}
	files, _ := filepath.Glob(filepath.Join("corpus", "*.jsonl"))
	for _, f := range files {
		if _, ok := want[filepath.Base(f)]; !ok {
			t.Errorf("%s is not generated (run with -update)", f)
		}
	}
}
