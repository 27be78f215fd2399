package testenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls        int64
	UsecPerCall  float64
	RejectedCall int64
}

// CommandStats reads INFO commandstats: by lower-case command name
// ("fcall", "evalsha", ...), what Redis served since its start or the
// last CONFIG RESETSTAT.
func CommandStats(ctx context.Context, rdb redis.Cmdable) (map[string]CommandStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := map[string]CommandStat{}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		var st CommandStat
		for field := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				st.UsecPerCall, _ = strconv.ParseFloat(v, 64)
			case "rejected_calls":
				st.RejectedCall, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[strings.ToLower(name)] = st
	}
	return out, nil
}
