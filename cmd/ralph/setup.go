package main

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ralphmesh/ralph/pkg/config"
)

// loadConfig reads the environment the same way for every command: each
// setting is validated once, by config.Load, so a value one command
// accepts no other refuses. A bad value is bad input (exit 2). RALPH_*
// variables that are no setting are warned about on stderr, not refused.
func loadConfig() (config.Config, error) {
	warnUnknown(os.Stderr, os.Environ())
	cfg, err := config.Load()
	if err != nil {
		return cfg, exitError{code: 2, err: err}
	}
	return cfg, nil
}

// warnUnknown prints one line per RALPH_* variable in environ that is no
// setting, with the closest setting's name.
func warnUnknown(w io.Writer, environ []string) {
	for _, warning := range config.Unknown(environ) {
		fmt.Fprintf(w, "ralph: warning: %s\n", warning)
	}
}

// newLogger logs to stderr. Interactive commands (run, demo) default to
// warnings only so the live progress stays readable; RALPH_LOG_LEVEL wins.
func newLogger(cfg config.Config, interactive bool) (*zap.Logger, error) {
	return newLoggerTo(zapcore.Lock(os.Stderr), cfg, interactive)
}

// newLoggerTo logs to w in RALPH_LOG_FORMAT: console lines for people, or
// one JSON object per line (ts, level, logger, caller, msg and the fields)
// for a log collector.
func newLoggerTo(w zapcore.WriteSyncer, cfg config.Config, interactive bool) (*zap.Logger, error) {
	level := cfg.LogLevel
	if _, set := os.LookupEnv("RALPH_LOG_LEVEL"); !set && interactive {
		level = "warn"
	}
	// config.Load validated the level with the same parser.
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, badInput("RALPH_LOG_LEVEL=%s: %v", level, err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch cfg.LogFormat {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "console", "":
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, badInput("RALPH_LOG_FORMAT=%s: not console or json", cfg.LogFormat)
	}
	// What zap.NewProductionConfig().Build() adds, without its sampling:
	// a repeated line may be the one that matters.
	return zap.New(zapcore.NewCore(enc, w, lvl), zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel), zap.ErrorOutput(w)), nil
}
