// Package config reads the settings of the throttler worker from environment
// variables, checks them all at once, and prints the effective configuration
// with secrets masked.
package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/caarlos0/env/v10"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/throttle"
)

// Config is every setting of the worker, read from the environment.
//
// The fields with an env tag hold the variables as given (an empty variable
// counts as unset). The fields without one are derived from them by Load and
// LoadFrom after validation. A Config is read-only once loaded and safe for
// concurrent use.
type Config struct {
	// NATSURL is the NATS server URL, or several separated by commas.
	// Credentials may be given as user:password@ or token@ in each URL.
	// Defaults to nats://127.0.0.1:4222.
	NATSURL string `env:"NATS_URL" envDefault:"nats://127.0.0.1:4222"`

	// RedisURL is the Redis server as a redis:// or rediss:// URL, with an
	// optional user:password@ and /DB, as redis.ParseURL reads it.
	// Defaults to redis://127.0.0.1:6379.
	RedisURL string `env:"REDIS_URL" envDefault:"redis://127.0.0.1:6379"`

	// Stream is the name of the JetStream stream holding the jobs.
	// Defaults to JOBS.
	Stream string `env:"THROTTLER_STREAM" envDefault:"JOBS"`

	// SubjectsSpec is the comma-separated list of subjects the stream binds
	// and the worker consumes; wildcards are allowed. Subjects holds it
	// split. Defaults to jobs.>.
	SubjectsSpec string `env:"THROTTLER_SUBJECTS" envDefault:"jobs.>"`

	// Consumer is the name of the durable pull consumer the worker uses.
	// Defaults to throttler.
	Consumer string `env:"THROTTLER_CONSUMER" envDefault:"throttler"`

	// TenantFromSpec says where a job's tenant comes from: subject:N for the
	// N-th token of the subject (counting from 1) or header:NAME for a
	// message header. TenantFrom holds it parsed. Defaults to subject:2.
	TenantFromSpec string `env:"THROTTLER_TENANT_FROM" envDefault:"subject:2"`

	// DefaultLimit is the limits of every tenant not in TenantLimits, such as
	// 100/s, 6000/m+50000/d or 100/s:200, as throttle.ParseLimits reads them.
	// Defaults to 100/s.
	DefaultLimit string `env:"THROTTLER_DEFAULT_LIMIT" envDefault:"100/s"`

	// DefaultBurst is the burst of every limit written without :BURST, in
	// DefaultLimit and TenantLimits; 0 gives each such limit a burst equal to
	// its own rate. Defaults to 0.
	DefaultBurst int64 `env:"THROTTLER_DEFAULT_BURST" envDefault:"0"`

	// TenantLimits holds per-tenant limits replacing DefaultLimit, such as
	// acme=50/s:100+10000/d,globex=5/m. Defaults to empty (no per-tenant
	// limits).
	TenantLimits string `env:"THROTTLER_TENANT_LIMITS"`

	// CostHeader is the message header carrying a job's cost, a whole number
	// of at least 1; a job without it costs 1. Defaults to Job-Cost.
	CostHeader string `env:"THROTTLER_COST_HEADER" envDefault:"Job-Cost"`

	// Concurrency is the most jobs handled at once, 1 to 10000.
	// Defaults to 16.
	Concurrency int `env:"THROTTLER_CONCURRENCY" envDefault:"16"`

	// MaxAckPending is the consumer's MaxAckPending, 1 to 1000000 and at
	// least Concurrency. Defaults to 1000.
	MaxAckPending int `env:"THROTTLER_MAX_ACK_PENDING" envDefault:"1000"`

	// MaxDefer is the reservation horizon: how far ahead the worker may
	// reserve tokens for a job it defers, 0 to 30 days; 0 means never
	// reserve. Defaults to 10m.
	MaxDefer time.Duration `env:"THROTTLER_MAX_DEFER" envDefault:"10m"`

	// Handler is what the worker does with an admitted job; only forward
	// (publish it to ForwardSubject) exists. Defaults to forward.
	Handler string `env:"THROTTLER_HANDLER" envDefault:"forward"`

	// ForwardSubject is the subject template admitted jobs are published to;
	// {tenant} is replaced by the job's tenant (see RenderSubject).
	// Defaults to done.{tenant}.
	ForwardSubject string `env:"THROTTLER_FORWARD_SUBJECT" envDefault:"done.{tenant}"`

	// DLQSubject is the subject template malformed jobs, and jobs that failed
	// MaxFailures times, are published to with their reason; {tenant} is
	// replaced by the job's tenant (_invalid when it has none).
	// Defaults to dlq.{tenant}.
	DLQSubject string `env:"THROTTLER_DLQ_SUBJECT" envDefault:"dlq.{tenant}"`

	// MaxFailures is how many times the handler may fail on a job before the
	// job goes to DLQSubject, 1 to 1000. Defaults to 5.
	MaxFailures int `env:"THROTTLER_MAX_FAILURES" envDefault:"5"`

	// OnRedisError says what happens to a job when Redis cannot be asked:
	// defer it, or allow it through unthrottled. Defaults to defer.
	OnRedisError RedisErrorPolicy `env:"THROTTLER_ON_REDIS_ERROR" envDefault:"defer"`

	// ShutdownTimeout is how long in-flight jobs may run after a shutdown
	// signal before they are cancelled and handed back; more than 0.
	// Defaults to 30s.
	ShutdownTimeout time.Duration `env:"THROTTLER_SHUTDOWN_TIMEOUT" envDefault:"30s"`

	// LogLevel is the least severe level logged: debug, info, warn or error,
	// as slog.Level's UnmarshalText reads it. Defaults to info.
	LogLevel string `env:"THROTTLER_LOG_LEVEL" envDefault:"info"`

	// LogFormat is the log format: text or json. Defaults to text.
	LogFormat string `env:"THROTTLER_LOG_FORMAT" envDefault:"text"`

	// Defer says how a job that must wait is deferred: nak (NakWithDelay),
	// schedule (move it out of the consumer, see ScheduleSubject) or auto
	// (move it when the wait is at least ScheduleAfter or its tenant already
	// holds MaxAckPending/40 NAK'd jobs on this worker, nak otherwise).
	// Moving needs nats-server 2.12 or later; auto falls back to nak on an
	// older server. Defaults to auto.
	Defer DeferMode `env:"THROTTLER_DEFER" envDefault:"auto"`

	// AckWait is the consumer's AckWait, at least 1s. Defaults to 30s.
	AckWait time.Duration `env:"THROTTLER_ACK_WAIT" envDefault:"30s"`

	// RedisTimeout bounds each call to Redis; more than 0. Defaults to 2s.
	RedisTimeout time.Duration `env:"THROTTLER_REDIS_TIMEOUT" envDefault:"2s"`

	// KeyPrefix starts every Redis key the worker writes: 1 to 32 letters,
	// digits, _ or -. Defaults to thr.
	KeyPrefix string `env:"THROTTLER_KEY_PREFIX" envDefault:"thr"`

	// FetchBatch is how many messages one pull asks for, 1 to 1000.
	// Defaults to 64.
	FetchBatch int `env:"THROTTLER_FETCH_BATCH" envDefault:"64"`

	// ScheduleAfter is the shortest wait for which Defer=auto moves a job
	// out of the consumer instead of using NakWithDelay; at least 1s.
	// Defaults to 5s.
	ScheduleAfter time.Duration `env:"THROTTLER_SCHEDULE_AFTER" envDefault:"5s"`

	// LaneMoveRate caps the jobs a second each worker defers out of the
	// jobs consumer while the fast lane is in use (a backlog is being
	// passed), so that putting a flood off leaves the machine to the jobs
	// taking the lane; 0 to 1,000,000, 0 for no cap. Defaults to 8000.
	LaneMoveRate int `env:"THROTTLER_LANE_MOVE_RATE" envDefault:"8000"`

	// ScheduleSubject is the subject prefix of moved (scheduled) jobs: a job
	// is published to PREFIX.TENANT.SEQ (see RenderScheduleSubject). It must
	// not be captured by SubjectsSpec. Defaults to sched.
	ScheduleSubject string `env:"THROTTLER_SCHEDULE_SUBJECT" envDefault:"sched"`

	// MetricsAddr is the host:port serving /healthz and /metrics; empty
	// turns the server off. Defaults to empty (off).
	MetricsAddr string `env:"THROTTLER_METRICS_ADDR"`

	// MetricsTenants caps the tenants a worker counts one by one in its
	// metrics; tenants first seen after that many are counted together as
	// "_other", so memory stays bounded. 1 to 1,000,000. Defaults to 10000.
	MetricsTenants int `env:"THROTTLER_METRICS_TENANTS" envDefault:"10000"`

	// Rules holds the parsed DefaultLimit, DefaultBurst and TenantLimits.
	// Filled by Load; it has no variable of its own.
	Rules throttle.Rules

	// TenantFrom holds the parsed TenantFromSpec. Filled by Load; it has no
	// variable of its own.
	TenantFrom TenantSource

	// Subjects holds SubjectsSpec split at commas, trimmed. Filled by Load;
	// it has no variable of its own.
	Subjects []string
}

