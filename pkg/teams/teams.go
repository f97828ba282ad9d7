// Package teams owns who belongs to which team and what each team may use:
// the API's bearer tokens (RALPH_API_TOKENS_FILE, `token: team` per line),
// compared in constant time and never shown, and the per-team limits on
// sessions running at once and tokens spent per day, with the reasons
// given when one is hit. Every session belongs to a team
// (events.Envelope.Team); the limits are checked when a session starts (by
// whoever starts it, then by the builder) and by the builder before every
// step.
package teams

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"slices"

	"go.yaml.in/yaml/v4"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// MinTokenLength is the shortest API token accepted: a shorter one could
// be guessed.
const MinTokenLength = 16

// Tokens maps API bearer tokens to teams. The tokens are kept only as
// SHA-256 digests, so that neither a log nor a dump of the process shows
// one.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	team   string
}

// ErrTokensFile is wrapped by every problem with a tokens file.
var ErrTokensFile = errors.New("API tokens file")

// LoadTokens reads the tokens file at path: a YAML mapping of `token:
// team`, one per line. The error names the file and the line, never the
// token.
func LoadTokens(path string) (Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Tokens{}, fmt.Errorf("%w %s: %v", ErrTokensFile, path, err)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return Tokens{}, fmt.Errorf("%w %s: %v", ErrTokensFile, path, err)
	}
	return t, nil
}

// ParseTokens reads a tokens file's content.
func ParseTokens(data []byte) (Tokens, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// yaml's messages quote the offending text, which may be a token.
		return Tokens{}, errors.New("not a YAML mapping of `token: team` lines")
	}
	var t Tokens
	if len(doc.Content) == 0 {
		return t, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return Tokens{}, fmt.Errorf("line %d: not a mapping of `token: team` lines", m.Line)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return Tokens{}, fmt.Errorf("line %d: not a `token: team` line", k.Line)
		}
		if len(k.Value) < MinTokenLength {
			return Tokens{}, fmt.Errorf("line %d: the token is shorter than %d characters", k.Line, MinTokenLength)
		}
		if err := events.ValidTeam(v.Value); err != nil {
			return Tokens{}, fmt.Errorf("line %d: %v", v.Line, err)
		}
		d := sha256.Sum256([]byte(k.Value))
		if slices.ContainsFunc(t.entries, func(e tokenEntry) bool { return e.digest == d }) {
			return Tokens{}, fmt.Errorf("line %d: the token is listed twice", k.Line)
		}
		t.entries = append(t.entries, tokenEntry{digest: d, team: v.Value})
	}
	return t, nil
}

// Len is how many tokens there are.
func (t Tokens) Len() int { return len(t.entries) }

// Team is the team of bearer token, ok false when it is no token of the
// file. Every token is compared, each in constant time, whatever matches:
// how long the answer takes says nothing about which token, or how much of
// one, was right.
func (t Tokens) Team(token string) (team string, ok bool) {
	d := sha256.Sum256([]byte(token))
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			team, ok = e.team, true
		}
	}
	return team, ok
}

// Config is the team limits' settings (RALPH_TEAMS_*): the limits of every
// team, and a file of per-team overrides.
type Config struct {
	MaxSessions     int    `split_words:"true" default:"0" desc:"sessions one team may have running at once (0: no limit)"`
	MaxTokensPerDay int64  `split_words:"true" default:"0" desc:"builder tokens one team's sessions may spend per UTC day (0: no limit)"`
	LimitsFile      string `split_words:"true" desc:"YAML file of per-team overrides: TEAM: {max_sessions: N, max_tokens_per_day: N}"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects limits that cannot work.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.MaxSessions >= 0, "MaxSessions", c.MaxSessions, "must not be negative (0: no limit)"),
		settings.Check(c.MaxTokensPerDay >= 0, "MaxTokensPerDay", c.MaxTokensPerDay, "must not be negative (0: no limit)"),
	)
}

// Limit is what one team may use; 0 is no limit.
type Limit struct {
	MaxSessions     int   `yaml:"max_sessions"`
	MaxTokensPerDay int64 `yaml:"max_tokens_per_day"`
}

// Limits are every team's limits: the settings', and a file's overrides
// (a team named there takes each limit the file gives it).
type Limits struct {
	Default   Limit
	Overrides map[string]Limit
}

// Limits reads the overrides file, if any, under c's limits.
func (c Config) Limits() (Limits, error) {
	l := Limits{Default: Limit{MaxSessions: c.MaxSessions, MaxTokensPerDay: c.MaxTokensPerDay}}
	if c.LimitsFile == "" {
		return l, nil
	}
	data, err := os.ReadFile(c.LimitsFile)
	if err != nil {
		return l, fmt.Errorf("team limits file %s: %w", c.LimitsFile, err)
	}
	raw := map[string]map[string]int64{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return l, fmt.Errorf("team limits file %s: not a YAML mapping of TEAM: {max_sessions: N, max_tokens_per_day: N}: %v", c.LimitsFile, err)
	}
	l.Overrides = map[string]Limit{}
	for team, fields := range raw {
		if err := events.ValidTeam(team); err != nil {
			return l, fmt.Errorf("team limits file %s: %v", c.LimitsFile, err)
		}
		lim := l.Default
		for k, v := range fields {
			if v < 0 {
				return l, fmt.Errorf("team limits file %s: team %s: %s: must not be negative (0: no limit)", c.LimitsFile, team, k)
			}
			switch k {
			case "max_sessions":
				lim.MaxSessions = int(v)
			case "max_tokens_per_day":
				lim.MaxTokensPerDay = v
			default:
				return l, fmt.Errorf("team limits file %s: team %s: unknown field %q (have max_sessions, max_tokens_per_day)", c.LimitsFile, team, k)
			}
		}
		l.Overrides[team] = lim
	}
	return l, nil
}

// For is team's limit.
func (l Limits) For(team string) Limit {
	if o, ok := l.Overrides[team]; ok {
		return o
	}
	return l.Default
}

// Any reports whether some team has a limit at all.
func (l Limits) Any() bool {
	if l.Default != (Limit{}) {
		return true
	}
	for _, o := range l.Overrides {
		if o != (Limit{}) {
			return true
		}
	}
	return false
}

// AdmitReason says why a new session of team may not start when running of
// its sessions run and it spent spent tokens on day (YYYYMMDD); "" when it
// may.
func (lim Limit) AdmitReason(team string, running int, spent int64, day string) string {
	if lim.MaxSessions > 0 && running >= lim.MaxSessions {
		return fmt.Sprintf("team %s has %d sessions running, its limit (RALPH_TEAMS_MAX_SESSIONS or the team limits file); wait for one to end, or cancel one", team, running)
	}
	return lim.ExhaustedReason(team, spent, day)
}

// ExhaustedReason says why team may not spend more tokens on day, having
// spent spent; "" while it may.
func (lim Limit) ExhaustedReason(team string, spent int64, day string) string {
	if lim.MaxTokensPerDay > 0 && spent >= lim.MaxTokensPerDay {
		return fmt.Sprintf("team %s spent %d of its %d tokens for %s-%s-%s (UTC; RALPH_TEAMS_MAX_TOKENS_PER_DAY or the team limits file)",
			team, spent, lim.MaxTokensPerDay, day[:4], day[4:6], day[6:])
	}
	return ""
}
