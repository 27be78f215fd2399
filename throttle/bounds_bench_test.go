package throttle_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// boundsScale is the size of the extremes BenchmarkFunctionBounds
// measures: the most leases and waiting jobs the binary accepts under one
// cap (a cap and a MaxAckPending of up to 1,000,000).
const boundsScale = 1_000_000

// fcallTimes runs body with Redis logging every command and returns how
// long each FCALL it saw took, sorted. SLOWLOG times a command by the
// wall clock, so a redis-server that the machine's scheduler preempts
// looks slow: srv runs at the highest priority meanwhile (as root; else
// as it is), so that the times are Redis' own work.
func fcallTimes(b *testing.B, srv *testenv.Redis, rdb *redis.Client, body func()) []time.Duration {
	b.Helper()
	ctx := context.Background()
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, srv.Pid(), -20); err != nil {
		b.Logf("redis-server at its usual priority: %v", err)
	}
	for _, kv := range [][2]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "1000000"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			b.Fatalf("CONFIG SET %s: %v", kv[0], err)
		}
	}
	if err := rdb.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		b.Fatal(err)
	}
	body()
	logs, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		b.Fatalf("SLOWLOG GET: %v", err)
	}
	if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000").Err(); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for _, l := range logs {
		if len(l.Args) > 0 && strings.EqualFold(l.Args[0], "FCALL") {
			ds = append(ds, l.Duration)
		}
	}
	if len(ds) == 0 {
		b.Fatal("no FCALL logged")
	}
	slices.Sort(ds)
	return ds
}

// reportTimes reports the slowest, the 99th percentile and the median of
// calls' times, in ms, and their number.
func reportTimes(b *testing.B, ds []time.Duration) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(ds[len(ds)-1]), "slowest-ms")
	b.ReportMetric(ms(ds[len(ds)*99/100]), "p99-ms")
	b.ReportMetric(ms(ds[len(ds)/2]), "median-ms")
	b.ReportMetric(float64(len(ds)), "calls")
}

// fill adds n members to the sorted set key, scored at score, in
// pipelined batches.
func fill(b *testing.B, rdb *redis.Client, key, format string, n int, score time.Time) {
	b.Helper()
	ctx := context.Background()
	const batch = 10_000
	for i := 0; i < n; i += batch {
		zs := make([]redis.Z, 0, batch)
		for k := i; k < min(n, i+batch); k++ {
			zs = append(zs, redis.Z{Score: float64(score.UnixMicro()), Member: fmt.Sprintf(format, k)})
		}
		if err := rdb.ZAdd(ctx, key, zs...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	rdb.PExpire(ctx, key, time.Hour)
}

// BenchmarkFunctionBounds measures the slowest single call of the Redis
// functions at each extreme the binary accepts, read from SLOWLOG:
// renewing 1,000,000 leases under one cap, sweeping 1,000,000 expired
// leases, a waiting list of 1,000,000 jobs, and 64 jobs of 8 limits each
// over 64 tenants. The target is at most 5 ms each (lua.go's bounds).
// Each sub-benchmark runs its whole workload b.N times, so that a
// -benchtime in seconds runs it a few times rather than ramping b.N.
//
//	go test ./throttle -run '^$' -bench FunctionBounds -benchtime 1x
func BenchmarkFunctionBounds(b *testing.B) {
	ctx := context.Background()
	b.Run("renew-1M-leases", func(b *testing.B) {
		for range b.N {
			ce := newBenchCapEnv(b, throttle.Rules{Default: throttle.Policy{Running: boundsScale}})
			lk, _, _ := ce.capSets("acme")
			fill(b, ce.rdb, lk, "tok%07d", boundsScale, t0.Add(time.Minute))
			leases := make([]throttle.Lease, boundsScale)
			for i := range leases {
				leases[i] = throttle.Lease{Tenant: "acme", Token: fmt.Sprintf("tok%07d", i)}
			}
			ds := fcallTimes(b, ce.srv, ce.rdb, func() {
				if lost, err := ce.c.Renew(ctx, leases); err != nil || len(lost) != 0 {
					b.Fatalf("Renew: %d lost, %v", len(lost), err)
				}
			})
			reportTimes(b, ds)
		}
	})
	b.Run("sweep-1M-expired", func(b *testing.B) {
		for range b.N {
			ce := newBenchCapEnv(b, throttle.Rules{Default: throttle.Policy{Running: 5}})
			lk, _, _ := ce.capSets("acme")
			fill(b, ce.rdb, lk, "dead%07d", boundsScale, t0.Add(-time.Second))
			ds := fcallTimes(b, ce.srv, ce.rdb, func() {
				for ce.rdb.Exists(ctx, lk).Val() == 1 {
					if _, err := ce.c.Poke(ctx, []string{"acme"}); err != nil {
						b.Fatal(err)
					}
				}
			})
			reportTimes(b, ds)
		}
	})
	b.Run("waiting-list-1M", func(b *testing.B) {
		for range b.N {
			ce := newBenchCapEnv(b, throttle.Rules{Default: throttle.Policy{Running: 1, Limits: throttle.Limits{throttle.PerSecond(1000, 1000)}}})
			_, wk, _ := ce.capSets("acme")
			fill(b, ce.rdb, wk, "w%07d", boundsScale, t0)
			ds := fcallTimes(b, ce.srv, ce.rdb, func() {
				for i := range 100 {
					r := ce.c.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: "acme", JobID: fmt.Sprintf("j%d", i), At: ce.now}, Incarnation: int64(i)}})
					if r[0].Err != nil {
						b.Fatal(r[0].Err)
					}
					if _, err := ce.c.Finish(ctx, r[0].Leases()); err != nil {
						b.Fatal(err)
					}
				}
			})
			reportTimes(b, ds)
		}
	})
	b.Run("64-jobs-8-limits-64-tenants", func(b *testing.B) {
		for range b.N {
			e := setup(b)
			var ls throttle.Limits
			for k := range throttle.MaxLimits {
				ls = append(ls, throttle.Limit{Rate: 1000, Period: time.Duration(k+1) * time.Second, Burst: 1000})
			}
			l := newLimiter(b, e.rdb, e.prefix, time.Hour, ls)
			ds := fcallTimes(b, e.srv, e.rdb, func() {
				for round := range 200 {
					reqs := make([]throttle.Request, 64)
					for i := range reqs {
						reqs[i] = throttle.Request{Tenant: fmt.Sprintf("t%02d", i), JobID: fmt.Sprintf("r%d", round), At: t0.Add(time.Duration(round) * time.Millisecond)}
					}
					for _, r := range l.DecideBatch(ctx, reqs) {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
					}
				}
			})
			reportTimes(b, ds)
		}
	})
}

// newBenchCapEnv is newCapEnv for a benchmark.
func newBenchCapEnv(b *testing.B, rules throttle.Rules) *capEnv {
	b.Helper()
	ce := &capEnv{env: setup(b), now: t0}
	l, err := throttle.New(ce.rdb, throttle.Options{Policies: rules, Horizon: time.Hour, Prefix: ce.prefix})
	if err != nil {
		b.Fatal(err)
	}
	c, err := makeEngine(l, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	if ce.c, err = c.withCaps(l, throttle.CapOptions{At: func() time.Time { return ce.now }}); err != nil {
		b.Fatal(err)
	}
	ce.l = l
	return ce
}
