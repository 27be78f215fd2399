package ops

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDuration reads a duration as the operator's commands and the
// admin API take it (a pause's length, a purge's age, a dead letter's
// since): Go's (90s, 2h30m) or a whole number of days (7d), which
// time.ParseDuration lacks and a pause of a week needs. Negative
// durations are refused.
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > maxDays {
			return 0, fmt.Errorf("%q: want a duration such as 90m, 36h or 7d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a duration such as 90m, 36h or 7d", s)
	}
	return d, nil
}

// maxDays is the most days a time.Duration holds.
const maxDays = int(time.Duration(1<<63-1) / (24 * time.Hour))
