package events

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultTeam is the team of a session whose envelope names none: every
// session started before teams existed, and clients that set no team.
const DefaultTeam = "default"

// AnyTeam, as the team of a filter, matches every team.
const AnyTeam = "*"

var teamPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// ValidTeam reports whether name can be a team: it becomes a subject token
// (a NATS permission names it) and a key of the session index.
func ValidTeam(name string) error {
	if !teamPattern.MatchString(name) {
		return fmt.Errorf("%w: team %q must be 1-32 letters, digits, '_' or '-'", ErrInvalid, name)
	}
	return nil
}

// The session events of team T live under <prefix>.s.T.<session>.<type>:
// the team is a subject token of its own so that a NATS permission can
// give a team's users "every session of team T" (<prefix>.s.T.>) and
// nothing else. Sessions recorded before teams are under
// <prefix>.s.<session>.<type>, one token shorter (every type has exactly
// two tokens), so the two layouts never match each other's filters.

// Subject is where an event of type typ for session of team is published.
func Subject(prefix, team, session string, typ Type) string {
	return prefix + ".s." + team + "." + session + "." + string(typ)
}

// SessionFilter matches every event of one session of team (AnyTeam: of
// whichever team).
func SessionFilter(prefix, team, session string) string {
	return prefix + ".s." + team + "." + session + ".>"
}

// LegacySessionFilter matches the events of a session recorded before
// teams, under <prefix>.s.<session>.<type>.
func LegacySessionFilter(prefix, session string) string {
	return prefix + ".s." + session + ".*.*"
}

// TeamFilter matches every event of every session of team.
func TeamFilter(prefix, team string) string { return prefix + ".s." + team + ".>" }

// AllSessions matches every session event, of both layouts: the stream's
// subject.
func AllSessions(prefix string) string { return prefix + ".s.>" }

// TypeFilter matches events of one type across all teams and sessions.
func TypeFilter(prefix string, typ Type) string {
	return prefix + ".s.*.*." + string(typ)
}

// ParseSubject reads the team, session and type of a session event's
// subject, of either layout; a subject of the layout before teams has
// DefaultTeam. ok is false for anything else.
func ParseSubject(prefix, subject string) (team, session string, typ Type, ok bool) {
	rest, found := strings.CutPrefix(subject, prefix+".s.")
	if !found {
		return "", "", "", false
	}
	tokens := strings.Split(rest, ".")
	switch len(tokens) {
	case 4:
		team, session, typ = tokens[0], tokens[1], Type(tokens[2]+"."+tokens[3])
	case 3:
		team, session, typ = DefaultTeam, tokens[0], Type(tokens[1]+"."+tokens[2])
	default:
		return "", "", "", false
	}
	if ValidTeam(team) != nil || ValidSession(session) != nil {
		return "", "", "", false
	}
	return team, session, typ, true
}

// StreamName is the JetStream stream that holds every session event.
func StreamName(prefix string) string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(prefix))
}

// DeadLetterStream holds events that failed permanently or MaxDeliver times.
func DeadLetterStream(prefix string) string { return StreamName(prefix) + "_DLQ" }

// DeadLetterSubject is where a failed event of a consumer goes.
func DeadLetterSubject(prefix, consumer string) string {
	return prefix + ".dlq." + consumer
}

// DeadLetters matches every dead letter: the dead-letter stream's subject.
func DeadLetters(prefix string) string { return prefix + ".dlq.>" }

// Notices are what a service says about a session while it works on it
// and that no stream keeps (a model call being retried): plain NATS
// messages on <prefix>.notice.<team>.<session>, for whoever follows the
// session at that moment.

// NoticeSubject is where notices about session of team are sent.
func NoticeSubject(prefix, team, session string) string {
	return prefix + ".notice." + team + "." + session
}

// NoticeFilter matches the notices of session of team; either may be
// AnyTeam ("*").
func NoticeFilter(prefix, team, session string) string {
	return prefix + ".notice." + team + "." + session
}
