package throttle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// t0 is the fixed start of every explicit-time test: far from the Unix epoch
// and from the machine's clock, so Redis TIME never leaks into a result.
var t0 = time.Unix(1_800_000_000, 0)

// env is what setup returns: a private redis-server, a client for it and a
// key prefix no other test uses.
type env struct {
	srv    *testenv.Redis
	rdb    *redis.Client
	prefix string
}

// setup starts a private redis-server for t and returns it with a client and
// a key prefix derived from the test's name.
func setup(t testing.TB) env {
	t.Helper()
	srv := testenv.StartRedis(t)
	return env{srv: srv, rdb: srv.Client(t), prefix: testPrefix(t)}
}

// testPrefix returns a key prefix unique to t: its name with every byte other
// than letters, digits, '_' and '-' replaced by '_'.
func testPrefix(t testing.TB) string {
	return "t_" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, t.Name())
}

// newLimiter returns a Limiter over rdb with the given prefix, default limits
// and horizon, failing t if New refuses them.
func newLimiter(t testing.TB, rdb throttle.Client, prefix string, horizon time.Duration, def throttle.Limits) *throttle.Limiter {
	t.Helper()
	l, err := throttle.New(rdb, throttle.Options{Rules: throttle.Rules{Default: def}, Horizon: horizon, Prefix: prefix})
	if err != nil {
		t.Fatalf("throttle.New: %v", err)
	}
	return l
}

// decide calls l.Decide and fails t on any error.
func decide(t testing.TB, l *throttle.Limiter, req throttle.Request) throttle.Decision {
	t.Helper()
	d, err := l.Decide(context.Background(), req)
	if err != nil {
		t.Fatalf("Decide(%+v): %v", req, err)
	}
	return d
}

// keys returns every key of the server that starts with prefix.
func keys(t testing.TB, rdb *redis.Client, prefix string) []string {
	t.Helper()
	ks, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatalf("KEYS %s*: %v", prefix, err)
	}
	return ks
}

// checkHashTag fails t unless key holds exactly one '{' and one '}', in
// that order, with something between them.
func checkHashTag(t testing.TB, key string) {
	t.Helper()
	open, close := strings.Index(key, "{"), strings.Index(key, "}")
	if strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 || open < 0 || close <= open+1 {
		t.Fatalf("key %q: want exactly one non-empty {...} hash tag", key)
	}
}

// waitFor polls cond every 10ms until it returns true, failing t with what
// when it has not within timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sameDecision fails t unless got equals want in every field.
func sameDecision(t testing.TB, what string, got, want throttle.Decision) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}
