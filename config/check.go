package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Validate checks every variable field of c and returns every problem at
// once, joined with errors.Join, or nil. Each problem starts with the
// variable's name and says what it accepts. Validate does not change c.
func (c *Config) Validate() error {
	cp := *c
	return cp.check(nil).Err()
}

// maxBurst is the largest THROTTLER_DEFAULT_BURST, throttle.MaxBurst.
const maxBurst = 1_000_000_000

// intBounds holds the accepted range of each whole-number variable.
var intBounds = map[string]struct{ min, max int64 }{
	"THROTTLER_DEFAULT_BURST":   {0, maxBurst},
	"THROTTLER_CONCURRENCY":     {1, 10_000},
	"THROTTLER_MAX_ACK_PENDING": {1, 1_000_000},
	"THROTTLER_MAX_FAILURES":    {1, 1_000},
	"THROTTLER_FETCH_BATCH":     {1, 1_000},
	"THROTTLER_METRICS_TENANTS": {1, 1_000_000},
	"THROTTLER_LANE_MOVE_RATE":  {0, 1_000_000},
	"THROTTLER_MAX_RUNNING":     {0, 1_000_000},
	"THROTTLER_STREAM_REPLICAS": {1, 5},
}

// durBounds holds the accepted range of each duration variable; a max of 0
// means no upper bound.
var durBounds = map[string]struct{ min, max time.Duration }{
	"THROTTLER_MAX_DEFER":          {0, 30 * 24 * time.Hour},
	"THROTTLER_SHUTDOWN_TIMEOUT":   {1, 0},
	"THROTTLER_ACK_WAIT":           {time.Second, 0},
	"THROTTLER_REDIS_TIMEOUT":      {1, 0},
	"THROTTLER_SCHEDULE_AFTER":     {time.Second, 0},
	"THROTTLER_HTTP_TIMEOUT":       {1, 0},
	"THROTTLER_LEASE_TTL":          {time.Second, 30 * 24 * time.Hour},
	"THROTTLER_METRICS_FIRST_HOLD": {0, time.Hour},
	"THROTTLER_PAUSE_RECHECK":      {time.Second, 24 * time.Hour},
}

// intWant says what whole-number variable name accepts.
func intWant(name string) string {
	b := intBounds[name]
	return fmt.Sprintf("between %d and %d", b.min, b.max)
}

// durWant says what duration variable name accepts.
func durWant(name string) string {
	b := durBounds[name]
	switch {
	case b.min == 1 && b.max == 0:
		return "a duration greater than 0, such as 30s or 1m30s"
	case b.max == 0:
		return fmt.Sprintf("a duration of at least %s, such as 30s or 1m30s", formatDuration(b.min))
	}
	return fmt.Sprintf("a duration between %s and %s, such as 30s or 10m", formatDuration(b.min), formatDuration(b.max))
}

