package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// httpFleet is the set-up of the fleet tests: every server a process of its
// own, as in production (a nats-server built from the module, the
// machine's redis-server, throttler binaries), the workers sending jobs
// with THROTTLER_HANDLER=http to a recording downstream in this process.
// An in-process nats-server would run under the race detector with the
// test, slower than in production.
type httpFleet struct {
	t       testing.TB
	e       *env // the test's NATS and Redis, and a client connection
	ds      *downstream
	bin     string
	vars    map[string]string // every worker's variables, but its own
	cfg     *app.Settings     // the workers' settings, for the helpers of env
	workers []*fleetWorker
}

// startHTTPFleet starts the servers and the downstream; no worker yet (see
// start). vars are the workers' variables over the fleet's defaults.
func startHTTPFleet(t testing.TB, opts downstreamOptions, vars map[string]string) *httpFleet {
	t.Helper()
	bin, natsServer := buildThrottler(t), buildNATSServer(t)
	e := &env{t: t, natsURL: startNATSProcess(t, natsServer), redis: testenv.StartRedis(t)}
	e.nc = e.connect()
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(maxAsyncPublishes))
	must(t, err, "jetstream")
	e.js = js
	// Cleaned up after the workers: started before them.
	ds := startDownstream(t, opts)
	all := map[string]string{
		"NATS_URL":                   e.natsURL,
		"REDIS_URL":                  e.redis.URL(),
		"THROTTLER_HANDLER":          "http",
		"THROTTLER_HTTP_URL":         ds.URL() + "/jobs/{tenant}",
		"THROTTLER_DEFAULT_LIMIT":    "1000/s",
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		"THROTTLER_LOG_LEVEL":        "info",
	}
	for k, v := range vars {
		all[k] = v
	}
	f := &httpFleet{t: t, e: e, ds: ds, bin: bin, vars: all, cfg: e.config(all)}
	t.Cleanup(func() {
		if t.Failed() {
			for i, w := range f.workers {
				t.Logf("worker %d's log, last lines:\n%s", i, lastLines(w.stderr.String(), 30))
			}
		}
	})
	return f
}

