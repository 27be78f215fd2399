package throttle_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// The benchmarks run the engine and github.com/go-redis/redis_rate side by
// side, each against a redis-server it starts, with a limit (benchRate) so generous that
// every call is admitted: they measure the cost of a decision, not of being
// limited. Keys are spread over benchTenants tenants.
//
//	go test -run '^$' -bench . -benchtime 3s ./throttle/
const (
	benchTenants = 1000
	benchWorkers = 64 // goroutines of the -64 variants
	benchBatch   = 64 // requests per DecideBatch
)

// benchRate is the limit of every benchmark tenant, for the engine and for
// redis_rate alike: benchRate a second with a burst of benchRate, far more
// than a benchmark sends a tenant (a few hundred calls a second each), so
// every call is admitted. It is a real limit on purpose: at 10^9 a second
// redis_rate's increment (10^-9 s) is lost against its clock (~3*10^8 s
// since 2017, a float64 step of ~6*10^-8 s), so it never writes its key and
// its Allow is a GET only; redisRateAllow checks that it keeps state.
const benchRate = 10000

// benchLimit is the engine's limit in the benchmarks: benchRate a second.
var benchLimit = throttle.PerSecond(benchRate, benchRate)

// benchRedis starts a redis-server for b and returns a client whose pool
// has a connection for each of benchWorkers goroutines.
func benchRedis(b *testing.B) *redis.Client {
	b.Helper()
	srv := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: benchWorkers})
	b.Cleanup(func() { rdb.Close() })
	return rdb
}

func benchTenant(i int) string { return fmt.Sprintf("tenant-%06d", i%benchTenants) }

// measure runs one benchmark body: it resets Redis' command statistics,
// times body, and reports decisions/s and Redis' CPU time per call of cmd
// (FCALL for the engine, EVALSHA for redis_rate). body returns the number
// of decisions it made.
func measure(b *testing.B, rdb *redis.Client, cmd string, body func() int) {
	b.Helper()
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	n := body()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(usecPerCall(b, rdb, cmd), "redis-µs/call")
}

// usecPerCall reads usec_per_call of cmd from INFO commandstats.
func usecPerCall(b *testing.B, rdb *redis.Client, cmd string) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				return f
			}
		}
	}
	b.Fatalf("INFO commandstats: no %s", cmd)
	return 0
}

// parallel64 runs body from benchWorkers goroutines in all.
func parallel64(b *testing.B, body func(pb *testing.PB)) {
	b.Helper()
	procs := runtime.GOMAXPROCS(0)
	if benchWorkers%procs != 0 {
		b.Fatalf("GOMAXPROCS %d does not divide %d goroutines", procs, benchWorkers)
	}
	b.SetParallelism(benchWorkers / procs)
	b.RunParallel(body)
}

// tally counts the calls of a benchmark that failed or were limited; under
// limits no benchmark reaches, every call must be admitted.
type tally struct {
	failed, limited atomic.Int64
	firstErr        atomic.Value
}

// record counts one call's outcome.
func (t *tally) record(allowed bool, err error) {
	switch {
	case err != nil:
		if t.failed.Add(1) == 1 {
			t.firstErr.Store(err)
		}
	case !allowed:
		t.limited.Add(1)
	}
}

// check fails b if any call failed or was limited.
func (t *tally) check(b *testing.B) {
	b.Helper()
	if n := t.failed.Load(); n > 0 {
		b.Fatalf("%d calls failed, first: %v", n, t.firstErr.Load())
	}
	if n := t.limited.Load(); n > 0 {
		b.Fatalf("%d calls limited under benchLimit", n)
	}
}

// allowFunc makes one single call for tenant: whether it was admitted.
type allowFunc func(tenant string) (bool, error)

// engineAllow is the engine's Allow under benchLimit.
func engineAllow(b *testing.B, rdb *redis.Client) allowFunc {
	l := newLimiter(b, rdb, "bench", 0, throttle.Limits{benchLimit})
	if err := l.Load(context.Background()); err != nil {
		b.Fatalf("Load: %v", err)
	}
	return func(tenant string) (bool, error) {
		d, err := l.Allow(context.Background(), tenant)
		return d.Outcome == throttle.Admitted, err
	}
}