// check validates every variable field, skipping those in failed, fills
// the derived fields and returns every problem.
func (c *Config) check(failed map[string]bool) Problems {
	ck := &checker{failed: failed}

	ck.natsURLs(c.NATSURL)
	ck.natsSecurity(c)
	c.RedisAddrs = ck.redis(c.RedisMode, c.RedisURL)
	// The worker names streams and consumers after these, with suffixes
	// of its own (_FORWARD, _arrivals, …), within JetStream's 255.
	ck.name("THROTTLER_STREAM", c.Stream, 255-len("_FORWARD"))
	ck.name("THROTTLER_CONSUMER", c.Consumer, 255-len("_arrivals"))
	c.Subjects = ck.subjects(c.SubjectsSpec)
	c.TenantFromToken, c.TenantFromHeader = ck.source("THROTTLER_TENANT_FROM", c.TenantFromSpec)
	ck.intIn("THROTTLER_DEFAULT_BURST", c.DefaultBurst)
	c.TenantLimitSpecs = ck.limitEntries("THROTTLER_TENANT_LIMITS", "tenant", "acme=50/s:100+10000/d,globex=5/m", c.TenantLimits)
	ck.levels(c)
	if c.LimitsBucket != LimitsOff {
		ck.bucket("THROTTLER_LIMITS_BUCKET", c.LimitsBucket)
	}
	if c.PauseBucket != LimitsOff {
		ck.bucket("THROTTLER_PAUSE_BUCKET", c.PauseBucket)
	}
	ck.name("THROTTLER_CREDITS_STREAM", c.CreditsStream, 64)
	ck.header("THROTTLER_COST_HEADER", c.CostHeader)

	concOK := ck.intIn("THROTTLER_CONCURRENCY", int64(c.Concurrency))
	mapOK := ck.intIn("THROTTLER_MAX_ACK_PENDING", int64(c.MaxAckPending))
	if concOK && mapOK && c.MaxAckPending < c.Concurrency {
		ck.addf("THROTTLER_MAX_ACK_PENDING", "must be at least THROTTLER_CONCURRENCY (%d), got %q",
			c.Concurrency, strconv.Itoa(c.MaxAckPending))
	}
	ck.intIn("THROTTLER_MAX_FAILURES", int64(c.MaxFailures))
	ck.intIn("THROTTLER_FETCH_BATCH", int64(c.FetchBatch))
	ck.intIn("THROTTLER_METRICS_TENANTS", int64(c.MetricsTenants))
	ck.intIn("THROTTLER_LANE_MOVE_RATE", int64(c.LaneMoveRate))
	ck.intIn("THROTTLER_STREAM_REPLICAS", int64(c.StreamReplicas))
	if ck.intIn("THROTTLER_MAX_RUNNING", c.MaxRunning) && c.MaxRunning > 0 && c.Handler == HandlerForward {
		ck.addf("THROTTLER_MAX_RUNNING", "needs THROTTLER_HANDLER=http: the forward handler's job ends when it is published, so the worker cannot see how many run; got %d", c.MaxRunning)
	}

	ck.durIn("THROTTLER_MAX_DEFER", c.MaxDefer)
	if _, err := time.LoadLocation(c.TimeZone); err != nil || c.TimeZone == "" || c.TimeZone == "Local" {
		ck.addf("THROTTLER_TIMEZONE", "must be an IANA time zone such as UTC or Europe/Paris, got %q", c.TimeZone)
	}
	ck.durIn("THROTTLER_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	ck.durIn("THROTTLER_ACK_WAIT", c.AckWait)
	ck.durIn("THROTTLER_REDIS_TIMEOUT", c.RedisTimeout)
	ck.durIn("THROTTLER_SCHEDULE_AFTER", c.ScheduleAfter)
	ck.durIn("THROTTLER_LEASE_TTL", c.LeaseTTL)
	ck.durIn("THROTTLER_METRICS_FIRST_HOLD", c.MetricsWarmUp)
	ck.maxAge("THROTTLER_STREAM_MAX_AGE", c.StreamMaxAge)
	ck.maxAge("THROTTLER_FORWARD_MAX_AGE", c.ForwardMaxAge)
	ck.maxAge("THROTTLER_DLQ_MAX_AGE", c.DLQMaxAge)
	ck.durIn("THROTTLER_PAUSE_RECHECK", c.PauseRecheck)

	ck.oneOf("THROTTLER_HANDLER", c.Handler, HandlerForward, HandlerHTTP)
	c.HTTPHeaderList = ck.httpSettings(c)
	ck.oneOf("THROTTLER_ON_REDIS_ERROR", c.OnRedisError, OnRedisErrorDefer, OnRedisErrorAllow)
	ck.oneOf("THROTTLER_LOG_LEVEL", c.LogLevel, "debug", "info", "warn", "error")
	ck.oneOf("THROTTLER_LOG_FORMAT", c.LogFormat, "text", "json")
	ck.oneOf("THROTTLER_DEFER", string(c.Defer), string(DeferAuto), string(DeferNak), string(DeferSchedule))
	ck.oneOf("THROTTLER_FAST_LANE", string(c.FastLane), string(FastLaneAuto), string(FastLaneOff))

	if !keyPrefixOK(c.KeyPrefix) {
		ck.addf("THROTTLER_KEY_PREFIX", "must be 1 to 32 letters, digits, _ or -, got %q", c.KeyPrefix)
	}
	ck.metricsAddr(c.MetricsAddr)
	ck.admin(c.AdminAddr, c.AdminToken)
	return ck.problems
}

// checker collects problems, skipping variables that already failed to parse.
type checker struct {
	failed   map[string]bool
	problems Problems
}

// addf records a problem with variable name, unless name failed to parse.
func (ck *checker) addf(name, format string, args ...any) {
	if ck.failed[name] {
		return
	}
	ck.problems = append(ck.problems, Problem{Var: name, Text: fmt.Sprintf(format, args...)})
}

// intIn checks that variable name's value v is within its bounds.
func (ck *checker) intIn(name string, v int64) bool {
	b := intBounds[name]
	if ck.failed[name] {
		return false
	}
	if v < b.min || v > b.max {
		ck.addf(name, "must be %s, got %q", intWant(name), strconv.FormatInt(v, 10))
		return false
	}
	return true
}

// durIn checks that variable name's value d is within its bounds.
func (ck *checker) durIn(name string, d time.Duration) {
	b := durBounds[name]
	if d < b.min || (b.max > 0 && d > b.max) {
		ck.addf(name, "must be %s, got %q", durWant(name), formatDuration(d))
	}
}

// minMaxAge is the shortest max age of a stream the worker creates: a
// shorter one would drop jobs a backlog or a deferral holds for minutes.
const minMaxAge = time.Hour

// maxAge checks a stream's max age variable: 0 (no max age) or at least
// minMaxAge.
func (ck *checker) maxAge(name string, d time.Duration) {
	if d != 0 && d < minMaxAge {
		ck.addf(name, "must be 0 (keep every message) or a duration of at least %s, such as 168h, got %q", formatDuration(minMaxAge), formatDuration(d))
	}
}

// oneOf checks that variable name's value v is one of allowed.
func (ck *checker) oneOf(name, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		quoted := make([]string, len(allowed))
		for i, a := range allowed {
			quoted[i] = strconv.Quote(a)
		}
		ck.addf(name, "must be one of %s, got %q", strings.Join(quoted, ", "), v)
	}
}