// start starts n more workers, each serving its metrics on a port of its
// own and naming itself to the downstream (workerHeader: its index), and
// waits until every one is ready. A cleanup stops them with SIGTERM.
func (f *httpFleet) start(n int) {
	f.t.Helper()
	var started []*fleetWorker
	for range n {
		i := len(f.workers)
		w := &fleetWorker{metrics: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(f.t)), done: make(chan struct{})}
		v := map[string]string{
			"THROTTLER_METRICS_ADDR": w.metrics,
			"THROTTLER_HTTP_HEADERS": workerHeader + "=" + strconv.Itoa(i),
		}
		for k, x := range f.vars {
			v[k] = x
		}
		w.cmd, _, w.stderr = throttlerCmd(context.Background(), f.bin, v)
		must(f.t, w.cmd.Start(), "start throttler %d", i)
		go func() {
			w.err = w.cmd.Wait()
			close(w.done)
		}()
		f.t.Cleanup(func() {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			<-w.done
		})
		f.workers = append(f.workers, w)
		started = append(started, w)
	}
	for _, w := range started {
		testenv.Eventually(f.t, 60*time.Second, "worker ready on "+w.metrics, func() bool {
			select {
			case <-w.done:
				f.t.Fatalf("worker exited while starting: %v\n%s", w.err, w.stderr)
			default:
			}
			resp, err := http.Get("http://" + w.metrics + "/readyz")
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
}

// kill sends worker i SIGKILL, waits for it to exit, and returns when it
// was sent.
func (f *httpFleet) kill(i int) time.Time {
	f.t.Helper()
	w := f.workers[i]
	at := time.Now()
	must(f.t, w.cmd.Process.Kill(), "SIGKILL worker %d", i)
	<-w.done
	return at
}

// alive reports whether worker i is still running.
func (f *httpFleet) alive(i int) bool {
	select {
	case <-f.workers[i].done:
		return false
	default:
		return true
	}
}

// metric sums a sample (name{labels}, as scrape returns it) over the
// running workers; a worker that has no such sample counts 0.
func (f *httpFleet) metric(sample string) float64 {
	f.t.Helper()
	var sum float64
	for i, w := range f.workers {
		if !f.alive(i) {
			continue
		}
		m, err := scrape(w.metrics)
		must(f.t, err, "metrics of worker %d", i)
		sum += m[sample]
	}
	return sum
}

// tenantMetric is metric for a per-tenant counter or gauge.
func (f *httpFleet) tenantMetric(name, tenant string) float64 {
	return f.metric(name + `{tenant="` + tenant + `"}`)
}

// redisClusterVars starts a Redis Cluster of three masters for the test
// and returns the variables that point a worker at it (cluster mode, and
// every master in REDIS_URL), and the cluster. Given to startHTTPFleet,
// they put its workers on the cluster; the fleet's single Redis then
// stands unused.
func redisClusterVars(t testing.TB) (map[string]string, *testenv.Cluster) {
	t.Helper()
	c := testenv.StartRedisCluster(t, 3)
	return map[string]string{
		"THROTTLER_REDIS_MODE": "cluster",
		"REDIS_URL":            "redis://" + c.Addrs[0] + "?addr=" + strings.Join(c.Addrs[1:], "&addr="),
	}, c
}

// publish publishes n jobs of tenant at once (asynchronously, waiting for
// every ack) and returns their ids, the Idempotency-Key each is sent with.
func (f *httpFleet) publish(tenant string, n int) []string {
	f.t.Helper()
	return f.publishWith(tenant, nil, n)
}

// publishWith is publish with headers hdr on every job.
func (f *httpFleet) publishWith(tenant string, hdr nats.Header, n int) []string {
	f.t.Helper()
	const chunk = 1000
	ids := make([]string, 0, n)
	for from := 0; from < n; from += chunk {
		futures := make([]jetstream.PubAckFuture, 0, chunk)
		for range min(chunk, n-from) {
			fut, err := f.e.js.PublishMsgAsync(&nats.Msg{Subject: "jobs." + tenant, Header: hdr, Data: []byte("job")})
			must(f.t, err, "publish to %s", tenant)
			futures = append(futures, fut)
		}
		for _, fut := range futures {
			select {
			case ack := <-fut.Ok():
				ids = append(ids, jobID(f.cfg.Stream, ack.Sequence))
			case err := <-fut.Err():
				f.t.Fatalf("publish to %s: %v", tenant, err)
			case <-time.After(30 * time.Second):
				f.t.Fatalf("publish to %s: no ack within 30s", tenant)
			}
		}
	}
	return ids
}

// pacedPublisher publishes jobs of several tenants at a steady pace from a
// goroutine of its own.
type pacedPublisher struct {
	mu   sync.Mutex
	ids  map[string][]string  // per tenant
	at   map[string]time.Time // when each id was published (its ack)
	err  error
	done chan struct{}
}

// publishPaced publishes perSecond jobs a second of each tenant for d, in
// 20 ms ticks, and returns at once; wait returns the ids.
func (f *httpFleet) publishPaced(perSecond map[string]int, d time.Duration) *pacedPublisher {
	p := &pacedPublisher{ids: map[string][]string{}, at: map[string]time.Time{}, done: make(chan struct{})}
	const tick = 20 * time.Millisecond
	go func() {
		defer close(p.done)
		start := time.Now()
		sent := map[string]int{}
		for i := 1; time.Duration(i)*tick <= d; i++ {
			time.Sleep(time.Until(start.Add(time.Duration(i) * tick))) // the publishing pace
			for tenant, rate := range perSecond {
				for sent[tenant] < rate*i*int(tick/time.Millisecond)/1000 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					ack, err := f.e.js.PublishMsg(ctx, &nats.Msg{Subject: "jobs." + tenant, Data: []byte("job")})
					cancel()
					p.mu.Lock()
					if err != nil {
						p.err = fmt.Errorf("publish to %s: %w", tenant, err)
						p.mu.Unlock()
						return
					}
					id := jobID(f.cfg.Stream, ack.Sequence)
					p.ids[tenant] = append(p.ids[tenant], id)
					p.at[id] = time.Now()
					p.mu.Unlock()
					sent[tenant]++
				}
			}
		}
	}()
	return p
}

// wait waits until the publisher has finished and returns the ids it
// published, per tenant.
func (p *pacedPublisher) wait(t testing.TB) map[string][]string {
	t.Helper()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.ids
}

// waitAnsweredOK waits until every job of ids had a 2xx answer.
func (f *httpFleet) waitAnsweredOK(ids []string, timeout time.Duration) {
	f.t.Helper()
	missing := len(ids)
	defer func() {
		if missing > 0 { // Eventually failed the test
			f.t.Logf("%d of %d jobs never answered 2xx", missing, len(ids))
		}
	}()
	testenv.Eventually(f.t, timeout, fmt.Sprintf("%d jobs answered 2xx", len(ids)), func() bool {
		missing = f.ds.missingOK(ids)
		return missing == 0
	})
}

// waitSettled waits until the workers have nothing left to do: see
// env.waitSettled.
func (f *httpFleet) waitSettled(timeout time.Duration) {
	f.t.Helper()
	f.e.waitSettled(f.t, f.cfg, timeout)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