// RedisErrorPolicy says what happens to a job when Redis cannot be asked.
type RedisErrorPolicy string

// The values of THROTTLER_ON_REDIS_ERROR.
const (
	// OnRedisErrorDefer defers the job as if it were limited.
	OnRedisErrorDefer RedisErrorPolicy = "defer"
	// OnRedisErrorAllow handles the job without throttling it.
	OnRedisErrorAllow RedisErrorPolicy = "allow"
)

// DeferMode says how a job that must wait is deferred.
type DeferMode string

// The values of THROTTLER_DEFER.
const (
	// DeferAuto schedules waits of at least ScheduleAfter and naks shorter ones.
	DeferAuto DeferMode = "auto"
	// DeferNak always uses NakWithDelay.
	DeferNak DeferMode = "nak"
	// DeferSchedule always moves the job out of the consumer.
	DeferSchedule DeferMode = "schedule"
)

// HandlerForward is the only THROTTLER_HANDLER: publish to ForwardSubject.
const HandlerForward = "forward"

// TenantPlaceholder is the placeholder a subject template replaces with the
// tenant.
const TenantPlaceholder = "{tenant}"

// TenantKind says which part of a message names its tenant.
type TenantKind int

// The kinds of TenantSource.
const (
	// TenantFromSubject takes the tenant from a subject token.
	TenantFromSubject TenantKind = iota + 1
	// TenantFromHeader takes the tenant from a message header.
	TenantFromHeader
)

