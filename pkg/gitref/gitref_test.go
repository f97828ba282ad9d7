package gitref_test

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/gitref"
)

func TestValidBranch(t *testing.T) {
	for _, ok := range []string{"ralph/todo-api", "feature/US-1_x", "main", "a+b", "v1.2"} {
		if err := gitref.ValidBranch(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", ".hidden", "a..b", "a//b", "a/.b", "a/", "a.", "a.lock", "a b", "a~1", "a^", "a:b", "HEAD@{1}", "x\n"} {
		if err := gitref.ValidBranch(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}

func TestValidRemote(t *testing.T) {
	if err := gitref.ValidRemote("origin"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "--upload-pack=x", "https://x/y", "a/b", "a..b"} {
		if err := gitref.ValidRemote(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}

func TestDefaultBranch(t *testing.T) {
	for _, c := range []struct{ title, file, want string }{
		{"Add the API (v2)!", "prd", "ralph/add-the-api-v2"},
		{"", "my prd", "ralph/my-prd"},
		{"¿¡", "", "ralph/session"},
		{"A very long title that goes on and on and on beyond fifty characters", "", "ralph/a-very-long-title-that-goes-on-and-on-and-on"},
	} {
		got := gitref.DefaultBranch(c.title, c.file)
		if got != c.want {
			t.Errorf("DefaultBranch(%q, %q) = %q, want %q", c.title, c.file, got, c.want)
		}
		if err := gitref.ValidBranch(got); err != nil {
			t.Errorf("%q: %v", got, err)
		}
	}
}
