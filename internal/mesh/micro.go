package mesh

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// Each running service registers with the NATS service API (nats.go
// micro), so that `nats micro list`, `nats micro info ralph-builder` and
// `nats micro stats ralph-builder` show every instance, with its version,
// what it handles and publishes, and its status endpoint.

// MicroName is the name service registers under: ralph-<service>.
func MicroName(service string) string { return "ralph-" + service }

// StatusSubject is where service's status endpoint answers under prefix.
func StatusSubject(prefix, service string) string { return prefix + ".svc." + service + ".status" }

// semverPattern is what the service API takes as a version.
var semverPattern = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// Version is this build's version: the module's, as the Go toolchain
// stamped it, or 0.0.0-dev for a build from a work tree.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := strings.TrimPrefix(bi.Main.Version, "v"); semverPattern.MatchString(v) {
			return v
		}
	}
	return "0.0.0-dev"
}

// Status is what a service's status endpoint answers.
type Status struct {
	Service   string   `json:"service"`
	Version   string   `json:"version"`
	Prefix    string   `json:"prefix"`
	Consumer  string   `json:"consumer,omitempty"`
	Handles   []string `json:"handles,omitempty"`
	Publishes []string `json:"publishes,omitempty"`
	// InFlight are the events this process's handlers hold.
	InFlight int64 `json:"in_flight"`
}

// register adds service to the NATS service API; the returned stop takes
// it off.
func (m *Mesh) register(service string) (stop func(), err error) {
	c := Contracts[service]
	st := Status{Service: service, Version: Version(), Prefix: m.Config.Prefix, Handles: names(c.Consumes), Publishes: names(c.Publishes)}
	if HasConsumer(service) {
		st.Consumer = bus.ConsumerName(service)
	}
	meta := map[string]string{"prefix": st.Prefix, "consumer": st.Consumer, "handles": strings.Join(st.Handles, ","),
		"publishes": strings.Join(st.Publishes, ",")}
	svc, err := micro.AddService(m.Bus.Conn(), micro.Config{
		Name:        MicroName(service),
		Version:     st.Version,
		Description: "Ralph mesh " + service,
		Metadata:    meta,
		StatsHandler: func(*micro.Endpoint) any {
			return map[string]int64{"in_flight": m.flight.inFlight.Load()}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("register %s with the NATS service API: %w", service, err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(r micro.Request) {
		now := st
		now.InFlight = m.flight.inFlight.Load()
		_ = r.RespondJSON(now)
	}), micro.WithEndpointSubject(StatusSubject(m.Config.Prefix, service)), micro.WithEndpointMetadata(meta))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("register %s's status endpoint: %w", service, err)
	}
	return func() {
		if err := svc.Stop(); err != nil {
			m.Log.Debug("service API registration not stopped", zap.String("service", service), zap.Error(err))
		}
	}, nil
}

func names(types []events.Type) []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = string(t)
	}
	return out
}
