package events

import "strings"

// Subject is where an event of type typ for session is published:
// <prefix>.s.<session>.<type>.
func Subject(prefix, session string, typ Type) string {
	return prefix + ".s." + session + "." + string(typ)
}

// SessionFilter matches every event of one session.
func SessionFilter(prefix, session string) string {
	return prefix + ".s." + session + ".>"
}

// AllSessions matches every session event.
func AllSessions(prefix string) string { return prefix + ".s.>" }

// TypeFilter matches events of one type across all sessions.
func TypeFilter(prefix string, typ Type) string {
	return prefix + ".s.*." + string(typ)
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
