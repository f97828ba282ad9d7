package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrArtifactNotFound is what an Artifacts implementation wraps when the id
// is unknown (or expired). read_artifact reports that to the model; any other
// store error is a failure of the platform and is returned as a Go error.
var ErrArtifactNotFound = errors.New("artifact not found")

// Artifacts gives read access to full tool outputs kept elsewhere (Redis)
// when the copy shown to the model was shortened.
type Artifacts interface {
	// GetArtifact returns the stored content of id. An unknown id must yield
	// an error wrapping ErrArtifactNotFound (fs.ErrNotExist is accepted too).
	GetArtifact(ctx context.Context, id string) (string, error)
}

// Defaults for Options fields left zero.
const (
	DefaultShellTimeout = 120 * time.Second
	DefaultOutputCap    = 256 << 10
	DefaultShell        = "/bin/sh"
)

// Options tunes an Executor. Zero fields take the defaults above.
type Options struct {
	// ShellTimeout bounds one run call. A call may ask for another timeout
	// with timeout_seconds, capped at four times this value.
	ShellTimeout time.Duration
	// OutputCap is how many bytes of a run's combined output are kept; the
	// rest is discarded and the result says how much.
	OutputCap int
	// Shell runs commands as Shell -c COMMAND.
	Shell string
	// Env holds extra KEY=VALUE entries for run, on top of the small
	// allowlist taken from the parent environment.
	Env []string
}

// Result is the outcome of one tool call.
type Result struct {
	// Output is what goes back to the model.
	Output string
	// Error is a tool error for the model ("" when fine); it names the tool
	// and the offending argument.
	Error string
	// ExitCode is the exit status of a run command (-1 when it was killed);
	// 0 for other tools.
	ExitCode int
	// FilesChanged lists workspace-relative, slash-separated paths this call
	// wrote. It is empty for run, whose effects are unknown; the builder
	// compares workspace hashes instead.
	FilesChanged []string
	// TimedOut is set when a run command was killed for exceeding its timeout.
	TimedOut bool
}

// Text is what the model sees of a result of tool: the output, then the
// tool error as "error: ...", and for run the exit code first. The builder
// records results this way, and the pruner and summarizer read failures
// from it.
func (r Result) Text(tool string) string {
	text := r.Output
	if r.Error != "" {
		if text != "" {
			text += "\n"
		}
		text += "error: " + r.Error
	}
	if tool == toolRun {
		text = fmt.Sprintf("exit code %d\n%s", r.ExitCode, text)
	}
	return text
}

// TextFailed reports whether text, as Text renders it, is a failed result:
// a tool error, or a command that exited non-zero.
func TextFailed(text string) bool {
	if rest, ok := strings.CutPrefix(text, "exit code "); ok && !strings.HasPrefix(rest, "0\n") && rest != "0" {
		return true
	}
	return strings.HasPrefix(text, "error: ") || strings.Contains(text, "\nerror: ")
}

// Executor runs tool calls against one workspace. It keeps no state between
// calls, so one Executor may serve concurrent calls.
type Executor struct {
	ws   *Workspace
	arts Artifacts
	opt  Options
}

// NewExecutor returns an Executor for w. arts may be nil, in which case
// read_artifact reports that no store is configured.
func NewExecutor(w *Workspace, arts Artifacts, opt Options) *Executor {
	if opt.ShellTimeout <= 0 {
		opt.ShellTimeout = DefaultShellTimeout
	}
	if opt.OutputCap <= 0 {
		opt.OutputCap = DefaultOutputCap
	}
	if opt.Shell == "" {
		opt.Shell = DefaultShell
	}
	opt.Env = append([]string(nil), opt.Env...) // the caller's slice may change later
	return &Executor{ws: w, arts: arts, opt: opt}
}

// Execute runs one tool call. Bad input from the model is a Result with Error
// set, never a Go error, because it must go back to the model. A Go error is
// returned only when ctx is done or the artifact store fails.
func (e *Executor) Execute(ctx context.Context, name, argsJSON string) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("tool %s: %w", name, err)
	}
	spec, ok := lookupSpec(name)
	if !ok {
		return fail("unknown tool %q; available tools: %s", name, strings.Join(Names(), ", ")), nil
	}
	a, msg := parseArgs(spec, argsJSON)
	if msg != "" {
		return Result{Error: msg}, nil
	}
	switch name {
	case toolReadFile:
		return e.readFile(a), nil
	case toolWriteFile:
		return e.writeFile(a), nil
	case toolEditFile:
		return e.editFile(a), nil
	case toolListDir:
		return e.listDir(a), nil
	case toolSearch:
		return e.search(ctx, a)
	case toolRun:
		return e.run(ctx, a)
	case toolReadArtifact:
		return e.readArtifact(ctx, a)
	}
	// A spec without a handler is a programming error, but the model still
	// deserves an answer rather than a crashed iteration.
	return fail("tool %q is defined but not implemented", name), nil
}

func (e *Executor) readArtifact(ctx context.Context, a args) (Result, error) {
	id := a.str("id", "")
	if id == "" {
		return fail("%s: argument \"id\" must not be empty", toolReadArtifact), nil
	}
	if e.arts == nil {
		return fail("%s: no artifact store is configured, so artifact %q cannot be read", toolReadArtifact, id), nil
	}
	content, err := e.arts.GetArtifact(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("%s %q: %w", toolReadArtifact, id, ctx.Err())
		}
		if errors.Is(err, ErrArtifactNotFound) || errors.Is(err, fs.ErrNotExist) {
			return fail("%s: artifact id %q not found", toolReadArtifact, id), nil
		}
		return Result{}, fmt.Errorf("%s: fetching artifact %q: %w", toolReadArtifact, id, err)
	}
	return Result{Output: content}, nil
}

func fail(format string, a ...any) Result {
	return Result{Error: fmt.Sprintf(format, a...)}
}

// resolveArg resolves a path argument. On failure it returns the message for
// the model, which already names the path.
func (e *Executor) resolveArg(tool, rel string) (abs, display, msg string) {
	abs, err := e.ws.Resolve(rel)
	if err != nil {
		return "", "", fmt.Sprintf("%s: %v", tool, err)
	}
	return abs, e.rel(abs), ""
}

// rel is the workspace-relative, slash-separated form of a resolved path,
// which is how paths are shown to the model and reported in FilesChanged.
func (e *Executor) rel(abs string) string {
	r, err := filepath.Rel(e.ws.root, abs)
	if err != nil {
		return abs
	}
	return filepath.ToSlash(r)
}

// reason strips the *fs.PathError wrapper, whose absolute path means nothing
// to the model and is already named in the message.
func reason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// shorten cuts s to at most n bytes on a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