// redisRateAllow is redis_rate's Allow under PerSecond(benchRate). It fails
// b unless a call leaves redis_rate's state key behind: a baseline that
// keeps no state would not be a rate limiter.
func redisRateAllow(b *testing.B, rdb *redis.Client) allowFunc {
	b.Helper()
	ctx := context.Background()
	rl := redis_rate.NewLimiter(rdb)
	limit := redis_rate.PerSecond(benchRate)
	if _, err := rl.Allow(ctx, "state-probe", limit); err != nil {
		b.Fatalf("redis_rate Allow: %v", err)
	}
	if n, err := rdb.Exists(ctx, "rate:state-probe").Result(); err != nil || n != 1 {
		b.Fatalf("redis_rate kept no state for its call (EXISTS = %d, %v)", n, err)
	}
	return func(tenant string) (bool, error) {
		r, err := rl.Allow(context.Background(), tenant, limit)
		return err == nil && r.Allowed > 0, err
	}
}

// runSingles runs the single-1 and single-64 sub-benchmarks of allow, whose
// Redis command is cmd.
func runSingles(b *testing.B, rdb *redis.Client, cmd string, allow allowFunc) {
	var t tally
	b.Run("single-1", func(b *testing.B) {
		measure(b, rdb, cmd, func() int {
			for i := range b.N {
				t.record(allow(benchTenant(i)))
			}
			return b.N
		})
		t.check(b)
	})
	b.Run("single-64", func(b *testing.B) {
		var next atomic.Int64
		measure(b, rdb, cmd, func() int {
			parallel64(b, func(pb *testing.PB) {
				for pb.Next() {
					t.record(allow(benchTenant(int(next.Add(1)))))
				}
			})
			return b.N
		})
		t.check(b)
	})
}

func BenchmarkDecide(b *testing.B) {
	rdb := benchRedis(b)
	l := newLimiter(b, rdb, "bench", 0, throttle.Limits{benchLimit})
	ctx := context.Background()
	runSingles(b, rdb, "fcall", engineAllow(b, rdb))
	var t tally
	// batch runs one op as one DecideBatch of benchBatch requests made by
	// req from the index of a request among all requests.
	batch := func(b *testing.B, req func(n int) throttle.Request) {
		var next atomic.Int64
		measure(b, rdb, "fcall", func() int {
			parallel64(b, func(pb *testing.PB) {
				reqs := make([]throttle.Request, benchBatch)
				for pb.Next() {
					first := int(next.Add(benchBatch))
					for k := range reqs {
						reqs[k] = req(first + k)
					}
					for _, r := range l.DecideBatch(ctx, reqs) {
						t.record(r.Outcome == throttle.Admitted, r.Err)
					}
				}
			})
			return b.N * benchBatch
		})
		t.check(b)
	}
	b.Run("batch-64", func(b *testing.B) {
		// Every request another tenant: one script call each.
		batch(b, func(n int) throttle.Request { return throttle.Request{Tenant: benchTenant(n)} })
	})
	b.Run("batch-64-by-8-tenants", func(b *testing.B) {
		// Jobs (with ids) of 8 tenants, 8 each: one script call per tenant,
		// as a worker's pulled batch of a busy stream looks.
		batch(b, func(n int) throttle.Request {
			return throttle.Request{Tenant: benchTenant(n / 8), JobID: "j" + strconv.Itoa(n)}
		})
	})
}

func BenchmarkRedisRate(b *testing.B) {
	rdb := benchRedis(b)
	runSingles(b, rdb, "evalsha", redisRateAllow(b, rdb))
}