// natsURLs checks NATS_URL: one or more comma-separated server URLs.
func (ck *checker) natsURLs(s string) {
	const name = "NATS_URL"
	const want = "must be one or more nats://, tls://, ws:// or wss:// URLs separated by commas"
	if strings.TrimSpace(s) == "" {
		ck.addf(name, "%s, got %q", want, s)
		return
	}
	ws, other := false, false // the client refuses a list that mixes them
	for _, raw := range strings.Split(s, ",") {
		raw = strings.TrimSpace(raw)
		full := raw
		if !strings.Contains(full, "://") {
			full = "nats://" + full // as nats.Connect does
		}
		u, err := url.Parse(full)
		bad := err != nil || u.Host == "" || u.Hostname() == "" ||
			!slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme)
		if !bad {
			if u.Scheme == "ws" || u.Scheme == "wss" {
				ws = true
			} else {
				other = true
			}
			hp := u.Host
			if u.Port() == "" {
				hp += ":4222" // nats.Connect's default port
			}
			bad = !dialAddrOK(hp)
		}
		if bad {
			// Never echo err: url.Parse errors quote the URL, password included.
			if raw == strings.TrimSpace(s) {
				ck.addf(name, "%s, got %q", want, maskNATSURLs(raw))
			} else {
				ck.addf(name, "%s, got %q in %q", want, maskNATSURLs(raw), maskNATSURLs(s))
			}
		}
	}
	if ws && other {
		ck.addf(name, "must not mix ws:// or wss:// URLs with nats:// or tls:// ones (the client refuses such a list), got %q", maskNATSURLs(s))
	}
}

// name checks a stream or consumer name of at most most characters.
func (ck *checker) name(name, s string, most int) {
	ok := len(s) >= 1 && len(s) <= most && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune(`.*>/\`, r)
	})
	if !ok {
		ck.addf(name, `must be 1 to %d characters without spaces, ".", "*", ">", "/" or "\", got %q`, most, s)
	}
}

// bucket checks a key-value bucket's name: what JetStream accepts.
func (ck *checker) bucket(name, s string) {
	if s == "" || len(s) > 64 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		ck.addf(name, "must be %q or 1 to 64 letters, digits, _ or -, got %q", LimitsOff, s)
	}
}

