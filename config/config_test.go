package config

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// problems splits an error returned by LoadFrom or Validate into its lines.
func problems(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range joined.Unwrap() {
		out = append(out, e.Error())
	}
	return out
}

// mustLoad loads vars and fails the test on any problem.
func mustLoad(t *testing.T, vars map[string]string) *Config {
	t.Helper()
	c, err := LoadFrom(vars)
	if err != nil {
		t.Fatalf("LoadFrom(%v): unexpected problems:\n%v", vars, err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, nil)
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate of defaults: %v", err)
	}
	want := Config{
		NATSURL:          "nats://127.0.0.1:4222",
		RedisURL:         "redis://127.0.0.1:6379",
		RedisMode:        RedisSingle,
		RedisAddrs:       []string{"127.0.0.1:6379"},
		Stream:           "JOBS",
		StreamMaxAge:     168 * time.Hour,
		StreamReplicas:   1,
		ForwardMaxAge:    168 * time.Hour,
		DLQMaxAge:        720 * time.Hour,
		SubjectsSpec:     "jobs.>",
		Consumer:         "throttler",
		TenantFromSpec:   "subject:2",
		DefaultLimit:     "100/s",
		DefaultBurst:     0,
		TenantLimits:     "",
		LimitsBucket:     "throttler_limits",
		PauseBucket:      "throttler_pauses",
		CreditsStream:    "throttler_credits",
		PauseRecheck:     time.Minute,
		CostHeader:       "Job-Cost",
		Concurrency:      16,
		MaxAckPending:    1000,
		MaxDefer:         10 * time.Minute,
		TimeZone:         "UTC",
		LeaseTTL:         30 * time.Second,
		Handler:          HandlerForward,
		HTTPMethod:       "POST",
		HTTPTimeout:      30 * time.Second,
		ForwardSubject:   "done.{tenant}",
		DLQSubject:       "dlq.{tenant}",
		MaxFailures:      5,
		OnRedisError:     OnRedisErrorDefer,
		ShutdownTimeout:  25 * time.Second,
		LogLevel:         "info",
		LogFormat:        "text",
		Defer:            DeferAuto,
		AckWait:          30 * time.Second,
		RedisTimeout:     2 * time.Second,
		KeyPrefix:        "thr",
		FetchBatch:       64,
		ScheduleAfter:    5 * time.Second,
		LaneMoveRate:     8000,
		ScheduleSubject:  "sched",
		MetricsAddr:      "",
		MetricsTenants:   10_000,
		MetricsWarmUp:    time.Minute,
		FastLane:         FastLaneAuto,
		Subjects:         []string{"jobs.>"},
		TenantFromToken:  2,
		TenantLimitSpecs: map[string]string{},
		GroupLimitSpecs:  map[string]string{},
	}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", *c, want)
	}
}

func TestEmptyVariableTakesDefault(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{"THROTTLER_CONCURRENCY": "", "THROTTLER_STREAM": ""})
	if c.Concurrency != 16 || c.Stream != "JOBS" {
		t.Fatalf("Concurrency=%d Stream=%q, want defaults 16 and JOBS", c.Concurrency, c.Stream)
	}
}

func TestLoadReadsProcessEnvironment(t *testing.T) {
	t.Setenv("THROTTLER_CONCURRENCY", "7")
	t.Setenv("THROTTLER_MAX_ACK_PENDING", "70")
	c, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if c.Concurrency != 7 || c.MaxAckPending != 70 {
		t.Fatalf("Concurrency=%d MaxAckPending=%d, want 7 and 70", c.Concurrency, c.MaxAckPending)
	}
}

func TestValidValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		vars  map[string]string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "several NATS URLs with credentials",
			vars: map[string]string{"NATS_URL": "nats://a:b@n1:4222, tls://tok@n2:4222,n3:4222"},
		},
		{
			name: "rediss with user, password and db",
			vars: map[string]string{"REDIS_URL": "rediss://u:p@redis.example:6380/3"},
		},
		{
			name: "header tenant",
			vars: map[string]string{"THROTTLER_TENANT_FROM": "header:X-Tenant"},
			check: func(t *testing.T, c *Config) {
				if c.TenantFromHeader != "X-Tenant" || c.TenantFromToken != 0 {
					t.Fatalf("TenantFromHeader %q, TenantFromToken %d: want X-Tenant and 0", c.TenantFromHeader, c.TenantFromToken)
				}
			},
		},
		{
			name: "several subjects",
			vars: map[string]string{"THROTTLER_SUBJECTS": "jobs.*.email, jobs.*.sms"},
			check: func(t *testing.T, c *Config) {
				if want := []string{"jobs.*.email", "jobs.*.sms"}; !slices.Equal(c.Subjects, want) {
					t.Fatalf("Subjects = %q, want %q", c.Subjects, want)
				}
			},
		},
		{
			name: "tenant limits split, not yet parsed",
			vars: map[string]string{"THROTTLER_TENANT_LIMITS": "acme=50/s:100+10000/d, globex=5/m,big_co-2=1/h"},
			check: func(t *testing.T, c *Config) {
				want := map[string]string{"acme": "50/s:100+10000/d", "globex": "5/m", "big_co-2": "1/h"}
				if !reflect.DeepEqual(c.TenantLimitSpecs, want) {
					t.Fatalf("TenantLimitSpecs = %v, want %v", c.TenantLimitSpecs, want)
				}
			},
		},
		{
			name: "zero max defer and metrics on",
			vars: map[string]string{"THROTTLER_MAX_DEFER": "0", "THROTTLER_METRICS_ADDR": ":9090"},
		},
		{
			name: "max ack pending equal to concurrency",
			vars: map[string]string{"THROTTLER_CONCURRENCY": "10000", "THROTTLER_MAX_ACK_PENDING": "10000"},
		},
		{
			name: "limits bucket off, shadow on",
			vars: map[string]string{"THROTTLER_LIMITS_BUCKET": "off", "THROTTLER_SHADOW": "true"},
			check: func(t *testing.T, c *Config) {
				if c.LimitsBucket != LimitsOff || !c.Shadow {
					t.Fatalf("LimitsBucket = %q, Shadow = %v; want off, true", c.LimitsBucket, c.Shadow)
				}
			},
		},
		{
			name: "fast lane off",
			vars: map[string]string{"THROTTLER_FAST_LANE": "off"},
			check: func(t *testing.T, c *Config) {
				if c.FastLane != FastLaneOff {
					t.Fatalf("FastLane = %q, want off", c.FastLane)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := mustLoad(t, tt.vars)
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

func TestInvalidValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		val  string
		want string // also in the message, besides the variable's name
	}{
		{"NATS_URL", "http://n1:4222", "nats://"},
		{"NATS_URL", "nats://n1:4222,,nats://n2:4222", "separated by commas"},
		{"NATS_URL", "nats://n1:port", "URLs"},
		{"NATS_URL", ":::", "URLs"},
		{"NATS_URL", "nats://n1:4222,:::", "URLs"},
		{"NATS_URL", "nats://n1:99999", "URLs"},
		{"NATS_URL", "nats://n1:0", "URLs"},
		{"NATS_URL", "nats://n1:4222,ws://n2:80/path", "must not mix"},
		{"REDIS_URL", "redis://r:99999", "from 1 to 65535"},
		{"REDIS_URL", "redis://r:0", "from 1 to 65535"},
		{"REDIS_URL", "http://r:6379", "redis://"},
		{"REDIS_URL", "redis://r:6379/notadb", "invalid database"},
		{"REDIS_URL", "redis://", "redis://"},
		{"THROTTLER_STREAM", "my.stream", `got "my.stream"`},
		{"THROTTLER_STREAM", "a b", "without spaces"},
		{"THROTTLER_STREAM", "a/b", `"/"`},
		{"THROTTLER_SUBJECTS", "jobs.*,jobs.*", "twice"},
		{"THROTTLER_SUBJECTS", " ", "one or more subjects"},
		{"THROTTLER_CONSUMER", "c*", `"*"`},
		{"THROTTLER_CONSUMER", strings.Repeat("c", 247), "1 to 246 characters"},
		{"THROTTLER_STREAM", strings.Repeat("S", 248), "1 to 247 characters"},
		{"THROTTLER_TENANT_FROM", "subject:0", "from 1"},
		{"THROTTLER_TENANT_FROM", "subject:x", "from 1"},
		{"THROTTLER_TENANT_FROM", "header:", "header name"},
		{"THROTTLER_TENANT_FROM", "header:a b", "header name"},
		{"THROTTLER_TENANT_FROM", "queue:1", "subject:N"},
		{"THROTTLER_DEFAULT_BURST", "-1", "between 0 and 1000000000"},
		{"THROTTLER_DEFAULT_BURST", "many", "whole number"},
		{"THROTTLER_TENANT_LIMITS", "acme", "TENANT=LIMITS"},
		{"THROTTLER_TENANT_LIMITS", "acme=5/s,", "empty entry"},
		{"THROTTLER_TENANT_LIMITS", "acme=5/s,acme=6/s", "twice"},
		{"THROTTLER_LIMITS_BUCKET", "my.limits", "letters, digits"},
		{"THROTTLER_LIMITS_BUCKET", strings.Repeat("b", 65), "1 to 64"},
		{"THROTTLER_PAUSE_BUCKET", "my.pauses", "letters, digits"},
		{"THROTTLER_PAUSE_RECHECK", "500ms", "between 1s and 24h"},
		{"THROTTLER_PAUSE_RECHECK", "25h", "between 1s and 24h"},
		{"THROTTLER_SHADOW", "yes please", "true or false"},
		{"THROTTLER_COST_HEADER", "Job Cost", "header name"},
		{"THROTTLER_CONCURRENCY", "0", `must be between 1 and 10000, got "0"`},
		{"THROTTLER_CONCURRENCY", "10001", "between 1 and 10000"},
		{"THROTTLER_CONCURRENCY", "abc", `whole number between 1 and 10000, got "abc"`},
		{"THROTTLER_CONCURRENCY", "99999999999", "whole number"},
		{"THROTTLER_MAX_ACK_PENDING", "0", "between 1 and 1000000"},
		{"THROTTLER_MAX_ACK_PENDING", "8", "at least THROTTLER_CONCURRENCY (16)"},
		{"THROTTLER_MAX_DEFER", "-1s", "between 0s and 720h"},
		{"THROTTLER_MAX_DEFER", "721h", "between 0s and 720h"},
		{"THROTTLER_MAX_DEFER", "10", "duration"},
		{"THROTTLER_HANDLER", "exec", `"forward", "http"`},
		{"THROTTLER_MAX_RUNNING", "-1", "between 0 and 1000000"},
		{"THROTTLER_MAX_RUNNING", "5", "needs THROTTLER_HANDLER=http"},
		{"THROTTLER_LEASE_TTL", "500ms", "between 1s and 720h"},
		{"THROTTLER_STREAM_MAX_AGE", "30m", "0 (keep every message) or a duration of at least 1h"},
		{"THROTTLER_STREAM_MAX_AGE", "-1h", "at least 1h"},
		{"THROTTLER_TIMEZONE", "Mars/Olympus", "IANA time zone"},
		{"THROTTLER_TIMEZONE", "Local", "IANA time zone"},
		{"THROTTLER_FORWARD_MAX_AGE", "59m", "at least 1h"},
		{"THROTTLER_DLQ_MAX_AGE", "week", "duration"},
		{"THROTTLER_MAX_FAILURES", "0", "between 1 and 1000"},
		{"THROTTLER_ON_REDIS_ERROR", "ignore", `"defer", "allow"`},
		{"THROTTLER_SHUTDOWN_TIMEOUT", "0s", "greater than 0"},
		{"THROTTLER_SHUTDOWN_TIMEOUT", "5 parsecs", "greater than 0"},
		{"THROTTLER_LOG_LEVEL", "verbose", `"debug", "info", "warn", "error"`},
		{"THROTTLER_LOG_FORMAT", "xml", `"text", "json"`},
		{"THROTTLER_DEFER", "later", `"auto", "nak", "schedule"`},
		{"THROTTLER_FAST_LANE", "on", `"auto", "off"`},
		{"THROTTLER_ACK_WAIT", "500ms", "at least 1s"},
		{"THROTTLER_REDIS_TIMEOUT", "-2s", "greater than 0"},
		{"THROTTLER_KEY_PREFIX", "thr:", "letters, digits"},
		{"THROTTLER_KEY_PREFIX", strings.Repeat("k", 33), "1 to 32"},
		{"THROTTLER_FETCH_BATCH", "1001", "between 1 and 1000"},
		{"THROTTLER_STREAM_REPLICAS", "0", "between 1 and 5"},
		{"THROTTLER_STREAM_REPLICAS", "7", "between 1 and 5"},
		{"THROTTLER_SCHEDULE_AFTER", "999ms", "at least 1s"},
		{"THROTTLER_METRICS_TENANTS", "0", "between 1 and 1000000"},
		{"THROTTLER_LANE_MOVE_RATE", "-1", "between 0 and 1000000"},
		{"THROTTLER_METRICS_ADDR", "9090", "HOST:PORT"},
		{"THROTTLER_METRICS_ADDR", ":99999", "HOST:PORT"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.val, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{tt.name: tt.val}
			c, err := LoadFrom(vars)
			if err == nil {
				t.Fatalf("LoadFrom(%v) = %+v, want an error", vars, c)
			}
			if c != nil {
				t.Fatalf("LoadFrom returned a Config along with an error")
			}
			got := problems(t, err)
			if len(got) != 1 {
				t.Fatalf("want exactly one problem, got %d:\n%s", len(got), strings.Join(got, "\n"))
			}
			if !strings.HasPrefix(got[0], tt.name+": ") {
				t.Errorf("problem does not start with %q: %s", tt.name+": ", got[0])
			}
			if !strings.Contains(got[0], tt.want) {
				t.Errorf("problem does not mention %q: %s", tt.want, got[0])
			}
		})
	}
}

