package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ralphmesh/ralph/pkg/config"
)

// RALPH_LOG_FORMAT=json writes one JSON object per line, with the fields a
// collector indexes; console writes lines for people.
func TestLogFormat(t *testing.T) {
	cfg, err := config.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("RALPH_LOG_LEVEL", "info")
	for _, format := range []string{"json", "console"} {
		cfg.LogFormat = format
		var buf bytes.Buffer
		log, err := newLoggerTo(zapcore.AddSync(&buf), cfg, false)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("service stopping", zap.String("reason", "terminated signal received"), zap.Int64("in_flight", 2))
		log.Debug("not at info")
		_ = log.Sync()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("%s: %d lines: %q", format, len(lines), buf.String())
		}
		var obj map[string]any
		isJSON := json.Unmarshal([]byte(lines[0]), &obj) == nil
		if isJSON != (format == "json") {
			t.Fatalf("%s: line %q", format, lines[0])
		}
		if format == "json" {
			for k, want := range map[string]any{"level": "info", "msg": "service stopping", "reason": "terminated signal received", "in_flight": float64(2)} {
				if obj[k] != want {
					t.Errorf("json %s = %v, want %v (line %s)", k, obj[k], want, lines[0])
				}
			}
			if _, ok := obj["ts"].(string); !ok {
				t.Errorf("json line without a ts: %s", lines[0])
			}
		} else if !strings.Contains(lines[0], "service stopping") || !strings.Contains(lines[0], `"in_flight": 2`) {
			t.Errorf("console line %q", lines[0])
		}
	}
	cfg.LogFormat = "xml"
	if _, err := newLoggerTo(zapcore.AddSync(&bytes.Buffer{}), cfg, false); err == nil {
		t.Fatal("xml: want an error")
	}
}