// TenantSource says where a job's tenant comes from.
type TenantSource struct {
	// Kind is TenantFromSubject or TenantFromHeader.
	Kind TenantKind
	// Token is the subject token holding the tenant, counting from 1; only
	// for TenantFromSubject.
	Token int
	// Header is the header holding the tenant; only for TenantFromHeader.
	Header string
}

// String formats s the way THROTTLER_TENANT_FROM reads it.
func (s TenantSource) String() string {
	switch s.Kind {
	case TenantFromSubject:
		return "subject:" + strconv.Itoa(s.Token)
	case TenantFromHeader:
		return "header:" + s.Header
	}
	return ""
}

// Load reads the configuration from the process environment and validates
// it. On failure it returns nil and an error listing every problem found.
func Load() (*Config, error) {
	return LoadFrom(env.ToMap(os.Environ()))
}

// LoadFrom is Load reading the variables from vars instead of the process
// environment; a variable missing from vars, or empty, takes its default.
func LoadFrom(vars map[string]string) (*Config, error) {
	if vars == nil {
		vars = map[string]string{}
	}
	c := &Config{}
	var errs []error
	failed := map[string]bool{}
	if err := env.ParseWithOptions(c, env.Options{Environment: vars}); err != nil {
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			agg.Errors = []error{err}
		}
		keys := envKeys()
		for _, e := range agg.Errors {
			var pe env.ParseError
			if !errors.As(e, &pe) || keys[pe.Name] == "" {
				errs = append(errs, e)
				continue
			}
			name := keys[pe.Name]
			failed[name] = true
			errs = append(errs, parseProblem(name, pe.Type, vars[name]))
		}
	}
	d, problems := c.check(failed)
	if errs = append(errs, problems...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c.Rules = d.rules
	c.TenantFrom = d.tenantFrom
	c.Subjects = d.subjects
	return c, nil
}

