package demo

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
)

// verdicts returns the verdict line of each tenant in out, keyed by tenant.
func verdicts(t *testing.T, out string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "verdict" {
			got[fields[1]] = strings.TrimSpace(line)
		}
	}
	return got
}

func TestRun(t *testing.T) {
	r := testenv.StartRedis(t)
	t.Setenv("REDIS_URL", r.URL())
	var out, log bytes.Buffer
	if err := Run(t.Context(), Options{Args: []string{"-duration", "4s"}, Out: &out, Log: &log}); err != nil {
		t.Fatalf("Run: %v\nlog:\n%s", err, log.String())
	}
	text := out.String()
	t.Logf("output:\n%s", text)
	if log.Len() > 0 {
		t.Logf("log:\n%s", log.String())
	}

	const header = "tenant  limit"
	if !strings.Contains(text, header) || !strings.Contains(text, "rate/s (last 5s)") {
		t.Errorf("output has no table header %q", header)
	}
	if !strings.Contains(text, "final, after shutdown") {
		t.Error("output has no final table")
	}
	if !strings.Contains(text, "nothing lost") {
		t.Error("output does not say that nothing was lost")
	}
	want := map[string]string{
		"flood":  "held to limit",
		"steady": "all admitted promptly",
		"bursty": "held to limit",
	}
	got := verdicts(t, text)
	for tenant, outcome := range want {
		line, ok := got[tenant]
		if !ok {
			t.Errorf("no verdict line for tenant %s", tenant)
			continue
		}
		if !strings.HasSuffix(line, "-> "+outcome) {
			t.Errorf("verdict for %s = %q, want it to end with %q", tenant, line, "-> "+outcome)
		}
	}
}

func TestRunRedisUnreachable(t *testing.T) {
	port := testenv.FreePort(t)
	t.Setenv("REDIS_URL", "redis://127.0.0.1:"+strconv.Itoa(port))
	err := Run(t.Context(), Options{Args: []string{"-duration", "1s"}})
	if err == nil {
		t.Fatal("Run with nothing listening at REDIS_URL succeeded, want an error")
	}
	for _, want := range []string{"REDIS_URL is unreachable", "scripts/demo.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-workers", "0"},
		{"-duration", "0s"},
		{"-nope"},
		{"extra"},
	} {
		var log bytes.Buffer
		if err := Run(t.Context(), Options{Args: args, Log: &log}); err == nil {
			t.Errorf("Run(%q) succeeded, want an error", args)
		}
	}
}

// TestRunRefusesARedisInUse points the demo at a Redis holding a key of
// someone else: it refuses before writing anything (no key, no function
// library), naming the key and -share-redis; with -share-redis it runs, and
// says which Redis it used.
func TestRunRefusesARedisInUse(t *testing.T) {
	r := testenv.StartRedis(t)
	t.Setenv("REDIS_URL", r.URL())
	rdb := r.Client(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, "orders:42", "paid", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	err := Run(ctx, Options{Args: []string{"-duration", "1s"}, Log: &log})
	if err == nil || !strings.Contains(err.Error(), `holds keys the demo did not write ("orders:42"`) || !strings.Contains(err.Error(), "-share-redis") {
		t.Fatalf("Run on a Redis in use: %v, want a refusal naming orders:42 and -share-redis", err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 1 {
		t.Fatalf("after the refusal the Redis holds %d keys (%v), want the 1 it had", n, err)
	}
	if libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result(); err != nil || len(libs) != 0 {
		t.Fatalf("after the refusal the Redis holds libraries %v (%v), want none", libs, err)
	}
	if !strings.Contains(log.String(), "Redis "+r.URL()+" (from REDIS_URL)") {
		t.Fatalf("the demo did not say which Redis it used:\n%s", log.String())
	}
	var out bytes.Buffer
	if err := Run(ctx, Options{Args: []string{"-duration", "1s", "-share-redis"}, Out: &out, Log: &log, Quiet: true}); err != nil {
		t.Fatalf("Run -share-redis: %v\n%s", err, log.String())
	}
	if strings.Count(log.String(), "throttler demo: NATS embedded") != 1 {
		t.Fatalf("Quiet still printed the servers' line:\n%s", log.String())
	}
}

// TestForeignKeyKnowsTheDemosKeys checks that the keys a demo run left
// behind do not count as someone else's.
func TestForeignKeyKnowsTheDemosKeys(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := t.Context()
	if k, err := foreignKey(ctx, rdb); err != nil || k != "" {
		t.Fatalf("empty Redis: %q, %v", k, err)
	}
	prefix := demoVars("", "", time.Now())["THROTTLER_KEY_PREFIX"]
	if err := rdb.Set(ctx, prefix+":{flood}:l:1000000", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if k, err := foreignKey(ctx, rdb); err != nil || k != "" {
		t.Fatalf("a demo's key: %q, %v; want none foreign", k, err)
	}
	if err := rdb.Set(ctx, "thr:{acme}:l:1000000", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if k, err := foreignKey(ctx, rdb); err != nil || k != "thr:{acme}:l:1000000" {
		t.Fatalf("a worker's key: %q, %v; want it found", k, err)
	}
	other := testenv.StartRedis(t).Client(t)
	lib := "#!lua name=billing\nredis.register_function('noop', function() return 1 end)"
	if err := other.FunctionLoad(ctx, lib).Err(); err != nil {
		t.Fatal(err)
	}
	if k, err := foreignKey(ctx, other); err != nil || k != "library billing" {
		t.Fatalf("a Redis with another library and no keys: %q, %v; want the library found", k, err)
	}
}

// TestLegendExplainsEveryColumn checks that each column of the table has a
// line in the legend, and that the legend says why redeliveries stay low
// while deferred climbs.
func TestLegendExplainsEveryColumn(t *testing.T) {
	var b bytes.Buffer
	printTable(&b, "t", nil, 0)
	header := strings.Split(b.String(), "\n")[1]
	for _, col := range regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(header), -1) {
		name := strings.Fields(col)[0]
		if name == "p50" || name == "p99" {
			name = "p50/p99 wait"
		}
		if !strings.Contains(legend, "\n  "+name+" ") {
			t.Errorf("column %q has no line in the legend", col)
		}
	}
	if !strings.Contains(legend, "comes back as a\n                 new message") {
		t.Error("the legend does not say why a moved job is no redelivery")
	}
}