// header checks a message header name.
func (ck *checker) header(name, s string) {
	if !HeaderNameOK(s) {
		ck.addf(name, "must be a header name of letters, digits and !#$%%&'*+-.^_`|~, got %q", s)
	}
}

// subjects splits THROTTLER_SUBJECTS at commas. What a subject may be is
// checked by internal/app, with package subject's grammar.
func (ck *checker) subjects(s string) []string {
	const name = "THROTTLER_SUBJECTS"
	if strings.TrimSpace(s) == "" {
		ck.addf(name, "must be one or more subjects separated by commas, such as jobs.>, got %q", s)
		return nil
	}
	var out []string
	for _, subj := range strings.Split(s, ",") {
		subj = strings.TrimSpace(subj)
		if slices.Contains(out, subj) {
			ck.addf(name, "subject %q given twice", subj)
			continue
		}
		out = append(out, subj)
	}
	return out
}

// source reads variable name, which says where a job's tenant or group
// comes from: subject:N or header:NAME.
func (ck *checker) source(name, s string) (token int, header string) {
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "subject":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 {
			ck.addf(name, "subject:N needs N a whole number from 1, got %q", s)
			return 0, ""
		}
		return n, ""
	case "header":
		if !HeaderNameOK(arg) {
			ck.addf(name, "header:NAME needs NAME a header name of letters, digits and !#$%%&'*+-.^_`|~, got %q", s)
			return 0, ""
		}
		return 0, arg
	}
	ck.addf(name, "must be subject:N (N-th subject token, from 1) or header:NAME, got %q", s)
	return 0, ""
}

// limitEntries splits variable name, entries of what (tenant or group)
// such as example, into its NAME=LIMITS entries. What a name and a limit
// may be is checked by internal/app, with the rules of packages tenant
// and throttle.
func (ck *checker) limitEntries(name, what, example, s string) map[string]string {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out
	}
	want := fmt.Sprintf("must be %s=LIMITS entries separated by commas, such as %s", strings.ToUpper(what), example)
	for _, entry := range strings.Split(s, ",") {
		if strings.TrimSpace(entry) == "" {
			ck.addf(name, "%s, got an empty entry in %q", want, s)
			continue
		}
		key, spec, ok := strings.Cut(entry, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			ck.addf(name, "%s: entry %q has no %s=", want, entry, strings.ToUpper(what))
			continue
		}
		if _, dup := out[key]; dup {
			ck.addf(name, "%s %q given twice", what, key)
			continue
		}
		out[key] = strings.TrimSpace(spec)
	}
	return out
}

// metricsAddr checks THROTTLER_METRICS_ADDR.
func (ck *checker) metricsAddr(s string) {
	if s == "" {
		return
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil || !portOK(port) {
		ck.addf("THROTTLER_METRICS_ADDR", "must be empty (off) or HOST:PORT such as :9090 or 127.0.0.1:9090, got %q", s)
	}
}

// HeaderNameOK reports whether s is a header field name (RFC 9110 token):
// what the settings naming a header take, and what a NATS header may be
// named (the server refuses a message whose header name has a space).
func HeaderNameOK(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !isAlnum(r) && !strings.ContainsRune("!#$%&'*+-.^_`|~", r) {
			return false
		}
	}
	return true
}

// keyPrefixOK reports whether s matches [A-Za-z0-9_-]{1,32}.
func keyPrefixOK(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !isAlnum(r) && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

// isAlnum reports whether r is an ASCII letter or digit.
func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// portOK reports whether s is a decimal port number.
func portOK(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535 && strings.TrimLeft(s, "0123456789") == ""
}

// dialAddrOK reports whether hp is a host:port a client can dial: a host
// (an IPv6 one in brackets) and a port from 1 to 65535. url.Parse takes
// "nats://:::" and "redis://h:99999", which only the dial would refuse.
func dialAddrOK(hp string) bool {
	host, port, err := net.SplitHostPort(hp)
	return err == nil && host != "" && portOK(port) && strings.TrimLeft(port, "0") != ""
}
