package mesh

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
)

// AdminUser is the NATS user that creates and updates the streams (and
// may do anything else with JetStream); the services and the run client
// may only look streams up.
const AdminUser = "admin"

// UserPermissions are one NATS user's permissions: the subjects it may
// publish to (with exceptions) and subscribe to.
type UserPermissions struct {
	User        string
	Publish     []string
	DenyPublish []string
	Subscribe   []string
	// Responses: the user may answer the requests it receives (the NATS
	// service API's PING, INFO and STATS, and a service's status).
	Responses bool
}

// Server is p as an embedded nats-server's permissions.
func (p UserPermissions) Server() *server.Permissions {
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.Publish, Deny: p.DenyPublish},
		Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
	}
	if p.Responses {
		sp.Response = &server.ResponsePermission{MaxMsgs: 1}
	}
	return sp
}

// inbox is where every client gets its replies: JetStream API answers,
// publish acknowledgements and the messages its pull consumers fetch.
const inbox = "_INBOX.>"

// Permissions are the NATS permissions of every party of the mesh under
// prefix, derived from Contracts: AdminUser first, then every service in
// Services' order, then RunClient. A service may publish only the event
// types it publishes, and work only its own durable consumers (create
// them, fetch, ack and dead-letter their events); a follower (the console,
// `ralph run`) may read every session through ordered consumers of its
// own but not take a service's consumer; nobody but the administrator
// may create, change or delete a stream. The builder keeps the session
// index; the followers read it. TeamPermissions are the users of one team.
func Permissions(prefix string) []UserPermissions {
	stream := events.StreamName(prefix)
	var durables []string
	for _, name := range parties() {
		if len(Contracts[name].Consumes) > 0 {
			durables = append(durables, bus.ConsumerName(name))
		}
	}
	sort.Strings(durables)

	out := []UserPermissions{{User: AdminUser,
		// The whole JetStream API, the session subjects, where `ralph dlq
		// replay` puts a dead letter's event back, and the NATS service
		// API's requests (`nats micro list`).
		Publish: []string{api + ">", events.AllSessions(prefix), "$SRV.>"}, Subscribe: []string{inbox}}}
	for _, name := range parties() {
		c := Contracts[name]
		p := UserPermissions{User: name, Publish: lookUp(prefix), Subscribe: []string{inbox}}
		for _, typ := range c.Publishes {
			p.Publish = append(p.Publish, events.TypeFilter(prefix, typ))
		}
		if len(c.Consumes) > 0 {
			d := bus.ConsumerName(name)
			create := api + "CONSUMER.CREATE." + stream + "." + d
			if len(c.Consumes) == 1 {
				// A single filter is part of the subject, so the
				// permission pins it. A consumer filtered to several types
				// (the builder's) has its filters in the request body: its
				// user may create its own durable with any filter, which
				// lets it read other types' events, never publish them.
				create += "." + events.TypeFilter(prefix, c.Consumes[0])
			}
			p.Publish = append(p.Publish, create,
				api+"CONSUMER.INFO."+stream+"."+d,
				api+"CONSUMER.MSG.NEXT."+stream+"."+d,
				// Ack, nak, in-progress and term of the consumer's events.
				"$JS.ACK."+stream+"."+d+".>",
				events.DeadLetterSubject(prefix, d))
			// The per-type durables of earlier versions, which the
			// service removes at start.
			for _, typ := range c.Consumes {
				p.Publish = append(p.Publish, api+"CONSUMER.DELETE."+stream+"."+bus.LegacyConsumerName(name, typ))
			}
		}
		if c.Notifies {
			// Notices about the sessions it works on (a model call being
			// retried), for their followers.
			p.Publish = append(p.Publish, events.NoticeFilter(prefix, "*", "*"))
		}
		if c.SupervisesDeadLetters {
			// The builder reads every dead letter to end the session it
			// blocks, and looks up a session's last event of a type.
			dlq, d := events.DeadLetterStream(prefix), bus.DeadLetterConsumer(name)
			p.Publish = append(p.Publish,
				api+"CONSUMER.CREATE."+dlq+"."+d+"."+events.DeadLetters(prefix),
				api+"CONSUMER.INFO."+dlq+"."+d,
				api+"CONSUMER.MSG.NEXT."+dlq+"."+d,
				"$JS.ACK."+dlq+"."+d+".>",
				events.DeadLetterSubject(prefix, d),
				api+"STREAM.MSG.GET."+stream)
		}
		if c.KeepsIndex {
			// The builder writes every session's entry (and each team's
			// tokens of the day) and reads them back to compare.
			p.Publish = append(p.Publish, sessionindex.KeyPrefix(prefix)+">")
			p.Publish = append(p.Publish, indexReader(prefix, events.AnyTeam)...)
		}
		if slices.Contains(Services, name) {
			// Every service registers with the NATS service API (micro.go)
			// and answers its requests.
			p.Subscribe = append(p.Subscribe, "$SRV.>", StatusSubject(prefix, name))
			p.Responses = true
		}
		if c.Follows {
			// An ordered consumer has a generated name and is created
			// again (the old one deleted) when it falls behind.
			p.Publish = append(p.Publish,
				api+"CONSUMER.CREATE."+stream+".*."+events.AllSessions(prefix),
				api+"CONSUMER.INFO."+stream+".*",
				api+"CONSUMER.MSG.NEXT."+stream+".*",
				api+"CONSUMER.DELETE."+stream+".*")
			p.Publish = append(p.Publish, indexReader(prefix, events.AnyTeam)...)
			p.Subscribe = append(p.Subscribe, events.NoticeFilter(prefix, "*", "*"))
			// The wildcards above would also reach the services' durable
			// consumers: taking their events, or changing their filter.
			// Reading their info stays allowed: a follower tells a stalled
			// stage from its consumer's counts.
			p.DenyPublish = append(p.DenyPublish, denyDurables(stream, durables)...)
		}
		out = append(out, p)
	}
	return out
}