// Validate checks every variable field of c and returns every problem at
// once, joined with errors.Join, or nil. Each problem starts with the
// variable's name and says what it accepts. Validate does not change c.
func (c *Config) Validate() error {
	_, problems := c.check(nil)
	return errors.Join(problems...)
}

// Print writes the variables of c to w, one NAME=value a line, sorted by
// name, with passwords and tokens in NATS_URL and REDIS_URL replaced by ****.
func (c *Config) Print(w io.Writer) error {
	var lines []string
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		name := envName(t.Field(i))
		if name == "" {
			continue
		}
		var value string
		switch f := v.Field(i).Interface().(type) {
		case time.Duration:
			value = formatDuration(f)
		default:
			value = fmt.Sprint(f)
		}
		switch name {
		case "NATS_URL":
			value = maskNATSURLs(value)
		case "REDIS_URL":
			value = maskRedisURL(value)
		}
		lines = append(lines, name+"="+value+"\n")
	}
	slices.Sort(lines)
	_, err := io.WriteString(w, strings.Join(lines, ""))
	return err
}

// RedisOptions returns the go-redis options for REDIS_URL with
// THROTTLER_REDIS_TIMEOUT on every dial, read and write, and a pool sized
// for workers workers sharing the client (max(10, THROTTLER_CONCURRENCY/4)
// connections each). go-redis's own retries are cut to one dial per
// attempt and one retry of a failed command: the worker has its own backoff
// and its THROTTLER_ON_REDIS_ERROR policy, and with go-redis's defaults
// (three retries, each dialling five times 100 ms apart) a batch decided
// while Redis refused connections waited out the whole timeout before the
// policy applied.
func (c *Config) RedisOptions(workers int) (*redis.Options, error) {
	opts, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opts.ReadTimeout = c.RedisTimeout
	opts.WriteTimeout = c.RedisTimeout
	opts.DialTimeout = c.RedisTimeout
	opts.DialerRetries = 1
	opts.MaxRetries = 1
	opts.PoolSize = max(1, workers) * max(10, c.Concurrency/4)
	return opts, nil
}

// RenderSubject returns template with every {tenant} replaced by
// SubjectToken(tenant). The configured templates (ForwardSubject,
// DLQSubject) render to valid publish subjects for every tenant.
func (c *Config) RenderSubject(template, tenant string) string {
	return strings.ReplaceAll(template, TenantPlaceholder, SubjectToken(tenant))
}

// RenderScheduleSubject returns the subject a job of tenant with stream
// sequence seq is moved to: ScheduleSubject.TENANT.SEQ, with TENANT made
// safe by SubjectToken.
func (c *Config) RenderScheduleSubject(tenant string, seq uint64) string {
	return c.ScheduleSubject + "." + SubjectToken(tenant) + "." + strconv.FormatUint(seq, 10)
}

// RenderFastSubject returns the subject of the fast copy of a job of tenant
// first stored at stream sequence seq (see consumer.FastLane):
// ScheduleSubject.f.TENANT.SEQ. Four tokens, so no schedule subject of a
// moved job (three) is one.
func (c *Config) RenderFastSubject(tenant string, seq uint64) string {
	return c.ScheduleSubject + ".f." + SubjectToken(tenant) + "." + strconv.FormatUint(seq, 10)
}

// SubjectToken returns tenant made safe to be one subject token: each
// whitespace or control character, ".", "*" and ">" becomes "_", and an
// empty tenant becomes "_". Distinct tenants may map to the same token.
func SubjectToken(tenant string) string {
	if tenant == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == '.' || r == '*' || r == '>' {
			return '_'
		}
		return r
	}, tenant)
}

// derived holds what check parses out of the variables.
type derived struct {
	rules      throttle.Rules
	tenantFrom TenantSource
	subjects   []string
}

// checker collects problems, skipping variables that already failed to parse.
type checker struct {
	failed   map[string]bool
	problems []error
}

// skip reports whether name already failed to parse and must not be checked.
func (ck *checker) skip(name string) bool { return ck.failed[name] }

