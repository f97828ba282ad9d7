package gitwork

import (
	"context"
	"fmt"
	"strings"
)

// The trailers that tie a commit to the session and the task it records:
// they are how a commit made by a replica that died before recording it is
// found again instead of being made twice.
const (
	TrailerSession = "Ralph-Session"
	TrailerTask    = "Ralph-Task"
)

// Message is a commit message: a subject, a body paragraph, and the
// session's trailers.
type Message struct {
	Subject string
	Body    string
	Session string
	Task    string
}

// String is the message as git takes it. Subject and body are each made
// one paragraph (a stray blank line in a verdict must not end the body
// early and make its last lines read as trailers).
func (m Message) String() string {
	var b strings.Builder
	b.WriteString(OneLine(m.Subject))
	if body := OneLine(m.Body); body != "" {
		b.WriteString("\n\n" + body)
	}
	fmt.Fprintf(&b, "\n\n%s: %s\n%s: %s\n", TrailerSession, OneLine(m.Session), TrailerTask, OneLine(m.Task))
	return b.String()
}

// OneLine collapses every run of white space, newlines included, into one
// space.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Outcome is what came of a commit.
type Outcome struct {
	// SHA is the commit made; "" when there was nothing to commit or a
	// hook refused it.
	SHA string
	// Empty: nothing had changed, so no commit was made.
	Empty bool
	// Hook names the hook that refused the commit (pre-commit,
	// commit-msg), and Output is what it printed: a rejection of the work
	// the builder can answer.
	Hook   string
	Output string
}

// Exit codes of commitScript, each naming the stage that failed.
const (
	exitStage     = 120 // writing the message, staging
	exitPreCommit = 121
	exitCommitMsg = 122
	exitCommit    = 123
	exitEmpty     = 125
)

// commitScript stages everything, runs the pre-commit and commit-msg hooks
// itself (so that a refusal is known to be a hook's, whatever it prints),
// and commits with --no-verify, which still runs prepare-commit-msg and
// post-commit. $1 is the message. It runs in the sandbox.
const commitScript = `msg=$(git rev-parse --git-path RALPH_COMMIT_MSG) || exit 120
git add --all || exit 120
git diff --cached --quiet --ignore-submodules=all && exit 125
printf '%s' "$1" > "$msg" || exit 120
git hook run --ignore-missing pre-commit || { rm -f "$msg"; exit 121; }
git hook run --ignore-missing commit-msg -- "$msg" || { rm -f "$msg"; exit 122; }
git commit --quiet --no-verify --cleanup=whitespace --file="$msg" || { rm -f "$msg"; exit 123; }
rm -f "$msg"
`

// Commit stages every change of the work tree and commits it with msg as
// id, in the sandbox, with the repository's hooks. A hook that refuses is
// an Outcome (the work is rejected), not an error; an error is git itself
// failing.
func (r *Repo) Commit(ctx context.Context, msg Message, id Identity) (Outcome, error) {
	res, err := r.confinedUnlocked(ctx, id.env(), "sh", "-c", commitScript, "ralph-commit", msg.String())
	if err != nil {
		return Outcome{}, fmt.Errorf("commit task %s: %w", msg.Task, err)
	}
	out := strings.TrimSpace(string(res.out))
	switch res.exitCode {
	case 0:
		sha, err := r.Head(ctx)
		if err != nil {
			return Outcome{}, fmt.Errorf("commit task %s: read the new commit: %w", msg.Task, err)
		}
		return Outcome{SHA: sha}, nil
	case exitEmpty:
		return Outcome{Empty: true}, nil
	case exitPreCommit:
		return Outcome{Hook: "pre-commit", Output: out}, nil
	case exitCommitMsg:
		return Outcome{Hook: "commit-msg", Output: out}, nil
	}
	return Outcome{}, fmt.Errorf("commit task %s in %s: %w: exit %d: %s", msg.Task, r.dir, ErrGit, res.exitCode, firstLines(res.out, 6))
}

// FindCommit looks in base..HEAD for the commit of task in session, by
// its trailers: a commit made by a replica that died before it recorded
// it. base "" searches the whole history of HEAD.
func (r *Repo) FindCommit(ctx context.Context, base, session, task string) (string, bool, error) {
	rev := "HEAD"
	if base != "" {
		rev = base + "..HEAD"
	}
	format := fmt.Sprintf("--format=%%H%%x1f%%(trailers:key=%s,valueonly,separator=%%x1d)%%x1f%%(trailers:key=%s,valueonly,separator=%%x1d)%%x1e",
		TrailerSession, TrailerTask)
	out, err := r.must(ctx, "log", "--max-count=1000", format, rev, "--")
	if err != nil {
		return "", false, err
	}
	for _, rec := range strings.Split(string(out), "\x1e") {
		f := strings.Split(strings.TrimSpace(rec), "\x1f")
		if len(f) != 3 {
			continue
		}
		if contains(f[1], session) && contains(f[2], task) {
			return f[0], true, nil
		}
	}
	return "", false, nil
}

func contains(values, v string) bool {
	for _, x := range strings.Split(values, "\x1d") {
		if strings.TrimSpace(x) == v {
			return true
		}
	}
	return false
}
