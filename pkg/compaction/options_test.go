package compaction

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultOptionsAreValid(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	o := DefaultOptions()
	if o.Mode != ModeTieredAdaptive || o.PressureRatio != 0.70 || o.CriticalRatio != 0.90 || o.TargetRatio >= o.PressureRatio {
		t.Errorf("defaults %+v", o)
	}
}

func TestOptionsValidateNamesTheKnob(t *testing.T) {
	tests := []struct {
		knob string
		mut  func(*Options)
	}{
		{"Mode", func(o *Options) { o.Mode = "aggressive" }},
		{"PressureRatio", func(o *Options) { o.PressureRatio = 0 }},
		{"PressureRatio", func(o *Options) { o.PressureRatio = 1.2 }},
		{"CriticalRatio", func(o *Options) { o.CriticalRatio = 0.6 }},
		{"CriticalRatio", func(o *Options) { o.CriticalRatio = 1.5 }},
		{"TargetRatio", func(o *Options) { o.TargetRatio = 0.75 }},
		{"TargetRatio", func(o *Options) { o.TargetRatio = 0 }},
		{"RecentTurns", func(o *Options) { o.RecentTurns = -1 }},
		{"MaxCallsPerIteration", func(o *Options) { o.MaxCallsPerIteration = -1 }},
		{"MinGainTokens", func(o *Options) { o.MinGainTokens = -5 }},
		{"OvershootLimit", func(o *Options) { o.OvershootLimit = 0 }},
		{"CooldownIterations", func(o *Options) { o.CooldownIterations = -1 }},
		{"MinFeasibleRatio", func(o *Options) { o.MinFeasibleRatio = 1 }},
		{"MaxUsefulRatio", func(o *Options) { o.MaxUsefulRatio = 0.01 }},
		{"MaxOutputTokens", func(o *Options) { o.MaxOutputTokens = 0 }},
		{"PointerTokens", func(o *Options) { o.PointerTokens = 0 }},
		{"AdvisorEpsilon", func(o *Options) { o.AdvisorEpsilon = -0.1 }},
		{"AdvisorTopK", func(o *Options) { o.AdvisorTopK = -1 }},
		{"AdvisorTimeout", func(o *Options) { o.AdvisorTimeout = 0 }},
	}
	for _, tt := range tests {
		o := opts(tt.mut)
		err := o.Validate()
		if err == nil {
			t.Errorf("%s: invalid options accepted: %+v", tt.knob, o)
			continue
		}
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tt.knob+": ") {
			t.Errorf("%s: error %q does not name the knob", tt.knob, err)
		}
	}
	// A disabled advisor needs no timeout.
	if err := opts(func(o *Options) { o.AdvisorTopK = 0; o.AdvisorTimeout = 0 }).Validate(); err != nil {
		t.Errorf("advisor off without timeout: %v", err)
	}
	// Every bad knob, on one line.
	err := opts(func(o *Options) { o.PointerTokens = 0; o.AdvisorTimeout = -time.Second }).Validate()
	if err == nil || !strings.Contains(err.Error(), "PointerTokens") || !strings.Contains(err.Error(), "AdvisorTimeout") || strings.Contains(err.Error(), "\n") {
		t.Errorf("two bad knobs: %q", err)
	}
}