// addf records a problem with variable name, unless name failed to parse.
func (ck *checker) addf(name, format string, args ...any) {
	if ck.skip(name) {
		return
	}
	ck.problems = append(ck.problems, fmt.Errorf(name+": "+format, args...))
}

// intBounds holds the accepted range of each whole-number variable.
var intBounds = map[string]struct{ min, max int64 }{
	"THROTTLER_DEFAULT_BURST":   {0, throttle.MaxBurst},
	"THROTTLER_CONCURRENCY":     {1, 10_000},
	"THROTTLER_MAX_ACK_PENDING": {1, 1_000_000},
	"THROTTLER_MAX_FAILURES":    {1, 1_000},
	"THROTTLER_FETCH_BATCH":     {1, 1_000},
	"THROTTLER_METRICS_TENANTS": {1, 1_000_000},
	"THROTTLER_LANE_MOVE_RATE":  {0, 1_000_000},
}

// durBounds holds the accepted range of each duration variable; a max of 0
// means no upper bound.
var durBounds = map[string]struct{ min, max time.Duration }{
	"THROTTLER_MAX_DEFER":        {0, 30 * 24 * time.Hour},
	"THROTTLER_SHUTDOWN_TIMEOUT": {1, 0},
	"THROTTLER_ACK_WAIT":         {time.Second, 0},
	"THROTTLER_REDIS_TIMEOUT":    {1, 0},
	"THROTTLER_SCHEDULE_AFTER":   {time.Second, 0},
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

// parseProblem describes a value of variable name that the env library
// could not convert to type t.
func parseProblem(name string, t reflect.Type, raw string) error {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return fmt.Errorf("%s: must be %s, got %q", name, durWant(name), raw)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return fmt.Errorf("%s: must be a whole number %s, got %q", name, intWant(name), raw)
	}
	return fmt.Errorf("%s: cannot read %q as %s", name, raw, t)
}

