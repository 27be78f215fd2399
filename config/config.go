// Package config reads the worker's settings from environment variables
// into one flat struct, checks each variable on its own terms (syntax,
// range, choices) and prints the effective configuration with secrets
// masked. It is split by job: this file holds the settings, values.go the
// values some of them take, load.go reads them, check.go checks them (with
// levels.go for the limits above the tenant), print.go prints them.
//
// config imports no package of this module. What a limit spec, a tenant or
// a subject means is each defined once, in the packages that act on it
// (throttle, tenant, subject); internal/app reads the values given here
// with those rules, before any connection is made, and reports problems
// the same way: one line per problem, starting with the variable's name.
package config

import "time"

// Config is every setting of the worker, read from the environment.
//
// The fields with an env tag hold the variables as given (an empty variable
// counts as unset). The fields without one are derived from them by Load
// and LoadFrom. A Config is read-only once loaded and safe for concurrent
// use.
type Config struct {
	// NATSURL is the NATS server URL, or several separated by commas.
	// Credentials may be given as user:password@ or token@ in each URL.
	// Defaults to nats://127.0.0.1:4222.
	NATSURL string `env:"NATS_URL" envDefault:"nats://127.0.0.1:4222"`

	// NATSCreds is a credentials file (user JWT and nkey seed) to log in
	// with, as nats.UserCredentials reads it; not with NATSNkey.
	// Defaults to empty (none).
	NATSCreds string `env:"NATS_CREDS"`

	// NATSNkey is a file holding a user nkey seed to log in with, as
	// nats.NkeyOptionFromSeed reads it. Defaults to empty (none).
	NATSNkey string `env:"NATS_NKEY"`

	// NATSTLSCA is a PEM file of the CA certificates the server's
	// certificate must chain to; setting it requires TLS. Defaults to
	// empty (the system's roots, TLS only if the server asks).
	NATSTLSCA string `env:"NATS_TLS_CA"`

	// NATSTLSCert is the PEM client certificate for mutual TLS, with
	// NATSTLSKey. Defaults to empty (none).
	NATSTLSCert string `env:"NATS_TLS_CERT"`

	// NATSTLSKey is the PEM private key of NATSTLSCert. Defaults to empty
	// (none).
	NATSTLSKey string `env:"NATS_TLS_KEY"`

	// RedisURL is the Redis server as a redis:// or rediss:// URL, with an
	// optional user:password@ and /DB, as redis.ParseURL reads it; with
	// RedisMode cluster or sentinel, the form that mode takes (redis.go).
	// Defaults to redis://127.0.0.1:6379.
	RedisURL string `env:"REDIS_URL" envDefault:"redis://127.0.0.1:6379"`

	// RedisMode says what RedisURL names: one server, a Redis Cluster or
	// a master watched by Redis Sentinel (redis.go). Defaults to single.
	RedisMode RedisMode `env:"THROTTLER_REDIS_MODE" envDefault:"single"`

	// Stream is the name of the JetStream stream holding the jobs.
	// Defaults to JOBS.
	Stream string `env:"THROTTLER_STREAM" envDefault:"JOBS"`

	// StreamMaxAge is the max age of the jobs stream when the worker
	// creates it: a job stored longer is dropped, run or not. 0 keeps every
	// job for ever; else at least 1h. An existing stream is left as it is.
	// Defaults to 168h (7 days).
	StreamMaxAge time.Duration `env:"THROTTLER_STREAM_MAX_AGE" envDefault:"168h"`

	// StreamReplicas is the number of copies a clustered NATS keeps of the
	// jobs stream when the worker creates it, 1 to 5: with 3, a server of
	// the cluster can fail without losing or stalling jobs. The output
	// streams and the buckets the worker creates get the jobs stream's
	// replicas. An existing stream is left as it is. Defaults to 1.
	StreamReplicas int `env:"THROTTLER_STREAM_REPLICAS" envDefault:"1"`

	// ForwardMaxAge is the max age of the stream <STREAM>_FORWARD when the
	// worker creates it to store the forwarded jobs. 0 keeps them for ever;
	// else at least 1h. Defaults to 168h (7 days).
	ForwardMaxAge time.Duration `env:"THROTTLER_FORWARD_MAX_AGE" envDefault:"168h"`

	// DLQMaxAge is the max age of the stream <STREAM>_DLQ when the worker
	// creates it to store the dead letters. 0 keeps them for ever; else at
	// least 1h. Defaults to 720h (30 days).
	DLQMaxAge time.Duration `env:"THROTTLER_DLQ_MAX_AGE" envDefault:"720h"`

	// SubjectsSpec is the comma-separated list of subjects the stream binds
	// and the worker consumes; wildcards are allowed. Subjects holds it
	// split. Defaults to jobs.>.
	SubjectsSpec string `env:"THROTTLER_SUBJECTS" envDefault:"jobs.>"`

	// Consumer is the name of the durable pull consumer the worker uses.
	// Defaults to throttler.
	Consumer string `env:"THROTTLER_CONSUMER" envDefault:"throttler"`

	// TenantFromSpec says where a job's tenant comes from: subject:N for the
	// N-th token of the subject (counting from 1) or header:NAME for a
	// message header. TenantFromToken and TenantFromHeader hold it parsed.
	// Defaults to subject:2.
	TenantFromSpec string `env:"THROTTLER_TENANT_FROM" envDefault:"subject:2"`

	// DefaultLimit is the limits of every tenant not in TenantLimits, such as
	// 100/s, 6000/m+50000/d or 100/s:200+shadow (see throttle.ParsePolicy).
	// The key _default of LimitsBucket replaces it. Defaults to 100/s.
	DefaultLimit string `env:"THROTTLER_DEFAULT_LIMIT" envDefault:"100/s"`

	// DefaultBurst is the burst of every limit written without :BURST, in
	// DefaultLimit, TenantLimits, GlobalLimit, GroupLimits and
	// DefaultGroupLimit; 0 gives each such limit a burst equal to its own
	// rate. Defaults to 0.
	DefaultBurst int64 `env:"THROTTLER_DEFAULT_BURST" envDefault:"0"`

	// TenantLimits holds per-tenant limits replacing DefaultLimit, such as
	// acme=50/s:100+10000/d,globex=5/m. TenantLimitSpecs holds it split.
	// Defaults to empty (no per-tenant limits).
	TenantLimits string `env:"THROTTLER_TENANT_LIMITS"`

	// GlobalLimit is the limit of all tenants' jobs together, such as
	// 500/s or 500/s:1000+window:1000000/d: rate and window terms and
	// shadow, no running:N, credits or weight:N, which are a tenant's.
	// The key _global of LimitsBucket replaces it. Defaults to empty (no
	// global limit).
	GlobalLimit string `env:"THROTTLER_GLOBAL_LIMIT"`

	// GroupFromSpec says where a job's group comes from (an organisation,
	// a plan, a downstream endpoint), as TenantFromSpec says it of the
	// tenant: subject:N or header:NAME. A group is named as a tenant is.
	// GroupFromToken and GroupFromHeader hold it parsed. Defaults to empty
	// (jobs have no group).
	GroupFromSpec string `env:"THROTTLER_GROUP_FROM"`

	// GroupLimits holds per-group limits replacing DefaultGroupLimit,
	// written as GlobalLimit, such as org-1=1000/s,org-2=200/s; needs
	// GroupFromSpec. GroupLimitSpecs holds it split. Defaults to empty
	// (no per-group limits).
	GroupLimits string `env:"THROTTLER_GROUP_LIMITS"`

	// DefaultGroupLimit is the limit of every group not in GroupLimits,
	// written as GlobalLimit; needs GroupFromSpec. The key group.NAME of
	// LimitsBucket replaces a group's. Defaults to empty (such a group has
	// no limit).
	DefaultGroupLimit string `env:"THROTTLER_DEFAULT_GROUP_LIMIT"`

	// GroupRequired dead-letters a job that carries no group, with the
	// reason; without it such a job has no group limit. Needs
	// GroupFromSpec. Defaults to false.
	GroupRequired bool `env:"THROTTLER_GROUP_REQUIRED" envDefault:"false"`

	// LimitsBucket is the NATS key-value bucket whose keys (tenants,
	// _default, _global and group.NAME) hold limits that replace those
	// above while the worker runs; the worker creates it when missing.
	// "off" reads none.
	// Defaults to throttler_limits.
	LimitsBucket string `env:"THROTTLER_LIMITS_BUCKET" envDefault:"throttler_limits"`

	// PauseBucket is the NATS key-value bucket of paused tenants (keys
	// tenant.<tenant>), which every worker watches; the worker creates it
	// when missing. "off" reads none (throttler pause then refuses).
	// Defaults to throttler_pauses.
	PauseBucket string `env:"THROTTLER_PAUSE_BUCKET" envDefault:"throttler_pauses"`

	// CreditsStream is the JetStream stream that records every change of
	// a tenant's credits (throttler credits add and set), from which an
	// operator restores a balance Redis lost; created when missing.
	// Defaults to throttler_credits.
	CreditsStream string `env:"THROTTLER_CREDITS_STREAM" envDefault:"throttler_credits"`

	// PauseRecheck is how long a paused tenant's job waits off the
	// consumer before a worker checks its pause again (a resume brings it
	// back at once; this bounds the wait of a job it missed); 1s to 24h.
	// Defaults to 1m.
	PauseRecheck time.Duration `env:"THROTTLER_PAUSE_RECHECK" envDefault:"1m"`

	// Shadow puts every tenant's limits in shadow mode: every job runs at
	// once, and the worker counts what enforcing would have done. A
	// tenant's own spec can say so with +shadow. Defaults to false.
	Shadow bool `env:"THROTTLER_SHADOW" envDefault:"false"`

	// CostHeader is the message header carrying a job's cost, a whole number
	// of at least 1; a job without it costs 1. Defaults to Job-Cost.
	CostHeader string `env:"THROTTLER_COST_HEADER" envDefault:"Job-Cost"`

	// Concurrency is the most jobs handled at once, 1 to 10000.
	// Defaults to 16.
	Concurrency int `env:"THROTTLER_CONCURRENCY" envDefault:"16"`

	// MaxAckPending is the most jobs the jobs consumer keeps delivered and
	// not yet acked (JetStream's max ack pending), 1 to 1000000 and at
	// least Concurrency. Defaults to 1000.
	MaxAckPending int `env:"THROTTLER_MAX_ACK_PENDING" envDefault:"1000"`

	// MaxDefer is the reservation horizon: how far ahead the worker may
	// reserve tokens for a job it defers, 0 to 30 days; 0 means never
	// reserve. Defaults to 10m.
	MaxDefer time.Duration `env:"THROTTLER_MAX_DEFER" envDefault:"10m"`

	// TimeZone is the IANA time zone of the calendar windows
	// (window:N/UNIT) that name none: their days, weeks and months start
	// at its midnights. Defaults to UTC.
	TimeZone string `env:"THROTTLER_TIMEZONE" envDefault:"UTC"`

	// MaxRunning caps how many jobs of all tenants run at once, fleet-wide,
	// 0 to 1000000; 0 means no such cap. Needs Handler http. Defaults to 0.
	MaxRunning int64 `env:"THROTTLER_MAX_RUNNING" envDefault:"0"`

	// LeaseTTL is how long a running job's place under a running cap
	// (running:N, MaxRunning) outlives its worker: a worker that dies frees
	// its places within it, and the next poke, within a second after, hands
	// them to waiting jobs. 1s to 30 days. Defaults to 30s.
	LeaseTTL time.Duration `env:"THROTTLER_LEASE_TTL" envDefault:"30s"`

	// Handler is what the worker does with an admitted job: forward
	// (publish it to ForwardSubject) or http (send it to HTTPURL).
	// Defaults to forward.
	Handler string `env:"THROTTLER_HANDLER" envDefault:"forward"`

	// HTTPURL is the URL template the http handler sends each job to;
	// {tenant} and {subject} are replaced by the job's, path-escaped. It
	// must be an absolute http:// or https:// URL. Required with Handler
	// http. Defaults to empty.
	HTTPURL string `env:"THROTTLER_HTTP_URL"`

	// HTTPMethod is the HTTP method of the http handler's requests.
	// Defaults to POST.
	HTTPMethod string `env:"THROTTLER_HTTP_METHOD" envDefault:"POST"`

	// HTTPTimeout bounds each request of the http handler, from connecting
	// to the response's headers; more than 0. Defaults to 30s.
	HTTPTimeout time.Duration `env:"THROTTLER_HTTP_TIMEOUT" envDefault:"30s"`

	// HTTPHeaders holds static headers added to every request of the http
	// handler, as NAME=VALUE entries separated by commas (a value cannot
	// hold a comma), such as Authorization=Bearer x,X-Env=prod.
	// HTTPHeaderList holds it split. check-config masks the values.
	// Defaults to empty.
	HTTPHeaders string `env:"THROTTLER_HTTP_HEADERS"`

	// ForwardSubject is the subject template admitted jobs are published to;
	// {tenant} is replaced by the job's tenant. Defaults to done.{tenant}.
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
	// defer (defer it, never over-admitting) or allow (let it through
	// unthrottled, logged and counted). Defaults to defer.
	OnRedisError string `env:"THROTTLER_ON_REDIS_ERROR" envDefault:"defer"`

	// ShutdownTimeout is how long in-flight jobs may run after a shutdown
	// signal before they are cancelled and handed back; more than 0. The
	// default fits Kubernetes' default grace period of 30 s with 5 s to
	// spare for the jobs to return once cancelled, the hand-back, the last
	// flush and the close, which a timeout of 30 s would leave to SIGKILL;
	// a longer timeout needs terminationGracePeriodSeconds of at least the
	// timeout plus that margin. Defaults to 25s.
	ShutdownTimeout time.Duration `env:"THROTTLER_SHUTDOWN_TIMEOUT" envDefault:"25s"`

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

	// FastLane says whether the fast lane may let a tenant with nothing
	// queued pass another tenant's backlog: auto (where the jobs stream
	// allows it, with Defer auto or schedule) or off. Defaults to auto.
	FastLane FastLaneMode `env:"THROTTLER_FAST_LANE" envDefault:"auto"`

	// AckWait is how long the jobs consumer waits for a delivered job's
	// ack before it delivers the job again (JetStream's ack wait), at
	// least 1s. Defaults to 30s.
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

	// ScheduleSubject is the subject prefix under which the worker keeps
	// moved jobs, bound by the jobs stream and not consumed. It must not be
	// captured by SubjectsSpec. Defaults to sched.
	ScheduleSubject string `env:"THROTTLER_SCHEDULE_SUBJECT" envDefault:"sched"`

	// MetricsAddr is the host:port serving /healthz and /metrics; empty
	// turns the server off. Defaults to empty (off).
	MetricsAddr string `env:"THROTTLER_METRICS_ADDR"`

	// AdminAddr is the host:port serving the admin API (/api/v1) and the
	// web console (/); empty turns it off. Without AdminToken it must be
	// a loopback address (127.0.0.1:PORT, [::1]:PORT, localhost:PORT).
	// Defaults to empty (off).
	AdminAddr string `env:"THROTTLER_ADMIN_ADDR"`

	// AdminToken is the bearer token every request to AdminAddr must
	// carry (Authorization: Bearer TOKEN), at least 16 characters;
	// throttler check-config shows it as ****. Defaults to empty (only a loopback AdminAddr is allowed).
	AdminToken string `env:"THROTTLER_ADMIN_TOKEN"`

	// MetricsTenants caps the tenants a worker counts one by one in its
	// metrics; tenants first seen after that many are counted together as
	// "_other", so memory stays bounded. 1 to 1,000,000. Defaults to 10000.
	MetricsTenants int `env:"THROTTLER_METRICS_TENANTS" envDefault:"10000"`

	// MetricsTenantDetail exports every per-tenant counter with a tenant
	// label; false exports only the eight that say what happened to a
	// tenant's jobs (admitted, deferred, completed, failed, dead-lettered,
	// downstream holds, parks, running) per tenant and the rest as totals
	// of the worker. Defaults to false.
	MetricsTenantDetail bool `env:"THROTTLER_METRICS_TENANT_DETAIL" envDefault:"false"`

	// MetricsWarmUp is how long a tenant's new counter series is served
	// at 0 before its count, so that rate() and increase() count its first
	// events: at least the longest interval any Prometheus scrapes the
	// worker at. 0 serves counts at once (a new series' first events are
	// then lost to rate()). 0 to 1h. Defaults to 1m.
	MetricsWarmUp time.Duration `env:"THROTTLER_METRICS_FIRST_HOLD" envDefault:"1m"`

	// RedisAddrs holds the addresses RedisURL names: the server, the
	// cluster's seed nodes or the sentinels. Filled by Load.
	RedisAddrs []string

	// Subjects holds SubjectsSpec split at commas, trimmed. Filled by Load.
	Subjects []string

	// TenantFromToken is N of TenantFromSpec subject:N, or 0. Filled by Load.
	TenantFromToken int

	// TenantFromHeader is NAME of TenantFromSpec header:NAME, or "". Filled
	// by Load.
	TenantFromHeader string

	// HTTPHeaderList holds HTTPHeaders split, in order. Filled by Load.
	HTTPHeaderList []HeaderField

	// TenantLimitSpecs holds TenantLimits split: each tenant's limits as
	// written, not yet parsed. Filled by Load.
	TenantLimitSpecs map[string]string

	// GroupFromToken is N of GroupFromSpec subject:N, or 0. Filled by Load.
	GroupFromToken int

	// GroupFromHeader is NAME of GroupFromSpec header:NAME, or "". Filled
	// by Load.
	GroupFromHeader string

	// GroupLimitSpecs holds GroupLimits split: each group's limits as
	// written, not yet parsed. Filled by Load.
	GroupLimitSpecs map[string]string
}
