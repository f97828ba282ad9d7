package meshbench

import (
	"testing"
	"time"
)

func TestTargets(t *testing.T) {
	floor := Floor{Total: time.Millisecond}
	fast := Report{Results: []Result{
		{Sessions: 1, Steps: 100, Wall: time.Second, StepP50: 1400 * time.Microsecond, StepP99: 3 * time.Millisecond, Floor: floor},
		{Sessions: 100, Steps: 1300, Wall: time.Second, StepP50: 2 * time.Millisecond, StepP99: 5 * time.Millisecond, Floor: floor,
			Mesh: CPU{PerIt: 600 * time.Microsecond, Measured: true}, NATS: CPU{PerIt: 300 * time.Microsecond, Measured: true}, Redis: CPU{PerIt: 100 * time.Microsecond, Measured: true}},
		{Sessions: 500, Steps: 1200, Wall: time.Second, StepP50: 10 * time.Millisecond, StepP99: 30 * time.Millisecond, LongestGap: time.Second, Floor: floor},
	}}
	ts := fast.Targets()
	if len(ts) != 6 {
		t.Fatalf("%d targets, want 6: %+v", len(ts), ts)
	}
	for _, tg := range ts {
		if !tg.Met {
			t.Errorf("%s: %s (want %s): missed, want met", tg.Name, tg.Got, tg.Want)
		}
	}

	slow := fast
	slow.Results = []Result{fast.Results[0], fast.Results[1], fast.Results[2]}
	slow.Results[0].StepP50 = 1600 * time.Microsecond                  // ratio 1.6
	slow.Results[1].Redis.PerIt = 101 * time.Microsecond               // 1.001 ms
	slow.Results[1].Steps = 1199                                       // 1199 its/s
	slow.Results[2].LongestGap = time.Second + time.Millisecond        // a stall
	slow.Results[2].StepP99 = 31 * time.Millisecond                    // 3.1 x p50
	slow.Results[2].Steps = int(0.89 * float64(slow.Results[1].Steps)) // under 90% of 100's
	for _, tg := range slow.Targets() {
		if tg.Met {
			t.Errorf("%s: %s (want %s): met, want missed", tg.Name, tg.Got, tg.Want)
		}
	}

	only10 := Report{Results: []Result{{Sessions: 10, Steps: 1, Wall: time.Second, StepP50: 1, Floor: floor}}}
	if ts := only10.Targets(); len(ts) != 0 {
		t.Errorf("targets for 10 sessions only: %+v, want none", ts)
	}
}
