package main

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/config"
)

// loadConfig reads the environment; a bad value is bad input.
func loadConfig() (config.Config, error) {
	cfg, err := config.Load()
	if err != nil {
		return cfg, exitError{code: 2, err: err}
	}
	// The planner's and detector's own checks, so a bad knob is reported
	// before anything starts rather than when its service is built.
	if _, err := mesh.CompactionOptions(cfg); err != nil {
		return cfg, exitError{code: 2, err: err}
	}
	if err := mesh.StuckConfig(cfg).Validate(); err != nil {
		return cfg, exitError{code: 2, err: fmt.Errorf("RALPH_STUCK_*: %w", err)}
	}
	return cfg, nil
}

// newLogger logs to stderr. Interactive commands (run, demo) default to
// warnings only so the live progress stays readable; RALPH_LOG_LEVEL wins.
func newLogger(cfg config.Config, interactive bool) (*zap.Logger, error) {
	level := cfg.LogLevel
	if _, set := os.LookupEnv("RALPH_LOG_LEVEL"); !set && interactive {
		level = "warn"
	}
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, badInput("RALPH_LOG_LEVEL: %v", err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Encoding = "console"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	zc.Sampling = nil
	return zc.Build()
}
