package sandbox

import (
	"path/filepath"

	"github.com/ralphmesh/ralph/pkg/settings"
)

// Modes of RALPH_SANDBOX_MODE.
const (
	// ModeBwrap runs every command inside bubblewrap.
	ModeBwrap = "bwrap"
	// ModeNone runs commands as plain child processes of the service: they
	// can read its environment and files, write anywhere it may, and only
	// their process group is killed when the call ends. It is an explicit
	// opt-out for hosts where bubblewrap cannot work.
	ModeNone = "none"
)

// Values of RALPH_SANDBOX_NETWORK.
const (
	NetworkOn  = "on"
	NetworkOff = "off"
)

// Config is the sandbox's configuration (RALPH_SANDBOX_*, through
// pkg/config). Its tags are the one home of its defaults.
type Config struct {
	Mode string `default:"bwrap" desc:"bwrap: the agent's commands (the run tool, the critic's verify) run in bubblewrap; none: they run unconfined, able to read this process's secrets (an explicit opt-out, warned about at start)"`
	// Network is on by default because installing dependencies is part of
	// most coding tasks.
	Network string `default:"on" desc:"on: commands share the host's network (package installs work, and so does any service this host reaches, local ones included); off: a network namespace with loopback only"`
	// ReadOnly is what of the host a command sees, read-only: the system's
	// programs and libraries, not the home directories, /root, /srv or
	// /run, where credentials and other people's files live.
	ReadOnly []string `split_words:"true" default:"/usr,/bin,/sbin,/lib,/lib32,/lib64,/libx32,/etc,/opt" desc:"host paths commands can read (comma-separated; missing ones are skipped); the workspace is the only writable host path, /tmp and HOME are private and empty"`
	// Hide lists host secrets that would otherwise be visible under
	// ReadOnly or in the workspace.
	Hide []string `default:"/etc/shadow,/etc/gshadow,/etc/ssl/private" desc:"files or directories commands cannot read (comma-separated), besides the secret files named by RALPH_NATS_CREDS, RALPH_NATS_NKEY and RALPH_NATS_TLS_KEY"`
	// Secrets are the files other settings name that hold secrets (NATS
	// credentials, keys). The wiring fills them in; they are hidden like
	// Hide.
	Secrets []string `ignored:"true"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings no sandbox could be built from.
func (c Config) Validate() error {
	errs := []error{
		settings.Check(c.Mode == ModeBwrap || c.Mode == ModeNone, "Mode", c.Mode, "not bwrap or none"),
		settings.Check(c.Network == NetworkOn || c.Network == NetworkOff, "Network", c.Network, "not on or off"),
	}
	for _, p := range c.ReadOnly {
		errs = append(errs, settings.Check(p == "" || filepath.IsAbs(p), "ReadOnly", p, "not an absolute path"))
	}
	for _, p := range c.Hide {
		errs = append(errs, settings.Check(p == "" || filepath.IsAbs(p), "Hide", p, "not an absolute path"))
	}
	return settings.Join(errs...)
}
