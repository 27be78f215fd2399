package main

import (
	"fmt"
	"io"
	"os"

	"github.com/throttler/throttler/config"
)

// uses names the servers a command talks to.
type uses struct{ nats, redis bool }

// announce writes on w, unless quiet, which servers a command uses and
// whether each comes from its variable or the default: a command that
// falls back to 127.0.0.1 says so. Credentials are masked as check-config
// masks them.
func announce(w io.Writer, quiet bool, cfg *config.Config, u uses) {
	if quiet {
		return
	}
	if u.nats {
		fmt.Fprintf(w, "throttler: NATS %s (%s)\n", cfg.MaskedNATSURL(), origin("NATS_URL"))
	}
	if u.redis {
		mode := ""
		if cfg.RedisMode != config.RedisSingle {
			mode = fmt.Sprintf(", THROTTLER_REDIS_MODE=%s", cfg.RedisMode)
		}
		fmt.Fprintf(w, "throttler: Redis %s (%s%s)\n", cfg.MaskedRedisURL(), origin("REDIS_URL"), mode)
	}
}

// origin says where a variable's value comes from.
func origin(name string) string {
	if os.Getenv(name) == "" {
		return name + " is unset: the default"
	}
	return "from " + name
}

// stripQuiet removes --quiet from args and reports whether it was there.
func stripQuiet(args []string) ([]string, bool) {
	out := make([]string, 0, len(args))
	quiet := false
	for _, a := range args {
		if a == "--quiet" {
			quiet = true
			continue
		}
		out = append(out, a)
	}
	return out, quiet
}