// api is the JetStream API's subject prefix.
const api = "$JS.API."

// lookUp are the streams every party may look up: the session events, the
// dead letters and the session index.
func lookUp(prefix string) []string {
	return []string{api + "STREAM.INFO." + events.StreamName(prefix), api + "STREAM.INFO." + events.DeadLetterStream(prefix),
		api + "STREAM.INFO." + sessionindex.Stream(prefix)}
}

// indexReader are the permissions to read the session index entries of
// team (events.AnyTeam: of every team): one entry by key (a direct get,
// whose subject names the key) and a team's entries through an ordered
// consumer of the bucket's stream filtered to the team's keys.
func indexReader(prefix, team string) []string {
	kv, keys := sessionindex.Stream(prefix), sessionindex.KeyPrefix(prefix)
	if team == events.AnyTeam {
		keys += ">"
	} else {
		keys += team + ".>"
	}
	return []string{
		api + "DIRECT.GET." + kv + "." + keys,
		api + "CONSUMER.CREATE." + kv + ".*." + keys,
		api + "CONSUMER.INFO." + kv + ".*",
		api + "CONSUMER.MSG.NEXT." + kv + ".*",
		api + "CONSUMER.DELETE." + kv + ".*",
	}
}

// denyDurables keeps a follower's wildcards off the services' durable
// consumers.
func denyDurables(stream string, durables []string) []string {
	var deny []string
	for _, d := range durables {
		deny = append(deny,
			api+"CONSUMER.CREATE."+stream+"."+d+".>",
			api+"CONSUMER.MSG.NEXT."+stream+"."+d,
			api+"CONSUMER.DELETE."+stream+"."+d)
	}
	return deny
}

// TeamUser is the NATS user of team's people: their ralph commands (run,
// watch, sessions, status, cancel, resume, replay) with RALPH_TEAM=team.
func TeamUser(team string) string { return "team-" + team }