func TestManyProblemsAtOnce(t *testing.T) {
	t.Parallel()
	_, err := LoadFrom(map[string]string{
		"THROTTLER_CONCURRENCY":      "abc",
		"THROTTLER_SHUTDOWN_TIMEOUT": "5 parsecs",
		"THROTTLER_TENANT_LIMITS":    "acme=5,,globex",
		"THROTTLER_LOG_LEVEL":        "loud",
		"THROTTLER_MAX_ACK_PENDING":  "0",
	})
	got := problems(t, err)
	wantPrefixes := []string{
		"THROTTLER_CONCURRENCY: ",
		"THROTTLER_SHUTDOWN_TIMEOUT: ",
		"THROTTLER_TENANT_LIMITS: ", // the empty entry
		"THROTTLER_TENANT_LIMITS: ", // globex
		"THROTTLER_LOG_LEVEL: ",
		"THROTTLER_MAX_ACK_PENDING: ",
	}
	var prefixes []string
	for _, p := range got {
		name, _, _ := strings.Cut(p, ": ")
		prefixes = append(prefixes, name+": ")
	}
	slices.Sort(prefixes)
	slices.Sort(wantPrefixes)
	if !slices.Equal(prefixes, wantPrefixes) {
		t.Fatalf("problems:\n%s\nwant one each for %q", strings.Join(got, "\n"), wantPrefixes)
	}
	for _, want := range []string{`"abc"`, `"5 parsecs"`, "empty entry", `"globex"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestValidateZeroConfig(t *testing.T) {
	t.Parallel()
	var c Config
	got := problems(t, c.Validate())
	for _, name := range []string{"NATS_URL", "REDIS_URL", "THROTTLER_STREAM", "THROTTLER_CONCURRENCY", "THROTTLER_SHUTDOWN_TIMEOUT", "THROTTLER_HANDLER"} {
		if !slices.ContainsFunc(got, func(p string) bool { return strings.HasPrefix(p, name+": ") }) {
			t.Errorf("zero Config: no problem reported for %s", name)
		}
	}
}

func TestValidateDoesNotChangeConfig(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{"THROTTLER_TENANT_LIMITS": "acme=1/s"})
	c.Concurrency = 0
	before := *c
	if err := c.Validate(); err == nil {
		t.Fatal("Validate accepted Concurrency 0")
	}
	if !reflect.DeepEqual(*c, before) {
		t.Fatal("Validate changed the Config")
	}
}

func TestPrintMasksSecrets(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{
		"NATS_URL":  "nats://alice:s3cret@n1:4222,nats://t0ken@n2:4222,n3:4222",
		"REDIS_URL": "redis://bob:hunter2@r:6379/1",
	})
	checkPrint(t, c, []string{"s3cret", "t0ken", "hunter2"}, []string{
		"NATS_URL=nats://alice:****@n1:4222,nats://****@n2:4222,n3:4222\n",
		"REDIS_URL=redis://bob:****@r:6379/1\n",
	})
}

func TestPrintFormat(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, nil)
	var buf bytes.Buffer
	if err := c.Print(&buf); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		if !strings.HasPrefix(l, "# ") { // comments say what the variables mean together
			lines = append(lines, l)
		}
	}
	if !strings.HasSuffix(buf.String(), "\n# redis: single, server 127.0.0.1:6379\n") {
		t.Errorf("Print does not end with the Redis summary:\n%s", buf.String())
	}
	if !slices.IsSorted(lines) {
		t.Errorf("lines not sorted:\n%s", buf.String())
	}
	if n := len(envKeys()); len(lines) != n {
		t.Errorf("got %d lines, want %d (one per variable):\n%s", len(lines), n, buf.String())
	}
	for _, want := range []string{
		"THROTTLER_MAX_DEFER=10m",
		"THROTTLER_SHUTDOWN_TIMEOUT=25s",
		"THROTTLER_CONCURRENCY=16",
		"THROTTLER_SUBJECTS=jobs.>",
		"THROTTLER_TENANT_LIMITS=",
		"THROTTLER_ON_REDIS_ERROR=defer",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("Print lacks line %q:\n%s", want, buf.String())
		}
	}
	// What Print writes loads back to the same Config.
	vars := map[string]string{}
	for _, l := range lines {
		name, value, _ := strings.Cut(l, "=")
		vars[name] = value
	}
	if again := mustLoad(t, vars); !reflect.DeepEqual(again, c) {
		t.Errorf("Print output loads to %+v, want %+v", again, c)
	}
}

func TestProblemsDoNotLeakSecrets(t *testing.T) {
	t.Parallel()
	for _, redisURL := range []string{"redis://bob:hunter2@r:6379/%zz", "redis://r:6379?password=hunter2&db=x"} {
		_, err := LoadFrom(map[string]string{
			"NATS_URL":  "http://alice:s3cret@n1:4222,nats://t0ken@n2:%zz",
			"REDIS_URL": redisURL,
		})
		if err == nil {
			t.Fatal("want an error")
		}
		for _, secret := range []string{"s3cret", "t0ken", "hunter2"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows secret %q:\n%v", secret, err)
			}
		}
	}
}

func TestMask(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, nats, redis string
	}{
		{"nats://h:4222", "nats://h:4222", "nats://h:4222"},
		{"nats://u:p@h", "nats://u:****@h", "nats://u:****@h"},
		{"nats://tok@h", "nats://****@h", "nats://tok@h"},
		{"u:p@h:4222", "u:****@h:4222", "u:****@h:4222"},
		{"redis://:p@h", "redis://:****@h", "redis://:****@h"},
		{"redis://u:p/with@slash@h/0", "redis://u:****@h/0", "redis://u:****@h/0"},
		{"redis://h/0?x=a@b", "redis://****@b", "redis://h/0?x=a@b"},
		{"redis://r:6379?password=qs-secret&db=1", "redis://r:6379?password=qs-secret&db=1", "redis://r:6379?password=****&db=1"},
	}
	for _, tt := range tests {
		if got := maskNATSURLs(tt.in); got != tt.nats {
			t.Errorf("maskNATSURLs(%q) = %q, want %q", tt.in, got, tt.nats)
		}
		if got := maskRedisURL(tt.in); got != tt.redis {
			t.Errorf("maskRedisURL(%q) = %q, want %q", tt.in, got, tt.redis)
		}
	}
}

// checkPrint fails unless Print of c shows none of secrets and every line
// of wants.
func checkPrint(t *testing.T, c *Config, secrets, wants []string) {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Print(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, secret := range secrets {
		if strings.Contains(out, secret) {
			t.Errorf("Print shows secret %q:\n%s", secret, out)
		}
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("Print lacks %q:\n%s", want, out)
		}
	}
}

// TestStreamMaxAges: 0 keeps every message, and any duration of an hour
// or more bounds it.
func TestStreamMaxAges(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{"THROTTLER_STREAM_MAX_AGE": "0", "THROTTLER_FORWARD_MAX_AGE": "1h", "THROTTLER_DLQ_MAX_AGE": "8760h"})
	if c.StreamMaxAge != 0 || c.ForwardMaxAge != time.Hour || c.DLQMaxAge != 8760*time.Hour {
		t.Fatalf("max ages %s %s %s, want 0s 1h 8760h", c.StreamMaxAge, c.ForwardMaxAge, c.DLQMaxAge)
	}
}
