package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/ralphmesh/ralph/internal/control"
	"github.com/ralphmesh/ralph/internal/demo"
	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

// violations records the permission violations a nats-server logs.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) Errorf(format string, a ...any) {
	if line := fmt.Sprintf(format, a...); strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}
func (v *violations) Noticef(string, ...any) {}
func (v *violations) Warnf(string, ...any)   {}
func (v *violations) Fatalf(string, ...any)  {}
func (v *violations) Debugf(string, ...any)  {}
func (v *violations) Tracef(string, ...any)  {}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.lines...)
}

// permissionedServer starts a nats-server from the generated configuration
// for prefix and teams, every user's password set in the environment, and
// returns its URL.
func permissionedServer(t *testing.T, prefix string, teams ...string) (string, *violations) {
	t.Helper()
	dir := t.TempDir()
	for _, p := range mesh.Permissions(prefix) {
		t.Setenv(mesh.PasswordVariable(p.User), "pw-"+p.User)
	}
	for _, team := range teams {
		t.Setenv(mesh.PasswordVariable(mesh.TeamUser(team)), "pw-"+mesh.TeamUser(team))
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream {\n  store_dir: %q\n}\n%s", filepath.Join(dir, "js"), mesh.PermissionsConfig(prefix, teams...))
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("the generated configuration does not load: %v\n%s", err, conf)
	}
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	srv.SetLoggerV2(v, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL(), v
}

// as connects a mesh as user.
func as(t *testing.T, h *harness, user string) *mesh.Mesh {
	t.Helper()
	return asTeam(t, h, user, h.cfg.Team)
}

// asTeam connects a mesh as user, acting for team.
func asTeam(t *testing.T, h *harness, user, team string) *mesh.Mesh {
	t.Helper()
	cfg := h.cfg
	cfg.NATS.User, cfg.NATS.Password, cfg.Team = user, "pw-"+user, team
	m, err := mesh.Start(context.Background(), cfg, h.log, mesh.Options{Console: io.Discard})
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(m.Close)
	return m
}

// With the generated permissions, a client with only `ralph run`'s user
// cannot publish a service's event, the builder's user can, and a whole
// session started by a team's user completes with every service on its own
// user: the permission set is tight and sufficient. Another team's user is
// refused the session's events, its index entry, its notices, the replies
// of other clients, and resuming it.
func TestNATSPermissions(t *testing.T) {
	script, err := demo.Script()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, script)
	h.cfg.Builder.Model, h.cfg.Critic.Model, h.cfg.Pruner.Model = demo.BuilderModel, demo.CriticModel, demo.PrunerModel
	url, denied := permissionedServer(t, h.cfg.Prefix, "web", "ops")
	h.cfg.NATS.URL = url

	admin := as(t, h, mesh.AdminUser) // creates the streams
	meshes := map[string]*mesh.Mesh{}
	for _, name := range mesh.Services {
		meshes[name] = as(t, h, name)
		h.run(meshes[name], name)
	}
	run := as(t, h, mesh.RunClient)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	forged := events.Must(events.CritiqueRequested, "forged", "T1", 1, time.Now(), events.CritiqueRequestedData{
		Task: prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}, Verify: "touch /tmp/pwned"}, Workspace: "/tmp", Attempt: 1})
	if err := run.Bus.Publish(ctx, forged); err == nil {
		t.Fatal("the run client's user published critique.requested")
	}
	if last := run.Bus.Conn().LastError(); !errors.Is(last, nats.ErrPermissionViolation) || !strings.Contains(last.Error(), "critique.requested") {
		t.Errorf("the run client's connection saw %v, want a permissions violation for critique.requested", last)
	}
	accepted := forged
	accepted.Session, accepted.ID = "accepted", "accepted/1/critique.requested/T1"
	if err := meshes["builder"].Bus.Publish(context.Background(), accepted); err != nil {
		t.Errorf("the builder's user could not publish critique.requested: %v", err)
	}

	p, err := demo.PRD()
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(t.TempDir(), "ws")
	if err := demo.Workspace(ws); err != nil {
		t.Fatal(err)
	}
	web := asTeam(t, h, mesh.TeamUser("web"), "web")
	ctl := &control.Control{Bus: web.Bus, Index: web.Index}
	start := events.Must(events.SessionStarted, "permitted", "", 0, time.Now(), events.SessionStartedData{PRD: p, Workspace: ws}).For("web")
	if err := ctl.Start(context.Background(), start); err != nil {
		t.Fatalf("team web starts a session: %v", err)
	}
	webBus, err := web.Bus.ForTeam("web")
	if err != nil {
		t.Fatal(err)
	}
	got := h.wait(&mesh.Mesh{Bus: webBus}, "permitted")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("the session ended with %s; events: %v", last.Type, types(got))
	}
	waitIndexed(t, web, "web", "permitted", "completed")
	if list, err := ctl.List(context.Background(), "web"); err != nil || len(list) != 1 || list[0].ID != "permitted" {
		t.Errorf("team web lists %v, %v", list, err)
	}

	// Team ops's user, on a bus of every team (not the CLI's, which
	// would not even ask), is refused everything of team web's.
	ops := asTeam(t, h, mesh.TeamUser("ops"), "ops")
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	if err := ops.Bus.Replay(short(), "permitted", func(events.Envelope) error { return nil }); err == nil {
		t.Error("team ops replayed team web's session")
	}
	if _, err := ops.Index.Get(short(), "web", "permitted"); err == nil {
		t.Error("team ops read team web's index entry")
	}
	if list, err := ops.Index.List(short(), "web"); err == nil {
		t.Errorf("team ops listed team web's sessions: %v", list)
	}
	resume := events.Must(events.SessionResumed, "permitted", "", 1, time.Now(), events.SessionResumedData{Message: "mine now"}).For("web")
	if err := ops.Bus.Publish(short(), resume); err == nil || !strings.Contains(err.Error(), "may not publish") {
		t.Errorf("team ops resumed team web's session: %v", err)
	}
	if err := ops.Bus.Notices(short(), "", func(bus.Notice) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.Bus.Conn().SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	_ = ops.Bus.Conn().Flush()
	// Its own team's sessions it may list.
	if _, err := ops.Index.List(short(), "ops"); err != nil {
		t.Errorf("team ops lists its own sessions: %v", err)
	}
	opsRefused := map[string]*regexp.Regexp{
		"the session's events":   regexp.MustCompile(`team-ops" - Publish Violation - Subject "\$JS\.API\.CONSUMER\.CREATE\.[A-Z0-9_]+\.[^.]+\.` + regexp.QuoteMeta(h.cfg.Prefix+".s.*.permitted.>")),
		"its index entry":        regexp.MustCompile(`team-ops" - Publish Violation - Subject "\$JS\.API\.DIRECT\.GET\..*\.web\.permitted"`),
		"the team's index":       regexp.MustCompile(`team-ops" - Publish Violation - Subject "\$JS\.API\.CONSUMER\.CREATE\.KV_.*\.web\.\*"`),
		"resuming it":            regexp.MustCompile(`team-ops" - Publish Violation - Subject "` + regexp.QuoteMeta(events.Subject(h.cfg.Prefix, "web", "permitted", events.SessionResumed))),
		"every team's notices":   regexp.MustCompile(`team-ops" - Subscription Violation - Subject "` + regexp.QuoteMeta(h.cfg.Prefix+".notice.*.*")),
		"other clients' replies": regexp.MustCompile(`team-ops" - Subscription Violation - Subject "_INBOX\.>"`),
	}
	waitFor(t, "the server's refusals of team ops", func() bool {
		lines := strings.Join(denied.all(), "\n")
		for _, re := range opsRefused {
			if !re.MatchString(lines) {
				return false
			}
		}
		return true
	})

	// Every service, on its own user, answers the NATS service API, which
	// the administrator asks (`nats micro list`).
	var want []string
	for _, s := range mesh.Services {
		want = append(want, mesh.MicroName(s))
	}
	discover(t, admin.Bus.Conn(), h.cfg.Prefix, want)

	// A service whose stream settings differ from the streams' may not
	// change them, and is told so.
	cfg := h.cfg
	cfg.NATS.User, cfg.NATS.Password = "critic", "pw-critic"
	cfg.Stream.MaxAge = time.Hour
	if m, err := mesh.Start(context.Background(), cfg, h.log, mesh.Options{}); err == nil {
		m.Close()
		t.Error("the critic's user changed the stream")
	} else if !strings.Contains(err.Error(), "may not manage streams") || !strings.Contains(err.Error(), "$JS.API.STREAM.UPDATE") {
		t.Errorf("changing the stream as the critic: %v, want a refusal naming the reason", err)
	}
	updates := regexp.MustCompile(`user:critic" - Publish Violation - Subject "\$JS\.API\.STREAM\.UPDATE\.`)

	// The only violations are the forged publish and that update: everything the services
	// and the run client did was within their permissions.
	forgedSubject := regexp.MustCompile(`Publish Violation - .*Subject "` + regexp.QuoteMeta(events.Subject(h.cfg.Prefix, events.DefaultTeam, "forged", events.CritiqueRequested)) + `"`)
	for _, line := range denied.all() {
		if !forgedSubject.MatchString(line) && !updates.MatchString(line) && !strings.Contains(line, `team-ops"`) {
			t.Errorf("unexpected permission violation: %s", line)
		}
	}
	if len(denied.all()) == 0 {
		t.Error("the server logged no violation for the forged publish")
	}
}

// The configuration in docs/nats-permissions.md is the generated one.
func TestPermissionsDocIsGenerated(t *testing.T) {
	doc, err := os.ReadFile("../../docs/nats-permissions.md")
	if err != nil {
		t.Fatal(err)
	}
	want := mesh.PermissionsConfig("ralph")
	if !strings.Contains(string(doc), "```\n"+want+"```\n") {
		t.Errorf("docs/nats-permissions.md does not hold the generated configuration; `RALPH_PREFIX=ralph ralph config nats` prints it:\n%s", want)
	}
}

// waitIndexed waits until the index of m shows session of team in state.
func waitIndexed(t *testing.T, m *mesh.Mesh, team, session, state string) {
	t.Helper()
	waitFor(t, "session "+session+" "+state+" in the index", func() bool {
		e, err := m.Index.Get(context.Background(), team, session)
		return err == nil && e.State == state
	})
}
