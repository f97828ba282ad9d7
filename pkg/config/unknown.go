package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"
)

// testPrefix marks variables the tests read themselves (meshtest's
// RALPH_TEST_NATS_URL...), which are no settings.
const testPrefix = EnvPrefix + "_TEST_"

// Unknown returns one warning for each RALPH_* variable in environ
// (KEY=VALUE entries, as os.Environ gives) that is no setting, naming the
// setting closest to it by edit distance: a misspelt setting is otherwise
// silently ignored and its default used.
func Unknown(environ []string) []string {
	names := Names()
	var warnings []string
	for _, kv := range environ {
		key, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(key, EnvPrefix+"_") || strings.HasPrefix(key, testPrefix) || slices.Contains(names, key) {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("%s: no such setting; did you mean %s?", key, closest(key, names)))
	}
	slices.Sort(warnings)
	return warnings
}

// closest is the name nearest to key; the first listed wins a tie.
func closest(key string, names []string) string {
	best, bestDist := "", -1
	for _, n := range names {
		if d := levenshtein.ComputeDistance(key, n); bestDist < 0 || d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}
