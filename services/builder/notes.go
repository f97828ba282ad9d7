package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tools"
)

// This file is the shell's part of the work product: putting the
// workspace on the session's branch, and making an approved task's commit
// with its notes (progress.txt, the prd.json's passes) exactly once.

// commitField is the journal field of a commit's outcome, in the step of
// the approval.
const commitField = "git:commit"

// maxNotesBytes bounds the notes files the builder reads and rewrites.
const maxNotesBytes = 4 << 20

// checkout puts the workspace of a new session on its branch and says
// where it stands.
func (s *Service) checkout(ctx context.Context, workspace string, g events.Git) (GitStart, error) {
	repo, err := gitwork.Open(ctx, workspace, s.d.Sandbox, s.d.Config.Git)
	if err != nil {
		return GitStart{}, err
	}
	var at GitStart
	if at.Head, err = repo.Checkout(ctx, g.Branch); err != nil {
		return GitStart{}, err
	}
	if g.Push != "" {
		url, err := repo.RemoteURL(ctx, g.Push)
		if err != nil {
			return GitStart{}, err
		}
		at.PushDigest = gitwork.URLDigest(url)
	}
	ws, err := tools.NewWorkspace(workspace)
	if err != nil {
		return GitStart{}, err
	}
	progress, _, err := readNote(ws, ProgressFile)
	if err != nil {
		return GitStart{}, err
	}
	at.Patterns = Patterns(progress)
	return at, nil
}

// runCommit makes plan's commit at most once and feeds its outcome to the
// state machine. The outcome is journaled in the approval's step; a commit
// made by a replica that died before journaling it is found again by its
// trailers rather than made twice.
func (s *Service) runCommit(ctx context.Context, plan CommitPlan) error {
	log := s.d.Log.With(zap.String("session", plan.Session), zap.String("task", plan.TaskID), zap.Int("step", plan.Step))
	res, err := bus.Once(ctx, s.d.Store, events.Envelope{Session: plan.Session, Step: plan.Step}, commitField,
		func(ctx context.Context) (CommitResult, error) {
			res, err := s.makeCommit(ctx, plan)
			if err != nil && ctx.Err() == nil && !bus.IsUnavailable(err) {
				// Git or the workspace failing is an outcome a person
				// answers, not something a redelivery mends.
				return CommitResult{Error: err.Error()}, nil
			}
			return res, err
		})
	if err != nil {
		return err
	}
	switch {
	case res.Commit != nil:
		log.Info("task committed", zap.String("sha", res.Commit.SHA), zap.Bool("pushed", res.Commit.Pushed), zap.String("push_error", res.Commit.PushError))
	case res.RejectedBy != "":
		log.Info("commit refused", zap.String("by", res.RejectedBy))
	case res.Error != "":
		log.Warn("commit failed", zap.String("error", res.Error))
	}
	var st State
	ver, err := s.d.Store.LoadState(ctx, plan.Session, &st)
	if errors.Is(err, store.ErrNotFound) {
		return s.stateGone(ctx, log, plan.Team, plan.Session, plan.TaskID, plan.Step)
	}
	if err != nil {
		return err
	}
	return s.commit(ctx, log, plan.Session, st, ver, Committed{Step: plan.Step, Result: res})
}

// makeCommit writes the task's notes and commits everything.
func (s *Service) makeCommit(ctx context.Context, plan CommitPlan) (CommitResult, error) {
	repo, err := gitwork.Open(ctx, plan.Workspace, s.d.Sandbox, s.d.Config.Git)
	if err != nil {
		return CommitResult{}, err
	}
	ws, err := tools.NewWorkspace(plan.Workspace)
	if err != nil {
		return CommitResult{}, err
	}
	subject := gitwork.OneLine(plan.Message.Subject)
	if sha, found, err := repo.FindCommit(ctx, plan.Base, plan.Session, plan.TaskID); err != nil {
		return CommitResult{}, err
	} else if found {
		progress, _, err := readNote(ws, ProgressFile)
		if err != nil {
			return CommitResult{}, err
		}
		c := &events.Commit{TaskID: plan.TaskID, SHA: sha, Subject: subject}
		s.push(ctx, repo, plan, c)
		return CommitResult{Commit: c, Patterns: Patterns(progress)}, nil
	}
	notes, err := writeNotes(ws, plan)
	if err != nil {
		return CommitResult{}, err
	}
	if notes.rejected != "" {
		return CommitResult{RejectedBy: plan.PRDFile, Output: notes.rejected}, nil
	}
	id, err := repo.Identity(ctx)
	if err != nil {
		notes.restore()
		return CommitResult{}, err
	}
	out, err := repo.Commit(ctx, plan.Message, id)
	if err != nil {
		notes.restore()
		return CommitResult{}, err
	}
	switch {
	case out.Hook != "":
		// The notes say the task is done; it is not, so the files go back
		// to what they were and the file and the session agree.
		notes.restore()
		return CommitResult{RejectedBy: out.Hook + " hook", Output: lastLines(out.Output, s.d.Config.InlineOutputBytes)}, nil
	case out.Empty:
		return CommitResult{Patterns: notes.patterns}, nil
	}
	c := &events.Commit{TaskID: plan.TaskID, SHA: out.SHA, Subject: subject}
	s.push(ctx, repo, plan, c)
	return CommitResult{Commit: c, Patterns: notes.patterns}, nil
}

