package mesh_test

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/events"
)

// discover asks the NATS service API (what `nats micro list` and `nats
// micro info` ask: $SRV.INFO) and returns the instances of prefix by name,
// once every service named has answered.
func discover(t *testing.T, nc *nats.Conn, prefix string, want []string) map[string]micro.Info {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	found := map[string]micro.Info{}
	deadline := time.Now().Add(time.Minute)
	for len(found) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("the service API shows %v of prefix %s, want %v", keys(found), prefix, want)
		}
		if err := nc.PublishRequest("$SRV.INFO", inbox, nil); err != nil {
			t.Fatal(err)
		}
		for {
			msg, err := sub.NextMsg(200 * time.Millisecond)
			if err != nil {
				break
			}
			var info micro.Info
			if json.Unmarshal(msg.Data, &info) == nil && info.Metadata["prefix"] == prefix {
				found[info.Name] = info
			}
		}
	}
	return found
}

func keys(m map[string]micro.Info) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Every running service registers with the NATS service API: `nats micro
// list` shows each instance with its version and what it handles, its
// status endpoint answers, and `nats micro stats` shows its numbers.
func TestServicesRegisterWithTheServiceAPI(t *testing.T) {
	h := newHarness(t, parseScript(t, "rules: [{reply: {content: done}}]"))
	m, err := mesh.Start(context.Background(), h.cfg, h.log, mesh.Options{Console: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	stop := h.run(m, mesh.Services...)
	var want []string
	for _, s := range mesh.Services {
		want = append(want, mesh.MicroName(s))
	}
	found := discover(t, m.Bus.Conn(), h.cfg.Prefix, want)
	b := found["ralph-builder"]
	if b.Version != mesh.Version() || !strings.Contains(b.Metadata["handles"], string(events.CancelRequested)) || b.Metadata["consumer"] != "builder" ||
		len(b.Endpoints) != 1 || b.Endpoints[0].Subject != mesh.StatusSubject(h.cfg.Prefix, "builder") {
		t.Errorf("ralph-builder: %+v", b)
	}
	if c := found["ralph-console"]; c.Metadata["consumer"] != "" || !strings.Contains(c.Metadata["publishes"], "session.started") {
		t.Errorf("ralph-console: %+v", c)
	}

	msg, err := m.Bus.Conn().Request(mesh.StatusSubject(h.cfg.Prefix, "critic"), nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st mesh.Status
	if err := json.Unmarshal(msg.Data, &st); err != nil || st.Service != "critic" || st.Consumer != "critic" ||
		!slices.Equal(st.Handles, []string{"critique.requested"}) || st.Prefix != h.cfg.Prefix {
		t.Errorf("critic's status: %+v %v", st, err)
	}
	msg, err = m.Bus.Conn().Request("$SRV.STATS."+b.Name+"."+b.ID, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(msg.Data, &stats); err != nil || len(stats.Endpoints) != 1 || stats.Endpoints[0].Name != "status" ||
		!strings.Contains(string(stats.Endpoints[0].Data), "in_flight") {
		t.Errorf("ralph-builder's stats: %+v %v", stats, err)
	}

	// A stopped service leaves the list.
	stop()
	msg, err = m.Bus.Conn().Request("$SRV.PING."+b.Name+"."+b.ID, nil, 500*time.Millisecond)
	if err == nil {
		t.Errorf("a stopped builder still answers: %s", msg.Data)
	}
}
