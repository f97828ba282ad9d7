package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/settings"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name   string
		change func(*Config)
		field  string
	}{
		{"mode", func(c *Config) { c.Mode = "docker" }, "Mode"},
		{"network", func(c *Config) { c.Network = "maybe" }, "Network"},
		{"relative read-only path", func(c *Config) { c.ReadOnly = []string{"usr"} }, "ReadOnly"},
		{"relative hidden path", func(c *Config) { c.Hide = []string{"secrets"} }, "Hide"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.change(&c)
			var fields []string
			settings.Each(c.Validate(), func(inv *settings.Invalid) { fields = append(fields, inv.Field) })
			if !slices.Equal(fields, []string{tc.field}) {
				t.Fatalf("invalid fields %v, want [%s]", fields, tc.field)
			}
			if _, err := New(c); err == nil {
				t.Fatal("New accepted an invalid configuration")
			}
		})
	}
}

func TestNewWithoutBwrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := New(DefaultConfig())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "bubblewrap") {
		t.Fatalf("err = %v, want ErrUnavailable naming the bubblewrap package", err)
	}
	c := DefaultConfig()
	c.Mode = ModeNone
	s, err := New(c)
	if err != nil || s.Confined() {
		t.Fatalf("mode none: %v, confined %v", err, s != nil && s.Confined())
	}
}

// tree makes a fake host under a temporary directory: usr with a nested
// directory, a merged-usr style symlink, an etc with a secret file and a
// secret directory, a tmp holding the workspace.
func tree(t *testing.T) (root string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"usr/bin", "usr/local", "etc/private", "tmp/ws/secrets", "outside"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/creds", "tmp/ws/.env", "outside/key"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "etc/creds"), filepath.Join(root, "tmp/ws/creds-link")); err != nil {
		t.Fatal(err)
	}
	return root
}

// at is the index of the option sequence seq in args, -1 when absent.
func at(args []string, seq ...string) int {
	for i := range args {
		if i+len(seq) <= len(args) && slices.Equal(args[i:i+len(seq)], seq) {
			return i
		}
	}
	return -1
}

func TestArgs(t *testing.T) {
	root := tree(t)
	p := func(rel string) string { return filepath.Join(root, rel) }
	ws := p("tmp/ws")
	s := &Sandbox{cfg: Config{
		Mode: ModeBwrap, Network: NetworkOff,
		ReadOnly: []string{p("usr/local"), p("usr"), p("bin"), p("etc"), p("missing")},
		Hide:     []string{p("etc/private"), p("tmp/ws/secrets"), p("outside/key"), p("missing-secret"), ""},
		Secrets:  []string{p("tmp/ws/creds-link"), p("tmp/ws/.env")},
	}, userNS: true}
	args, err := s.args(ws)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	must := func(seq ...string) int {
		t.Helper()
		i := at(args, seq...)
		if i < 0 {
			t.Fatalf("%q missing from %s", seq, joined)
		}
		return i
	}
	for _, flag := range []string{"--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--unshare-net", "--die-with-parent", "--new-session"} {
		must(flag)
	}
	must("--cap-drop", "ALL")
	usr := must("--ro-bind", p("usr"), p("usr"))
	if at(args, "--ro-bind", p("usr/local"), p("usr/local")) >= 0 || at(args, "--ro-bind", p("usr/bin"), p("usr/bin")) >= 0 {
		t.Errorf("a path inside a bound one was bound again: %s", joined)
	}
	if sym := must("--symlink", p("usr/bin"), p("bin")); sym < usr {
		t.Errorf("symlink before its target is bound: %s", joined)
	}
	if strings.Contains(joined, p("missing")) {
		t.Errorf("a missing path was named: %s", joined)
	}
	// The workspace inside the private /tmp lands on top of it, and the
	// secrets inside the workspace on top of the workspace.
	tmp := must("--tmpfs", "/tmp")
	bind := must("--bind", ws, ws)
	if bind < tmp {
		t.Errorf("the workspace is bound before /tmp is mounted over it: %s", joined)
	}
	for _, hidden := range [][]string{
		{"--ro-bind", "/dev/null", p("etc/creds")}, // through the symlink in the workspace
		{"--ro-bind", "/dev/null", p("tmp/ws/.env")},
		{"--tmpfs", p("tmp/ws/secrets")},
	} {
		if i := must(hidden...); i < bind && strings.HasPrefix(hidden[len(hidden)-1], ws) {
			t.Errorf("%q comes before the workspace it hides in: %s", hidden, joined)
		}
	}
	if i := must("--tmpfs", p("etc/private")); i < must("--ro-bind", p("etc"), p("etc")) {
		t.Errorf("the hidden directory comes before /etc is bound: %s", joined)
	}
	must("--remount-ro", p("etc/private"))
	must("--remount-ro", p("tmp/ws/secrets"))
	// Not in the sandbox: nothing to hide, nothing to name.
	if strings.Contains(joined, p("outside")) {
		t.Errorf("a path the sandbox does not see was named: %s", joined)
	}
	if last := args[len(args)-4:]; !slices.Equal(last, []string{"--remount-ro", "/", "--chdir", ws}) {
		t.Errorf("ends with %q", last)
	}

	s.userNS, s.cfg.Network = false, NetworkOn
	args, _ = s.args(ws)
	if at(args, "--unshare-user") >= 0 || at(args, "--unshare-net") >= 0 {
		t.Errorf("user namespace off and network on, got %s", strings.Join(args, " "))
	}
	if _, err := s.args("relative/ws"); err == nil {
		t.Error("a relative workspace was accepted")
	}
}

func TestSandboxEnv(t *testing.T) {
	got := sandboxEnv([]string{"PATH=/usr/bin", "HOME=/root", "TMPDIR=/var/tmp", "LANG=C"})
	want := []string{"PATH=/usr/bin", "LANG=C", "HOME=" + Home, "TMPDIR=/tmp"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