// intIn checks that variable name's value v is within its bounds.
func (ck *checker) intIn(name string, v int64) bool {
	b := intBounds[name]
	if ck.skip(name) {
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

// check validates every variable field, skipping those in failed, and
// returns what it parsed along with every problem.
func (c *Config) check(failed map[string]bool) (derived, []error) {
	ck := &checker{failed: failed}
	var d derived

	ck.natsURLs(c.NATSURL)
	ck.redisURL(c.RedisURL)
	ck.name("THROTTLER_STREAM", c.Stream)
	ck.name("THROTTLER_CONSUMER", c.Consumer)
	d.subjects = ck.subjects(c.SubjectsSpec)
	d.tenantFrom = ck.tenantFrom(c.TenantFromSpec, d.subjects)
	d.rules = ck.limits(c.DefaultLimit, c.DefaultBurst, c.TenantLimits)
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

	ck.durIn("THROTTLER_MAX_DEFER", c.MaxDefer)
	ck.durIn("THROTTLER_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	ck.durIn("THROTTLER_ACK_WAIT", c.AckWait)
	ck.durIn("THROTTLER_REDIS_TIMEOUT", c.RedisTimeout)
	ck.durIn("THROTTLER_SCHEDULE_AFTER", c.ScheduleAfter)

	ck.oneOf("THROTTLER_HANDLER", c.Handler, HandlerForward)
	ck.oneOf("THROTTLER_ON_REDIS_ERROR", string(c.OnRedisError), string(OnRedisErrorDefer), string(OnRedisErrorAllow))
	ck.oneOf("THROTTLER_LOG_LEVEL", c.LogLevel, "debug", "info", "warn", "error")
	ck.oneOf("THROTTLER_LOG_FORMAT", c.LogFormat, "text", "json")
	ck.oneOf("THROTTLER_DEFER", string(c.Defer), string(DeferAuto), string(DeferNak), string(DeferSchedule))

	if !keyPrefixOK(c.KeyPrefix) {
		ck.addf("THROTTLER_KEY_PREFIX", "must be 1 to 32 letters, digits, _ or -, got %q", c.KeyPrefix)
	}
	ck.metricsAddr(c.MetricsAddr)

	ck.outputs(c, d.subjects)
	return d, ck.problems
}

// natsURLs checks NATS_URL: one or more comma-separated server URLs.
func (ck *checker) natsURLs(s string) {
	const name = "NATS_URL"
	const want = "must be one or more nats://, tls://, ws:// or wss:// URLs separated by commas"
	if strings.TrimSpace(s) == "" {
		ck.addf(name, "%s, got %q", want, s)
		return
	}
	for _, raw := range strings.Split(s, ",") {
		raw = strings.TrimSpace(raw)
		full := raw
		if !strings.Contains(full, "://") {
			full = "nats://" + full // as nats.Connect does
		}
		u, err := url.Parse(full)
		bad := err != nil || u.Host == "" || u.Hostname() == "" ||
			!slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme)
		if !bad && u.Port() != "" {
			bad = !portOK(u.Port())
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
}

// redisURL checks REDIS_URL.
func (ck *checker) redisURL(s string) {
	const name = "REDIS_URL"
	const want = "must be a redis:// or rediss:// URL such as redis://user:password@host:6379/0"
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Hostname() == "" {
		// Never echo err: url.Parse errors quote the URL, password included.
		ck.addf(name, "%s, got %q", want, maskRedisURL(s))
		return
	}
	if _, err := redis.ParseURL(s); err != nil {
		ck.addf(name, "%s (%v), got %q", want, err, maskRedisURL(s))
	}
}

// name checks a stream or consumer name.
func (ck *checker) name(name, s string) {
	ok := len(s) >= 1 && len(s) <= 255 && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune(`.*>/\`, r)
	})
	if !ok {
		ck.addf(name, `must be 1 to 255 characters without spaces, ".", "*", ">", "/" or "\", got %q`, s)
	}
}

// header checks a message header name.
func (ck *checker) header(name, s string) {
	if !headerNameOK(s) {
		ck.addf(name, "must be a header name of letters, digits and !#$%%&'*+-.^_`|~, got %q", s)
	}
}

// subjects checks THROTTLER_SUBJECTS and returns it split.
func (ck *checker) subjects(s string) []string {
	const name = "THROTTLER_SUBJECTS"
	if strings.TrimSpace(s) == "" {
		ck.addf(name, "must be one or more subjects separated by commas, such as jobs.>, got %q", s)
		return nil
	}
	var out []string
	for _, subj := range strings.Split(s, ",") {
		subj = strings.TrimSpace(subj)
		if err := subjectError(subj, true); err != nil {
			ck.addf(name, "must be subjects separated by commas, such as jobs.>: %v", err)
			continue
		}
		if slices.Contains(out, subj) {
			ck.addf(name, "subject %q given twice", subj)
			continue
		}
		out = append(out, subj)
	}
	return out
}

// tenantFrom checks THROTTLER_TENANT_FROM against the consumed subjects.
func (ck *checker) tenantFrom(s string, subjects []string) TenantSource {
	const name = "THROTTLER_TENANT_FROM"
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "subject":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 {
			ck.addf(name, "subject:N needs N a whole number from 1, got %q", s)
			return TenantSource{}
		}
		for _, subj := range subjects {
			tokens := strings.Split(subj, ".")
			if tokens[len(tokens)-1] != ">" && n > len(tokens) {
				ck.addf(name, "%q names token %d, but subject %q in THROTTLER_SUBJECTS has only %d tokens",
					s, n, subj, len(tokens))
			}
		}
		return TenantSource{Kind: TenantFromSubject, Token: n}
	case "header":
		if !headerNameOK(arg) {
			ck.addf(name, "header:NAME needs NAME a header name of letters, digits and !#$%%&'*+-.^_`|~, got %q", s)
			return TenantSource{}
		}
		return TenantSource{Kind: TenantFromHeader, Header: arg}
	}
	ck.addf(name, "must be subject:N (N-th subject token, from 1) or header:NAME, got %q", s)
	return TenantSource{}
}

// limits checks the default and per-tenant limits and returns them parsed.
func (ck *checker) limits(defaultLimit string, burst int64, tenantLimits string) throttle.Rules {
	if !ck.intIn("THROTTLER_DEFAULT_BURST", burst) {
		burst = 0 // still check the limits' syntax, without blaming them for the burst
	}
	var r throttle.Rules
	var err error
	if r.Default, err = throttle.ParseLimits(defaultLimit, burst); err != nil {
		ck.addf("THROTTLER_DEFAULT_LIMIT", "must be limits such as 100/s, 6000/m+50000/d or 100/s:200: %v", err)
	}

	const name = "THROTTLER_TENANT_LIMITS"
	r.Tenants = map[string]throttle.Limits{}
	if strings.TrimSpace(tenantLimits) == "" {
		return r
	}
	// Parse entry by entry so that every bad entry is reported.
	for _, entry := range strings.Split(tenantLimits, ",") {
		if strings.TrimSpace(entry) == "" {
			ck.addf(name, "must be TENANT=LIMITS entries separated by commas, such as acme=50/s:100+10000/d,globex=5/m, got an empty entry in %q", tenantLimits)
			continue
		}
		m, err := throttle.ParseTenantLimits(entry, burst)
		if err != nil {
			ck.addf(name, "must be TENANT=LIMITS entries separated by commas, such as acme=50/s:100+10000/d: %v", err)
			continue
		}
		for tenant, ls := range m {
			if err := consumer.ValidTenant(tenant); err != nil {
				// The worker dead-letters jobs of such a tenant: a limit
				// for it could never apply.
				ck.addf(name, "tenant %q must be 1 to %d letters, digits, _ or -, as the worker accepts them", tenant, consumer.MaxTenantLen)
				continue
			}
			if _, dup := r.Tenants[tenant]; dup {
				ck.addf(name, "tenant %q given twice", tenant)
				continue
			}
			r.Tenants[tenant] = ls
		}
	}
	return r
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

// outputs checks the subjects the worker publishes to: each must be valid
// and must not be captured by the subjects it consumes.
func (ck *checker) outputs(c *Config, subjects []string) {
	type output struct {
		name    string
		subject string   // as shown in messages
		tokens  []string // with {tenant} placeholders
	}
	var outs []output
	for _, o := range []struct{ name, template string }{
		{"THROTTLER_FORWARD_SUBJECT", c.ForwardSubject},
		{"THROTTLER_DLQ_SUBJECT", c.DLQSubject},
	} {
		if err := templateError(o.template); err != nil {
			ck.addf(o.name, "must be a subject template whose only placeholder is {tenant}, such as done.{tenant}: %v", err)
			continue
		}
		outs = append(outs, output{o.name, o.template, strings.Split(o.template, ".")})
	}

	const sched = "THROTTLER_SCHEDULE_SUBJECT"
	if err := subjectError(c.ScheduleSubject, false); err != nil || strings.ContainsAny(c.ScheduleSubject, "{}") {
		if err == nil {
			err = errors.New("placeholders are not allowed")
		}
		ck.addf(sched, "must be a subject prefix without wildcards, such as sched: %v", err)
	} else {
		// PREFIX.TENANT.SEQ: both tail tokens may be anything.
		tokens := append(strings.Split(c.ScheduleSubject, "."), TenantPlaceholder, TenantPlaceholder)
		outs = append(outs, output{sched, c.ScheduleSubject + ".TENANT.SEQ", tokens})
	}

	for _, o := range outs {
		for _, pattern := range subjects {
			if captures(strings.Split(pattern, "."), o.tokens) {
				ck.addf(o.name, "%q is captured by %q in THROTTLER_SUBJECTS, so the worker would consume its own output; choose subjects that do not overlap",
					o.subject, pattern)
			}
		}
	}
	// Moved jobs live under SCHEDULE_SUBJECT.>, which the jobs stream binds
	// and the worker reads bundles from: no other output may land there.
	if c.Defer == DeferNak || subjectError(c.ScheduleSubject, false) != nil {
		return
	}
	under := append(strings.Split(c.ScheduleSubject, "."), ">")
	for _, o := range outs {
		if o.name != sched && captures(under, o.tokens) {
			ck.addf(o.name, "%q lies under %s %q, where moved jobs are kept; choose subjects outside %s.>",
				o.subject, sched, c.ScheduleSubject, c.ScheduleSubject)
		}
	}
}

// captures reports whether some subject the template tokens can render to
// (each {tenant} standing for any non-empty text without ".") matches the
// pattern tokens, where "*" matches one token and ">" one or more. Each
// {tenant} is matched on its own, so a template repeating it may be reported
// as captured when only different tenants at each place would match: this
// errs on the side of refusing a loop.
func captures(pattern, template []string) bool {
	for i, p := range pattern {
		if p == ">" {
			return len(template) > i
		}
		if i >= len(template) {
			return false
		}
		if p != "*" && !tokenMatches(strings.Split(template[i], TenantPlaceholder), p) {
			return false
		}
	}
	return len(pattern) == len(template)
}

// tokenMatches reports whether literal token s can be written as parts joined
// by non-empty strings, i.e. whether a template token split at {tenant}
// renders to s for some tenants.
func tokenMatches(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	rest := s[len(parts[0]):]
	// The placeholder takes at least one byte, then the remaining parts follow.
	for i := 1; i <= len(rest); i++ {
		if tokenMatches(parts[1:], rest[i:]) {
			return true
		}
	}
	return false
}

// templateError says why template is not a valid subject template.
func templateError(template string) error {
	rest := template
	for {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			break
		}
		if rest[open] == '}' {
			return fmt.Errorf("%q has a } without {", template)
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return fmt.Errorf("%q has a { without }", template)
		}
		if ph := rest[open : open+end+1]; ph != TenantPlaceholder {
			return fmt.Errorf("%q has unknown placeholder %s", template, ph)
		}
		rest = rest[open+end+1:]
	}
	return subjectError(strings.ReplaceAll(template, TenantPlaceholder, "t"), false)
}

// subjectError says why s is not a valid subject; wildcards are allowed
// only when wild is true.
func subjectError(s string, wild bool) error {
	if s == "" {
		return errors.New("empty subject")
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return fmt.Errorf("subject %q contains white space or control characters", s)
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch {
		case t == "":
			return fmt.Errorf("subject %q has an empty token", s)
		case !strings.ContainsAny(t, "*>"):
		case !wild:
			return fmt.Errorf("subject %q has a wildcard", s)
		case t != "*" && t != ">":
			return fmt.Errorf("subject %q: * and > must be whole tokens", s)
		case t == ">" && i != len(tokens)-1:
			return fmt.Errorf("subject %q: > must be the last token", s)
		}
	}
	return nil
}

// headerNameOK reports whether s is a header field name (RFC 9110 token).
func headerNameOK(s string) bool {
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
func keyPrefixOK(s string) bool { return len(s) <= 32 && wordOK(s) }

// wordOK reports whether s is non-empty and all letters, digits, _ or -.
func wordOK(s string) bool {
	if s == "" {
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

// envName returns the variable name of field f, or "" if it has none.
func envName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
	return name
}

// envKeys maps each Config field name to its variable name.
func envKeys() map[string]string {
	keys := map[string]string{}
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if name := envName(t.Field(i)); name != "" {
			keys[t.Field(i).Name] = name
		}
	}
	return keys
}

// formatDuration formats d like time.Duration.String without zero trailing
// units: 10m rather than 10m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// mask is what a secret is replaced with.
const mask = "****"

// maskNATSURLs masks the secret of each comma-separated NATS URL in s: the
// password of user:password@, or the whole token of token@.
func maskNATSURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = maskUserinfo(p, true)
	}
	return strings.Join(parts, ",")
}

// maskRedisURL masks the password of a Redis URL's user:password@.
func maskRedisURL(s string) string { return maskUserinfo(s, false) }

// maskUserinfo masks the password in the userinfo of URL s, and the whole
// userinfo when it has no password and userOnlyIsSecret is set. It works
// on the text, not a parsed URL, so that malformed URLs are masked too; it
// takes everything up to the last "@" as userinfo, which can mask too much
// but never too little.
func maskUserinfo(s string, userOnlyIsSecret bool) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	at := strings.LastIndexByte(s, '@')
	if at < start {
		return s
	}
	user, _, hasPassword := strings.Cut(s[start:at], ":")
	switch {
	case hasPassword:
		return s[:start] + user + ":" + mask + s[at:]
	case userOnlyIsSecret:
		return s[:start] + mask + s[at:]
	}
	return s
}
