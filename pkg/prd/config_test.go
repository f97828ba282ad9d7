package prd_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/prd"
)

func tasksYAML(n int) string {
	var b strings.Builder
	b.WriteString("tasks:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {id: T%d, title: t, acceptance_criteria: [c]}\n", i+1)
	}
	return b.String()
}

func TestConfigBoundsThePRD(t *testing.T) {
	dir := t.TempDir()
	three := filepath.Join(dir, "three.yaml")
	if err := os.WriteFile(three, []byte(tasksYAML(3)), 0o644); err != nil {
		t.Fatal(err)
	}
	size := len(tasksYAML(3))

	if p, err := (prd.Config{MaxBytes: size, MaxTasks: 3}).Load(three); err != nil || len(p.Tasks) != 3 {
		t.Fatalf("a PRD at both bounds: %v", err)
	}
	cases := []struct {
		name string
		cfg  prd.Config
		want []string
	}{
		{"a byte too many", prd.Config{MaxBytes: size - 1, MaxTasks: 3},
			[]string{three, fmt.Sprintf("%d bytes, more than the %d allowed (RALPH_PRD_MAX_BYTES)", size, size-1)}},
		{"a task too many", prd.Config{MaxBytes: size, MaxTasks: 2},
			[]string{three, "3 tasks, more than the 2 allowed (RALPH_PRD_MAX_TASKS)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.cfg.Load(three)
			if !errors.Is(err, prd.ErrTooLarge) || !errors.Is(err, prd.ErrInvalid) {
				t.Fatalf("err %v: want ErrTooLarge, an ErrInvalid", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// The defaults bound prd.Load too.
	def := prd.DefaultConfig()
	many := filepath.Join(dir, "many.yaml")
	if err := os.WriteFile(many, []byte(tasksYAML(def.MaxTasks+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := prd.Load(many); !errors.Is(err, prd.ErrTooLarge) {
		t.Fatalf("prd.Load of %d tasks: %v", def.MaxTasks+1, err)
	}
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, []byte(tasksYAML(1)+"# "+strings.Repeat("x", def.MaxBytes)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := prd.Load(huge); !errors.Is(err, prd.ErrTooLarge) {
		t.Fatalf("prd.Load of a file over %d bytes: %v", def.MaxBytes, err)
	}
}

// A PRD path that is a named pipe is refused, not waited on.
func TestLoadRefusesWhatIsNoRegularFile(t *testing.T) {
	pipe := filepath.Join(t.TempDir(), "prd.yaml")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := prd.Load(pipe); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, prd.ErrInvalid) || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("err %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Load waits on a named pipe")
	}
	if _, err := prd.Load(t.TempDir()); !errors.Is(err, prd.ErrInvalid) {
		t.Fatalf("a directory: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := prd.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (prd.Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "MaxBytes") || !strings.Contains(err.Error(), "MaxTasks") {
		t.Fatalf("zero bounds: %v", err)
	}
}

// A PRD given as text is read like a file: YAML or JSON (told apart by the
// text when the format is not given), bounded, and every error names it.
func TestRead(t *testing.T) {
	c := prd.Config{MaxBytes: 2000, MaxTasks: 2}
	yamlText := []byte(tasksYAML(1))
	jsonText := []byte(`{"tasks":[{"id":"T1","title":"t","acceptance_criteria":["a"]}]}`)
	for _, tc := range []struct {
		data   []byte
		format string
	}{{yamlText, ""}, {yamlText, "yaml"}, {jsonText, ""}, {jsonText, "json"}, {jsonText, "YAML"}} {
		p, err := c.Read("prd", tc.data, tc.format)
		if err != nil || len(p.Tasks) != 1 {
			t.Errorf("Read(%q, %s): %v", tc.format, tc.data[:10], err)
		}
	}
	for name, tc := range map[string]struct {
		data   []byte
		format string
		want   string
	}{
		"json as yaml text": {[]byte(`{"tasks": [}`), "", "prd: invalid PRD: line 1"},
		"unknown format":    {yamlText, "toml", `prd: invalid PRD: format "toml"`},
		"too many tasks":    {[]byte(tasksYAML(3)), "", "prd: invalid PRD: over its limits: 3 tasks"},
		"too large":         {make([]byte, 2001), "", "prd: invalid PRD: over its limits: 2001 bytes"},
		"yaml as json":      {yamlText, "json", "prd: invalid PRD"},
	} {
		_, err := c.Read("prd", tc.data, tc.format)
		if !errors.Is(err, prd.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
