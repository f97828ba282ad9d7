package gitwork

import (
	"time"

	"github.com/ralphmesh/ralph/pkg/settings"
)

// Config is how the platform uses git (RALPH_GIT_*, through pkg/config).
// Its tags are the one home of these defaults.
type Config struct {
	// AuthorName and AuthorEmail sign the commits when git's own
	// configuration (user.name, user.email) has no identity: the user's
	// identity comes first, as a team's repository expects.
	AuthorName  string `split_words:"true" default:"ralph" desc:"commit author and committer name when git's user.name is not set"`
	AuthorEmail string `split_words:"true" default:"ralph@localhost" desc:"commit author and committer email when git's user.email is not set"`
	// Timeout bounds one git command, a commit's hooks included (a
	// pre-commit hook may run a linter or the tests).
	Timeout time.Duration `default:"300s" desc:"timeout of one git command, the repository's hooks included"`
	// StaleLock is when a lock file git left in .git counts as left by a
	// git that was killed (a builder killed while it switched branches or
	// committed leaves one, and git refuses to go on while it is there).
	// Below RALPH_STREAM_ACK_WAIT, so the redelivery after such a kill
	// finds the lock stale.
	StaleLock time.Duration `split_words:"true" default:"20s" desc:"a lock file in .git (index.lock, a ref's .lock) at least this old is taken for one a killed git left: the platform's own branch switch or commit removes it and runs again (a younger one is git's refusal, as before); keep it below RALPH_STREAM_ACK_WAIT"`
}

// DefaultConfig is Config at its documented defaults.
func DefaultConfig() Config { return settings.Defaults[Config]() }

// Validate rejects settings no commit could be made with.
func (c Config) Validate() error {
	return settings.Join(
		settings.Check(c.AuthorName != "", "AuthorName", c.AuthorName, "must not be empty"),
		settings.Check(c.AuthorEmail != "", "AuthorEmail", c.AuthorEmail, "must not be empty"),
		settings.Check(c.Timeout >= time.Second, "Timeout", c.Timeout, "must be at least 1s"),
		settings.Check(c.StaleLock >= time.Second, "StaleLock", c.StaleLock, "must be at least 1s"),
	)
}