// push pushes the branch after each commit when the session asked for it,
// to the remote's URL as it was when the session started. A push that
// fails does not undo the commit: the error is reported with it, and the
// next push sends this commit too.
func (s *Service) push(ctx context.Context, repo *gitwork.Repo, plan CommitPlan, c *events.Commit) {
	if plan.Push == "" {
		return
	}
	url, err := repo.RemoteURL(ctx, plan.Push)
	switch {
	case err != nil:
		c.PushError = err.Error()
	case gitwork.URLDigest(url) != plan.PushDigest:
		c.PushError = fmt.Sprintf("the URL of remote %s changed since the session started (now %s); not pushed", plan.Push, gitwork.MaskURL(url))
	default:
		if err := repo.Push(ctx, url, plan.Branch, c.SHA); err != nil {
			c.PushError = err.Error()
			return
		}
		c.Pushed = true
	}
}

// notes is what writeNotes changed, to undo it when the commit is refused.
type notes struct {
	patterns string
	// rejected is why the prd.json could not be updated (the agent broke
	// or removed it): the builder's to repair.
	rejected string
	undo     []func()
}

func (n notes) restore() {
	for _, u := range n.undo {
		u()
	}
}

// writeNotes appends the task's entry to progress.txt and, for a story of
// a prd.json, sets its passes, each file written whole and atomically.
func writeNotes(ws *tools.Workspace, plan CommitPlan) (notes, error) {
	var n notes
	old, existed, err := readNote(ws, ProgressFile)
	if err != nil {
		return n, err
	}
	progress := AddProgress(old, plan.Progress)
	undo, err := replaceNote(ws, ProgressFile, []byte(progress), old, existed)
	if err != nil {
		return n, err
	}
	n.undo = append(n.undo, undo)
	n.patterns = Patterns(progress)
	if plan.Story == "" {
		return n, nil
	}
	data, existed, err := readNote(ws, plan.PRDFile)
	if err == nil && !existed {
		err = fmt.Errorf("%s is gone from the workspace", plan.PRDFile)
	}
	var updated []byte
	if err == nil {
		updated, err = prd.SetPasses([]byte(data), plan.Story)
	}
	if err != nil {
		n.restore()
		n.undo = nil
		n.rejected = fmt.Sprintf("Story %s could not be marked as passing in %s: %v. Restore the file (git show HEAD:%s shows it as it was) and keep it valid JSON with every story.",
			plan.Story, plan.PRDFile, err, plan.PRDFile)
		return n, nil
	}
	undo, err = replaceNote(ws, plan.PRDFile, updated, data, true)
	if err != nil {
		n.restore()
		return notes{}, err
	}
	n.undo = append(n.undo, undo)
	return n, nil
}

// readNote reads the workspace file rel if it is there: a regular file of
// at most maxNotesBytes, opened without following a symlink or blocking.
func readNote(ws *tools.Workspace, rel string) (string, bool, error) {
	abs, err := ws.Resolve(rel)
	if err != nil {
		return "", false, err
	}
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", rel, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", false, fmt.Errorf("read %s: not a regular file", rel)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxNotesBytes+1))
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", rel, err)
	}
	if len(data) > maxNotesBytes {
		return "", false, fmt.Errorf("read %s: larger than %d bytes", rel, maxNotesBytes)
	}
	return string(data), true, nil
}

// replaceNote writes data to the workspace file rel atomically (a new file
// renamed over it, so a reader never sees half of it) and returns what
// puts back old (or removes the file when it did not exist).
func replaceNote(ws *tools.Workspace, rel string, data []byte, old string, existed bool) (func(), error) {
	abs, err := ws.Resolve(rel)
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(abs, data); err != nil {
		return nil, fmt.Errorf("write %s: %w", rel, err)
	}
	return func() {
		if existed {
			_ = writeAtomic(abs, []byte(old))
		} else {
			_ = os.Remove(abs)
		}
	}, nil
}

func writeAtomic(abs string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".ralph-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), abs)
}

// lastLines is the end of out within limit bytes, in whole lines: a
// hook's verdict is at the end of what it prints.
func lastLines(out string, limit int) string {
	out = strings.TrimSpace(out)
	if len(out) <= limit {
		return out
	}
	lines := strings.Split(out, "\n")
	size, i := 0, len(lines)
	for i > 0 && size+len(lines[i-1])+1 <= limit {
		size += len(lines[i-1]) + 1
		i--
	}
	return fmt.Sprintf("[%d earlier lines not shown]\n%s", i, strings.Join(lines[i:], "\n"))
}