// BenchmarkSingleRatio measures the single-call target itself: the engine's
// Allow against redis_rate's Allow, each from 64 goroutines, in pairs run
// back to back on one redis-server (redis_rate, then the engine, each for
// singleRatioCalls calls), so that both sides of each ratio see the same
// machine. It reports the median, lowest and highest ratio of decisions/s of
// singleRatioPairs pairs, and the median Redis time per call of each side.
//
//	go test -run '^$' -bench BenchmarkSingleRatio -benchtime 1x ./throttle/
func BenchmarkSingleRatio(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	var t tally
	// run makes singleRatioCalls calls of allow from benchWorkers
	// goroutines and returns decisions/s and Redis µs per call of cmd.
	run := func(cmd string, allow allowFunc) (float64, float64) {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range benchWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > singleRatioCalls {
						return
					}
					t.record(allow(benchTenant(int(i))))
				}
			}()
		}
		wg.Wait()
		rate := singleRatioCalls / time.Since(start).Seconds()
		return rate, usecPerCall(b, rdb, cmd)
	}
	engine, baseline := engineAllow(b, rdb), redisRateAllow(b, rdb)
	run("fcall", engine) // warm both paths up
	run("evalsha", baseline)
	var ratios, ours, theirs []float64
	b.ResetTimer()
	for range b.N {
		for range singleRatioPairs {
			base, baseUsec := run("evalsha", baseline)
			eng, engUsec := run("fcall", engine)
			ratios = append(ratios, eng/base)
			ours, theirs = append(ours, engUsec), append(theirs, baseUsec)
		}
	}
	b.StopTimer()
	t.check(b)
	testenv.ReportRatios(b, ratios)
	b.ReportMetric(testenv.Median(ours), "engine-redis-µs/call")
	b.ReportMetric(testenv.Median(theirs), "redis_rate-redis-µs/call")
}

const (
	singleRatioPairs = 7
	singleRatioCalls = 60000
)

// memoryLimit is a realistic single limit; a job of cost memoryCost leaves
// its bucket non-full for 2s, long enough to measure the key.
var memoryLimit = throttle.PerSecond(100, 200)

const memoryCost = 200

// stateBytes creates the state of n tenants with memoryLimit under prefix
// "thr" (Redis TIME clock, as in production) and returns MEMORY USAGE of
// every state key.
func stateBytes(tb testing.TB, rdb *redis.Client, n int) []int64 {
	tb.Helper()
	ctx := context.Background()
	l := newLimiter(tb, rdb, throttle.DefaultPrefix, 0, throttle.Limits{memoryLimit})
	reqs := make([]throttle.Request, n)
	for i := range reqs {
		reqs[i] = throttle.Request{Tenant: fmt.Sprintf("tenant-%06d", i), Cost: memoryCost}
	}
	for i, r := range l.DecideBatch(ctx, reqs) {
		if r.Err != nil || r.Outcome != throttle.Admitted {
			tb.Fatalf("tenant %d: %+v", i, r)
		}
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, n)
	for i := range cmds {
		key := fmt.Sprintf("thr:{tenant-%06d}:l:1000000", i)
		cmds[i] = pipe.MemoryUsage(ctx, key, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatalf("MEMORY USAGE: %v (did a key expire? it lives 2s)", err)
	}
	sizes := make([]int64, n)
	for i, c := range cmds {
		sizes[i] = c.Val()
	}
	return sizes
}

// BenchmarkMemoryPerLimit reports the memory one tenant's limit takes in
// Redis, averaged over benchTenants tenants. Its ns/op is meaningless.
func BenchmarkMemoryPerLimit(b *testing.B) {
	rdb := benchRedis(b)
	var sum int64
	sizes := stateBytes(b, rdb, benchTenants)
	for _, s := range sizes {
		sum += s
	}
	for range b.N {
	}
	b.ReportMetric(float64(sum)/float64(len(sizes)), "bytes/limit")
}

// TestMemoryPerLimit checks that a live limit of a realistic tenant costs
// at most 150 bytes of Redis memory (MEMORY USAGE of its state key).
func TestMemoryPerLimit(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := srv.Client(t)
	sizes := stateBytes(t, rdb, 100)
	if got := sizes[42]; got <= 0 || got > 150 {
		t.Fatalf("MEMORY USAGE of thr:{tenant-000042}:l:1000000 = %d bytes, want at most 150", got)
	}
	var sum int64
	for _, s := range sizes {
		sum += s
	}
	t.Logf("state key of tenant-000042: %d bytes; average over %d tenants %.1f", sizes[42], len(sizes), float64(sum)/float64(len(sizes)))
}