// TeamInbox is where a client acting for team gets its replies: the mesh
// connects with it as its inbox prefix, so that a team's user may be
// allowed to subscribe to its team's replies only (a user allowed
// _INBOX.> could read the events another team's client fetches).
func TeamInbox(team string) string { return "_INBOX." + team }

// TeamPermissions are the permissions of TeamUser(team) under prefix: start,
// resume and cancel the team's sessions, follow them through ordered
// consumers filtered to the team (the filter travels in the API subject,
// which the permission pins), read the team's entries of the session index,
// hear the notices about the team's sessions; nothing of another team's.
// It may look the streams up, which tells it whether a session id is taken
// (ids are one namespace across teams) but shows no event.
func TeamPermissions(prefix, team string) UserPermissions {
	stream := events.StreamName(prefix)
	var durables []string
	for _, name := range parties() {
		if len(Contracts[name].Consumes) > 0 {
			durables = append(durables, bus.ConsumerName(name))
		}
	}
	sort.Strings(durables)
	p := UserPermissions{User: TeamUser(team), Publish: lookUp(prefix),
		Subscribe: []string{TeamInbox(team) + ".>", events.NoticeFilter(prefix, team, "*")}}
	for _, typ := range Contracts[RunClient].Publishes {
		p.Publish = append(p.Publish, events.Subject(prefix, team, "*", typ))
	}
	p.Publish = append(p.Publish,
		api+"CONSUMER.CREATE."+stream+".*."+events.TeamFilter(prefix, team),
		api+"CONSUMER.INFO."+stream+".*",
		api+"CONSUMER.MSG.NEXT."+stream+".*",
		api+"CONSUMER.DELETE."+stream+".*")
	p.Publish = append(p.Publish, indexReader(prefix, team)...)
	p.DenyPublish = denyDurables(stream, durables)
	return p
}

// parties are the services in start order, then RunClient.
func parties() []string { return append(slices.Clone(Services), RunClient) }

// PasswordVariable is the environment variable the generated server
// configuration reads user's password from.
func PasswordVariable(user string) string {
	return "RALPH_NATS_PASSWORD_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_"))
}

// PermissionsConfig is the authorization block of a nats-server
// configuration that gives every party of the mesh under prefix its own
// user with Permissions. Passwords are read from the environment
// (PasswordVariable) when the server loads the file, so the file holds no
// secret; each party connects with RALPH_NATS_USER and RALPH_NATS_PASSWORD
// set to its user and password.
//
// Each of teams gets a user of its own (TeamPermissions).
func PermissionsConfig(prefix string, teams ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Generated by internal/mesh.PermissionsConfig for subject prefix %q", prefix)
	if len(teams) > 0 {
		fmt.Fprintf(&b, " and teams %s", strings.Join(teams, ", "))
	}
	b.WriteString("; docs/nats-permissions.md.\n")
	b.WriteString("authorization {\n  users = [\n")
	users := Permissions(prefix)
	for _, t := range teams {
		users = append(users, TeamPermissions(prefix, t))
	}
	for _, p := range users {
		fmt.Fprintf(&b, "    {\n      user: %q\n      password: $%s\n      permissions: {\n", p.User, PasswordVariable(p.User))
		b.WriteString("        publish: {\n")
		writeList(&b, "allow", p.Publish)
		writeList(&b, "deny", p.DenyPublish)
		b.WriteString("        }\n        subscribe: {\n")
		writeList(&b, "allow", p.Subscribe)
		b.WriteString("        }\n")
		if p.Responses {
			b.WriteString("        allow_responses: true\n")
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeList(b *strings.Builder, key string, subjects []string) {
	if len(subjects) == 0 {
		return
	}
	fmt.Fprintf(b, "          %s: [\n", key)
	for _, s := range subjects {
		fmt.Fprintf(b, "            %q\n", s)
	}
	b.WriteString("          ]\n")
}
