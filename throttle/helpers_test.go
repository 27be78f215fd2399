package throttle_test

import (
	"context"
	"fmt"
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
	l, err := throttle.New(rdb, throttle.Options{Policies: throttle.Rules{Default: throttle.Policy{Limits: def}}, Horizon: horizon, Prefix: prefix})
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

// sameDecision fails t unless got equals want in every field, Binding
// only when want names one.
func sameDecision(t testing.TB, what string, got, want throttle.Decision) {
	t.Helper()
	if want.Binding == (throttle.Limit{}) {
		got.Binding = throttle.Limit{}
	}
	if got != want {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

// engine bundles the components a worker wires over one Limiter, for
// tests that call several of them: decisions, owners, failures and
// running caps.
type engine struct {
	*throttle.Decider
	*throttle.Owners
	*throttle.Failures
	*throttle.RunningCaps
}

// makeEngine returns the engine of l with the default running caps and
// failure counts that live failureTTL.
func makeEngine(l *throttle.Limiter, failureTTL time.Duration) (*engine, error) {
	e := &engine{}
	var err error
	if e.Owners, err = throttle.NewOwners(l); err != nil {
		return nil, err
	}
	if e.Failures, err = throttle.NewFailures(l, failureTTL); err != nil {
		return nil, err
	}
	return e.withCaps(l, throttle.CapOptions{})
}

// withCaps returns e deciding under running caps o over l.
func (e *engine) withCaps(l *throttle.Limiter, o throttle.CapOptions) (*engine, error) {
	out := *e
	var err error
	if out.RunningCaps, err = throttle.NewRunningCaps(l, o); err != nil {
		return nil, err
	}
	if out.Decider, err = throttle.NewDecider(l, out.RunningCaps); err != nil {
		return nil, err
	}
	return &out, nil
}

// newEngine returns the engine of l, with failure counts that live an
// hour.
func newEngine(t testing.TB, l *throttle.Limiter) *engine {
	t.Helper()
	e, err := makeEngine(l, time.Hour)
	if err != nil {
		t.Fatalf("makeEngine: %v", err)
	}
	return e
}

// decideCopy calls c.Decide and fails t on any error.
func decideCopy(t testing.TB, c *engine, cp throttle.Copy) throttle.Decision {
	t.Helper()
	d, err := c.Decide(context.Background(), cp)
	if err != nil {
		t.Fatalf("Decider.Decide(%+v): %v", cp, err)
	}
	return d
}

// admitted is the Decision of a job admitted with remaining tokens left.
func admitted(remaining int64) throttle.Decision {
	return throttle.Decision{Outcome: throttle.Admitted, Remaining: remaining}
}

// reserved is the Decision of a job that holds a slot wait from now.
func reserved(wait time.Duration) throttle.Decision {
	return throttle.Decision{Outcome: throttle.Reserved, Wait: wait}
}

// limited is the Decision of a job told to try again after wait, uncharged.
func limited(wait time.Duration, remaining int64) throttle.Decision {
	return throttle.Decision{Outcome: throttle.Limited, Wait: wait, Remaining: remaining}
}

// fcallRaw loads the engine's library and calls its function fn with FCALL,
// as any client could, and returns its reply as integers.
func fcallRaw(t *testing.T, rdb *redis.Client, fn string, keys []string, args []string) []int64 {
	t.Helper()
	v, err := fcallErr(rdb, fn, keys, args)
	if err != nil {
		t.Fatalf("FCALL %s keys %q args %q: %v", fn, keys, args, err)
	}
	return v
}

// fcallErr is fcallRaw returning the error instead of failing.
func fcallErr(rdb *redis.Client, fn string, keys []string, args []string) ([]int64, error) {
	ctx := context.Background()
	code, _, _, _, _ := throttle.Library()
	if err := rdb.FunctionLoadReplace(ctx, code).Err(); err != nil {
		return nil, err
	}
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = a
	}
	v, err := rdb.FCall(ctx, fn, keys, argv...).Result()
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("reply %#v, want an array", v)
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("reply element %d is %#v, want an integer", i, e)
		}
		out[i] = n
	}
	return out, nil
}

// decideFn is the name of the library's decide function.
func decideFn() string {
	_, decide, _, _, _ := throttle.Library()
	return decide
}

// reservationValue is a reservation as the library stores it: the slot in
// µs and the regime id of the limits it was reserved under.
func reservationValue(slot time.Time, ls throttle.Limits) string {
	const rid = 2147483647
	var id int64
	for _, l := range ls {
		id = (id*31 + (l.Rate*1000003+l.Period.Microseconds())%rid) % rid
	}
	return fmt.Sprintf("%d:%d", slot.UnixMicro(), id)
}
