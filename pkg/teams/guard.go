package teams

import (
	"context"
	"fmt"
	"time"
)

// Counter counts a team's tokens per day exactly once per step (Redis,
// pkg/store): the builder's record, which its limit is checked against.
type Counter interface {
	AddTeamTokens(ctx context.Context, team, day, session string, step, tokens int) (int64, error)
	TeamTokens(ctx context.Context, team, day string) (int64, error)
}

// Sessions is what the session index tells the limits: the team's running
// sessions, and the day's tokens as last recorded there for those who
// start sessions and have no Redis (pkg/sessionindex).
type Sessions interface {
	Running(ctx context.Context, team string) (int, error)
	TeamTokens(ctx context.Context, team, day string) (int64, error)
	SetTeamTokens(ctx context.Context, team, day string, total int64) error
}

// Guard holds teams to their limits for the builder (builder.TeamLimits):
// the running sessions from the index, the day's tokens from the counter,
// which it copies to the index for the starters. A team without a limit
// costs nothing: its tokens are not even counted.
type Guard struct {
	Limits   Limits
	Counter  Counter
	Sessions Sessions
}

// Day is the day a time is counted in: the UTC date, YYYYMMDD.
func Day(t time.Time) string { return t.UTC().Format("20060102") }

// Admit says why a new session of team may not start at now.
func (g Guard) Admit(ctx context.Context, team, _ string, now time.Time) (string, error) {
	lim := g.Limits.For(team)
	if lim == (Limit{}) {
		return "", nil
	}
	running := 0
	if lim.MaxSessions > 0 {
		n, err := g.Sessions.Running(ctx, team)
		if err != nil {
			return "", fmt.Errorf("team %s's running sessions: %w", team, err)
		}
		running = n
	}
	spent, err := g.spent(ctx, team, lim, now)
	if err != nil {
		return "", err
	}
	return lim.AdmitReason(team, running, spent, Day(now)), nil
}

// Exhausted says why team may not spend more tokens at now.
func (g Guard) Exhausted(ctx context.Context, team string, now time.Time) (string, error) {
	lim := g.Limits.For(team)
	if lim.MaxTokensPerDay == 0 {
		return "", nil
	}
	spent, err := g.spent(ctx, team, lim, now)
	if err != nil {
		return "", err
	}
	return lim.ExhaustedReason(team, spent, Day(now)), nil
}

func (g Guard) spent(ctx context.Context, team string, lim Limit, now time.Time) (int64, error) {
	if lim.MaxTokensPerDay == 0 {
		return 0, nil
	}
	n, err := g.Counter.TeamTokens(ctx, team, Day(now))
	if err != nil {
		return 0, fmt.Errorf("team %s's tokens today: %w", team, err)
	}
	return n, nil
}

// Spend counts the tokens session spent at step towards team's day, once
// per step, and records the day's total in the index.
func (g Guard) Spend(ctx context.Context, team, session string, step, tokens int, now time.Time) error {
	if g.Limits.For(team).MaxTokensPerDay == 0 || tokens <= 0 {
		return nil
	}
	day := Day(now)
	total, err := g.Counter.AddTeamTokens(ctx, team, day, session, step, tokens)
	if err != nil {
		return fmt.Errorf("count team %s's tokens: %w", team, err)
	}
	return g.Sessions.SetTeamTokens(ctx, team, day, total)
}
