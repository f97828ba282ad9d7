package prd

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ralphmesh/ralph/pkg/settings"
)

// Config bounds the PRDs sessions start from. Its tags are the one home of
// these defaults (RALPH_PRD_*, through pkg/config). Without bounds a PRD of
// 10,000 tasks ran, and one of 10 MB was refused only by the bus.
type Config struct {
	MaxBytes int `split_words:"true" default:"262144" desc:"largest PRD file a session may start from, in bytes (its tasks travel in session.started, which must fit in the NATS max payload)"`
	MaxTasks int `split_words:"true" default:"200" desc:"most tasks a PRD may have"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects bounds no PRD could meet.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.MaxBytes >= 1, "MaxBytes", c.MaxBytes, "must be at least 1"),
		settings.Check(c.MaxTasks >= 1, "MaxTasks", c.MaxTasks, "must be at least 1"),
	)
}

// ErrTooLarge is wrapped by the error for a PRD over a bound of Config. It
// is an ErrInvalid too.
var ErrTooLarge = fmt.Errorf("%w: over its limits", ErrInvalid)

// Load reads, validates and bounds the PRD file at path, which must have
// a task to run.
func (c Config) Load(path string) (PRD, error) {
	f, err := c.LoadFile(path)
	if err != nil {
		return PRD{}, err
	}
	if len(f.Tasks) == 0 {
		return PRD{}, fmt.Errorf("%s: %w", path, ErrNothingToRun)
	}
	return f.PRD, nil
}

// LoadFile reads, validates and bounds the PRD file at path, as ParseFile
// reads it. Its size is checked before it is read, and it must be a
// regular file: a named pipe would be waited on, a device read forever.
func (c Config) LoadFile(path string) (File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return File{}, fmt.Errorf("read PRD %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return File{}, fmt.Errorf("read PRD %s: %w: not a regular file", path, ErrInvalid)
	}
	if fi.Size() > int64(c.MaxBytes) {
		return File{}, c.tooLarge(path, fi.Size())
	}
	f, err := os.Open(path)
	if err != nil {
		return File{}, fmt.Errorf("read PRD %s: %w", path, err)
	}
	defer f.Close()
	// The file may have grown since it was looked at.
	data, err := io.ReadAll(io.LimitReader(f, int64(c.MaxBytes)+1))
	if err != nil {
		return File{}, fmt.Errorf("read PRD %s: %w", path, err)
	}
	if len(data) > c.MaxBytes {
		return File{}, c.tooLarge(path, int64(len(data)))
	}
	p, err := ParseFile(data, filepath.Ext(path))
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Check(p.PRD); err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Read validates and bounds a PRD given as text rather than a file (the
// HTTP API's): format is "yaml", "json", or "" to tell them apart by the
// text (a JSON PRD is an object, and starts with '{'). name names it in
// every error, as Load's errors name the file.
func (c Config) Read(name string, data []byte, format string) (PRD, error) {
	if len(data) > c.MaxBytes {
		return PRD{}, c.tooLarge(name, int64(len(data)))
	}
	ext := ""
	switch strings.ToLower(format) {
	case "json":
		ext = ".json"
	case "yaml", "yml":
	case "":
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
			ext = ".json"
		}
	default:
		return PRD{}, fmt.Errorf("%s: %w: format %q is neither yaml nor json", name, ErrInvalid, format)
	}
	p, err := Parse(data, ext)
	if err != nil {
		return PRD{}, fmt.Errorf("%s: %w", name, err)
	}
	if err := c.Check(p); err != nil {
		return PRD{}, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

// Check bounds a PRD already read: its number of tasks.
func (c Config) Check(p PRD) error {
	if len(p.Tasks) > c.MaxTasks {
		return fmt.Errorf("%w: %d tasks, more than the %d allowed (RALPH_PRD_MAX_TASKS); split it into several PRDs", ErrTooLarge, len(p.Tasks), c.MaxTasks)
	}
	return nil
}

func (c Config) tooLarge(path string, size int64) error {
	return fmt.Errorf("%s: %w: %d bytes, more than the %d allowed (RALPH_PRD_MAX_BYTES)", path, ErrTooLarge, size, c.MaxBytes)
}
