package events_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

// session.started refuses git settings that would leave the workspace or
// could be read by git as an option.
func TestSessionStartedGitIsValidated(t *testing.T) {
	p := prd.PRD{Tasks: []prd.Task{{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}}}}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		git  events.Git
		want string
	}{
		{events.Git{Branch: "ralph/x", PRDFile: "docs/prd.json", Push: "origin"}, ""},
		{events.Git{Branch: ""}, "field git.branch"},
		{events.Git{Branch: "--force"}, "field git.branch"},
		{events.Git{Branch: "a..b"}, "field git.branch"},
		{events.Git{Branch: "x", PRDFile: "../prd.json"}, "field git.prd_file"},
		{events.Git{Branch: "x", PRDFile: "/etc/prd.json"}, "field git.prd_file"},
		{events.Git{Branch: "x", PRDFile: "a/../../prd.json"}, "field git.prd_file"},
		{events.Git{Branch: "x", Push: "--upload-pack=evil"}, "field git.push"},
		{events.Git{Branch: "x", Push: "https://example.com/r.git"}, "field git.push"},
	}
	for _, c := range cases {
		g := c.git
		_, err := events.New(events.SessionStarted, "s1", "", 0, at, events.SessionStartedData{PRD: p, Workspace: "/ws", Git: &g})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v refused: %v", c.git, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want an error naming %s", c.git, err, c.want)
		}
	}
}

func TestCommitShort(t *testing.T) {
	if s := (events.Commit{SHA: "0123456789abcdef"}).Short(); s != "0123456" {
		t.Errorf("Short = %q", s)
	}
	if s := (events.Commit{SHA: "abc"}).Short(); s != "abc" {
		t.Errorf("Short = %q", s)
	}
}
