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

	"github.com/ralphmesh/ralph/pkg/sandbox"
	"github.com/ralphmesh/ralph/pkg/settings"
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

// DefaultShell runs commands when Options name no shell.
const DefaultShell = "/bin/sh"

// Options tunes an Executor. Zero fields take their defaults, whose one
// home is the tags (the builder's RALPH_BUILDER_SHELL_TIMEOUT and
// RALPH_BUILDER_OUTPUT_CAP, through pkg/config).
type Options struct {
	// ShellTimeout bounds one run call. A call may ask for another timeout
	// with timeout_seconds, capped at four times this value.
	ShellTimeout time.Duration `split_words:"true" default:"120s" desc:"default timeout of the run tool"`
	// OutputCap is how many bytes of a run's combined output are kept; the
	// rest is discarded and the result says how much.
	OutputCap int `split_words:"true" default:"262144" desc:"bytes of a command's output kept"`
	// PageBytes bounds what one read_file or read_artifact call returns:
	// whole lines up to this size, then a line saying how to read the next
	// page. The builder sets it to its inline limit, so that a page enters
	// the context whole; 0 leaves reads unbounded.
	PageBytes int `ignored:"true"`
	// HashCacheFiles bounds the builder's workspace check (Hasher): how
	// many files' stat data and digests it remembers across workspaces,
	// the least recently checked workspace forgotten first.
	HashCacheFiles int `split_words:"true" default:"200000" desc:"files whose stat data and digest the workspace check remembers across workspaces (about 250 bytes each), to re-read only what changed"`
	// HashWatch lets the workspace check learn from the kernel (inotify)
	// which directories changed between two steps of a task on this
	// replica, and lstat only those (tools.Hasher.WatchChanges).
	HashWatch string `split_words:"true" default:"on" desc:"on: the workspace check lstat's only the directories the kernel (inotify) reported changed since this replica's step before of the same attempt; host: since any walk of this replica, because every builder and critic runs on this host (docker-compose sets it); off: it lstat's every file at every step (for workspaces other hosts write into while a session runs)"`
	// Shell runs commands as Shell -c COMMAND.
	Shell string `ignored:"true"`
	// Env holds extra KEY=VALUE entries for run, on top of the small
	// allowlist taken from the parent environment.
	Env []string `ignored:"true"`
	// Sandbox runs the commands. Nil runs them unconfined
	// (sandbox.Unconfined), which only code running its own commands may
	// choose; the services get theirs from RALPH_SANDBOX_*.
	Sandbox *sandbox.Sandbox `ignored:"true"`
}

// Validate rejects options no run could use.
func (o Options) Validate() error {
	return settings.Join(
		settings.Check(o.ShellTimeout > 0, "ShellTimeout", o.ShellTimeout, "must be positive"),
		settings.Check(o.OutputCap >= 1, "OutputCap", o.OutputCap, "must be at least 1"),
		settings.Check(o.HashCacheFiles >= 1, "HashCacheFiles", o.HashCacheFiles, "must be at least 1"),
		settings.Check(o.HashWatch == "on" || o.HashWatch == "host" || o.HashWatch == "off", "HashWatch", o.HashWatch, "not on, host or off"),
	)
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
	if tool == Run {
		text = fmt.Sprintf("exit code %d\n%s", r.ExitCode, text)
	}
	return text
}

// TextFailed reports whether text, as Text renders it, is a failed result:
// a tool error, or a command that exited non-zero. A result too long to show
// whole, shown as a PointerDigest, is judged by the lines below its pointer.
func TextFailed(text string) bool {
	text = belowPointer(text)
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
	d := settings.Defaults[Options]()
	if opt.ShellTimeout <= 0 {
		opt.ShellTimeout = d.ShellTimeout
	}
	if opt.OutputCap <= 0 {
		opt.OutputCap = d.OutputCap
	}
	if opt.Shell == "" {
		opt.Shell = DefaultShell
	}
	opt.Env = append([]string(nil), opt.Env...) // the caller's slice may change later
	if opt.Sandbox == nil {
		opt.Sandbox = sandbox.Unconfined()
	}
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
	case ReadFile:
		return e.readFile(a), nil
	case WriteFile:
		return e.writeFile(a), nil
	case EditFile:
		return e.editFile(a), nil
	case ListDir:
		return e.listDir(a), nil
	case Search:
		return e.search(ctx, a)
	case Run:
		return e.run(ctx, a)
	case ReadArtifact:
		return e.readArtifact(ctx, a)
	}
	// A spec without a handler is a programming error, but the model still
	// deserves an answer rather than a crashed iteration.
	return fail("tool %q is defined but not implemented", name), nil
}

func (e *Executor) readArtifact(ctx context.Context, a args) (Result, error) {
	id := a.str("id", "")
	if id == "" {
		return fail("%s: argument \"id\" must not be empty", ReadArtifact), nil
	}
	offset, limit := a.integer("offset_line", 1), a.integer("limit_lines", 0)
	if msg := checkRange(ReadArtifact, a, offset, limit); msg != "" {
		return Result{Error: msg}, nil
	}
	if e.arts == nil {
		return fail("%s: no artifact store is configured, so artifact %q cannot be read", ReadArtifact, id), nil
	}
	content, err := e.arts.GetArtifact(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("%s %q: %w", ReadArtifact, id, ctx.Err())
		}
		if errors.Is(err, ErrArtifactNotFound) || errors.Is(err, fs.ErrNotExist) {
			return fail("%s: artifact id %q not found", ReadArtifact, id), nil
		}
		return Result{}, fmt.Errorf("%s: fetching artifact %q: %w", ReadArtifact, id, err)
	}
	out, msg := page(content, pageRequest{
		tool: ReadArtifact, what: "artifact " + id, next: readCall(ReadArtifact, "id", id),
		offset: offset, limit: limit, ranged: a.has("offset_line") || a.has("limit_lines"), pageBytes: e.opt.PageBytes,
	})
	if msg != "" {
		return Result{Error: msg}, nil
	}
	return Result{Output: out}, nil
}

// checkRange checks a read's offset_line and limit_lines; "" when they are
// fine.
func checkRange(tool string, a args, offset, limit int) string {
	if offset < 1 {
		return fmt.Sprintf("%s: argument \"offset_line\" must be 1 or more (lines are numbered from 1), got %d", tool, offset)
	}
	if a.has("limit_lines") && limit < 1 {
		return fmt.Sprintf("%s: argument \"limit_lines\" must be 1 or more, got %d", tool, limit)
	}
	return ""
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
