package web

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ralphmesh/ralph/pkg/settings"
)

// Price is what a role's model costs, per million tokens, in whatever
// currency the team counts in.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// Prices are the prices by role (builder, critic, pruner, decomposer,
// summarizer).
type Prices map[string]Price

// ParsePrices reads prices written as ROLE=INPUT/OUTPUT pairs separated by
// commas, e.g. "builder=3/15,critic=0.8/4": per million input and output
// tokens. An empty string is no prices.
func ParsePrices(s string) (Prices, error) {
	out := Prices{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		role, pair, ok := strings.Cut(strings.TrimSpace(item), "=")
		role = strings.TrimSpace(role)
		if !ok || role == "" {
			return nil, fmt.Errorf("price %q: want ROLE=INPUT/OUTPUT, e.g. builder=3/15", item)
		}
		in, outStr, ok := strings.Cut(pair, "/")
		if !ok {
			return nil, fmt.Errorf("price of %s %q: want INPUT/OUTPUT per million tokens, e.g. 3/15", role, pair)
		}
		var p Price
		var err error
		if p.Input, err = parsePrice(in); err != nil {
			return nil, fmt.Errorf("input price of %s: %w", role, err)
		}
		if p.Output, err = parsePrice(outStr); err != nil {
			return nil, fmt.Errorf("output price of %s: %w", role, err)
		}
		if _, dup := out[role]; dup {
			return nil, fmt.Errorf("price of %s: given twice", role)
		}
		out[role] = p
	}
	return out, nil
}

func parsePrice(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q is not a price (a number, 0 or more)", strings.TrimSpace(s))
	}
	return v, nil
}

// Config is the web console's configuration; pkg/config can nest it
// (RALPH_CONSOLE_*). Its tags are the one home of its defaults.
type Config struct {
	// Prices turn the session page's tokens by role into cost. They are
	// a setting rather than built in because prices change and differ
	// by provider and contract.
	Prices string `split_words:"true" desc:"prices per million tokens by role, for the web console's cost column: ROLE=INPUT/OUTPUT,... e.g. builder=3/15,critic=0.8/4 (empty: tokens only)"`
}

// Validate refuses prices that cannot be read.
func (c Config) Validate() error {
	_, err := ParsePrices(c.Prices)
	return settings.Check(err == nil, "Prices", c.Prices, "%v", err)
}

// Options are the handler's options from the configuration.
func (c Config) Options() ([]Option, error) {
	p, err := ParsePrices(c.Prices)
	if err != nil {
		return nil, fmt.Errorf("console prices: %w", err)
	}
	return []Option{WithPrices(p)}, nil
}
