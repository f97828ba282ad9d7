package bus

import "github.com/ralphmesh/ralph/pkg/settings"

// DefaultRunOptions are RunOptions at their documented defaults.
func DefaultRunOptions() RunOptions { return settings.Defaults[RunOptions]() }

// Validate rejects consumer settings that cannot work. Unlike Run, which
// treats zero as "the default" for code that sets only what it overrides,
// it judges values as read from the environment.
func (o RunOptions) Validate() error {
	return settings.Join(
		settings.Check(o.AckWait > 0, "AckWait", o.AckWait, "must be positive"),
		settings.Check(o.MaxDeliver >= 1, "MaxDeliver", o.MaxDeliver, "must be at least 1"),
		settings.Check(o.BackoffBase > 0, "BackoffBase", o.BackoffBase, "must be positive"),
		settings.Check(o.BackoffMax >= o.BackoffBase, "BackoffMax", o.BackoffMax, "must be at least the backoff base (%s)", o.BackoffBase),
		settings.Check(o.Concurrency >= 1, "Concurrency", o.Concurrency, "must be at least 1"),
		settings.Check(o.DrainTimeout >= 0, "DrainTimeout", o.DrainTimeout, "must not be negative"),
		settings.Check(o.OutageBudget >= 0, "OutageBudget", o.OutageBudget, "must not be negative (0 turns waiting out outages off)"),
	)
}

// Validate rejects stream settings that cannot work.
func (c StreamConfig) Validate() error {
	return settings.Join(
		settings.Check(c.MaxAge >= 0, "MaxAge", c.MaxAge, "must not be negative"),
		settings.Check(c.Replicas >= 1 && c.Replicas <= 5, "Replicas", c.Replicas, "must be 1 to 5"),
		settings.Check(c.DuplicateWindow > 0 && (c.MaxAge == 0 || c.DuplicateWindow <= c.MaxAge), "DuplicateWindow", c.DuplicateWindow,
			"must be positive and no longer than the max age (%s)", c.MaxAge),
	)
}
