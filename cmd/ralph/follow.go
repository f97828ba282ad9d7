package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/watch"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/services/console"
)

// watcher follows the sessions of the configured team (RALPH_TEAM) on m,
// saying stalls and notices besides the events. Its Bus is the team's
// *bus.Bus.
func watcher(cfg config.Config, m *mesh.Mesh) (*watch.Watcher, error) {
	b, err := m.Bus.ForTeam(cfg.Team)
	if err != nil {
		return nil, badInput("RALPH_TEAM: %v", err)
	}
	// Checked a few times per period, and at most every 5 s.
	every := min(max(cfg.Run.StallAfter/4, 100*time.Millisecond), 5*time.Second)
	return &watch.Watcher{Bus: b, HandledBy: mesh.HandledBy(), StallAfter: cfg.Run.StallAfter, Every: every}, nil
}

// printer writes what a follower sees: each event (a line for people, or
// its envelope as JSON) and what the watcher says besides.
type printer struct {
	out  io.Writer
	json bool
	// times prefixes each line with the event's time; seqs puts the
	// event's stream sequence in its JSON (what --from-seq takes).
	times, seqs bool
}

func (p printer) event(ev bus.Stored) {
	if p.json {
		b, _ := json.Marshal(ev.Envelope)
		if p.seqs {
			b = append([]byte(`{"seq":`+strconv.FormatUint(ev.Seq, 10)+","), b[1:]...)
		}
		fmt.Fprintln(p.out, string(console.EscapeJSON(b)))
		return
	}
	line := console.Render(ev.Envelope)
	if line == "" {
		return
	}
	if p.times {
		line = ev.Time.Local().Format("15:04:05.000") + " " + line
	}
	fmt.Fprintln(p.out, line)
}

func (p printer) say(s watch.Say) {
	if p.json {
		b, _ := json.Marshal(map[string]watch.Say{"notice": s})
		fmt.Fprintln(p.out, string(console.EscapeJSON(b)))
		return
	}
	mark := "⏳"
	if s.Kind == watch.KindStall {
		mark = "⚠"
	}
	line := fmt.Sprintf("[%s] %s %s: %s", s.Session, mark, s.Service, s.Text)
	if s.Kind == watch.KindStall {
		// A stall's text names its service already.
		line = fmt.Sprintf("[%s] %s %s", s.Session, mark, s.Text)
	}
	if p.times {
		line = s.Time.Local().Format("15:04:05.000") + " " + line
	}
	fmt.Fprintln(p.out, console.Escape(line))
}
