package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// teamDayTTL keeps a team's day counter a day past its end, for whoever
// looks at yesterday.
const teamDayTTL = 48 * time.Hour

// teamDayKeys are the keys of team's tokens on day: the steps counted (a
// hash of session/step to tokens) and the total. The hash tag puts them in
// one Redis Cluster slot.
func (s *Store) teamDayKeys(team, day string) []string {
	base := s.prefix + ":team:{" + team + "}:" + day
	return []string{base + ":steps", base + ":tokens"}
}

// addTeamTokens adds a step's tokens to the total once: a step delivered
// again (the same session and step) is counted once.
var addTeamTokens = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('INCRBY', KEYS[2], ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return tonumber(redis.call('GET', KEYS[2]) or '0')
`)

// AddTeamTokens counts tokens that session spent at step towards team's
// day (YYYYMMDD), once per session and step, and returns the day's total.
func (s *Store) AddTeamTokens(ctx context.Context, team, day, session string, step, tokens int) (int64, error) {
	field := fmt.Sprintf("%s/%d", session, step)
	n, err := addTeamTokens.Run(ctx, s.rdb, s.teamDayKeys(team, day), field, tokens, int(teamDayTTL/time.Second)).Int64()
	if err != nil {
		return 0, unavailable(fmt.Errorf("count tokens of team %s on %s: %w", team, day, err))
	}
	return n, nil
}

// TeamTokens is team's total on day.
func (s *Store) TeamTokens(ctx context.Context, team, day string) (int64, error) {
	n, err := s.rdb.Get(ctx, s.teamDayKeys(team, day)[1]).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, unavailable(fmt.Errorf("tokens of team %s on %s: %w", team, day, err))
	}
	return n, nil
}
