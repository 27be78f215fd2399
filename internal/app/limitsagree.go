package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttler/throttler/internal/rollcall"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/throttle"
)

// envLimits fingerprints the limits a worker reads from its environment,
// as parsed (the default, the tenants', the global and group limits, with
// their bursts; 10/s and 10/s:10 are one limit), and its time zone: two
// workers of a fleet that disagree on them decide the same tenants at
// different rates.
func envLimits(cfg *Settings) string {
	h := sha256.New()
	field := func(k, v string) {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	policies := func(kind string, def throttle.Policy, each map[string]throttle.Policy) {
		field(kind, def.String())
		for _, name := range slices.Sorted(maps.Keys(each)) {
			field(kind+" "+name, each[name].String())
		}
	}
	policies("tenant", cfg.Rules.Default, cfg.Rules.Tenants)
	policies("group", cfg.Levels.DefaultGroup, cfg.Levels.Groups)
	field("global", cfg.Levels.GlobalPolicy.String())
	field("zone", cfg.TimeZone)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// envRules writes the tenants' limits of an environment as the roll call
// carries them (rollcall.Worker.Rules): each tenant's spec by its name,
// the default's under limits.DefaultKey.
func envRules(r throttle.Rules) map[string]string {
	m := make(map[string]string, len(r.Tenants)+1)
	m[limits.DefaultKey] = r.Default.String()
	for t, p := range r.Tenants {
		m[t] = p.String()
	}
	return m
}

// rulesOf reads back what envRules wrote. Every burst is written, so no
// default burst is needed.
func rulesOf(m map[string]string) (throttle.Rules, error) {
	var r throttle.Rules
	parse := func(spec string) (throttle.Policy, error) {
		if spec == "" {
			return throttle.Policy{}, nil // no limit
		}
		return throttle.ParsePolicy(spec, 0)
	}
	def, ok := m[limits.DefaultKey]
	if !ok {
		return r, fmt.Errorf("no %s limit", limits.DefaultKey)
	}
	p, err := parse(def)
	if err != nil {
		return r, fmt.Errorf("%s limit %q: %w", limits.DefaultKey, def, err)
	}
	r.Default = p
	for t, spec := range m {
		if t == limits.DefaultKey {
			continue
		}
		if p, err = parse(spec); err != nil {
			return r, fmt.Errorf("tenant %s's limit %q: %w", t, spec, err)
		}
		if r.Tenants == nil {
			r.Tenants = make(map[string]throttle.Policy, len(m)-1)
		}
		r.Tenants[t] = p
	}
	return r, nil
}

// newestEnv returns, of the environments the workers answering read their
// limits from, the one first started last, by its fingerprint, with its
// tenants' limits: the configuration a rollout is rolling the fleet to. A
// configuration's start is the earliest known: its workers' (each says
// when it learnt it first ran, rollcall.Worker.ConfigSince) and what the
// fleet remembers of it (seen, rollcall.Worker.Seen). So a worker of an
// older configuration restarted meanwhile, even once none of the workers
// that knew its start runs, does not make it the newest. ok is false when
// no worker says (workers too old to).
func newestEnv(workers []rollcall.Worker, seen map[string]rollcall.Seen) (fingerprint string, rules map[string]string, ok bool) {
	since := map[string]time.Time{}
	for _, w := range workers {
		if w.Limits == "" || w.Rules == nil {
			continue
		}
		if s, found := since[w.Limits]; !found || w.ConfigSince().Before(s) {
			since[w.Limits] = w.ConfigSince()
		}
	}
	for fp, s := range since {
		if k, found := seen[fp]; found && !k.Since.IsZero() && k.Since.Before(s) {
			since[fp] = k.Since
		}
	}
	var best time.Time
	for fp, s := range since {
		if !ok || s.After(best) || (s.Equal(best) && fp > fingerprint) {
			fingerprint, best, ok = fp, s, true
		}
	}
	for _, w := range workers {
		if ok && w.Limits == fingerprint && w.Rules != nil {
			return fingerprint, w.Rules, true
		}
	}
	return "", nil, false
}

// forgetAfter is how long the fleet remembers when a configuration first
// ran once no worker of it answers: long enough for a crashed worker of
// it to be restarted, short enough that a rollback, which comes later,
// is a configuration of its own again.
const forgetAfter = 30 * time.Second

// remember merges into seen what the roll call's answers say of each
// configuration, at now: when it first ran (the earliest known) and when
// a worker of it last answered (the latest known), forgetting those no
// worker of has answered for forgetAfter.
func remember(seen map[string]rollcall.Seen, workers []rollcall.Worker, now time.Time) {
	merge := func(fp string, k rollcall.Seen) {
		old, found := seen[fp]
		if found && !old.Since.IsZero() && (k.Since.IsZero() || old.Since.Before(k.Since)) {
			k.Since = old.Since
		}
		if found && old.Last.After(k.Last) {
			k.Last = old.Last
		}
		seen[fp] = k
	}
	for _, w := range workers {
		if w.Limits != "" {
			merge(w.Limits, rollcall.Seen{Since: w.ConfigSince(), Last: now})
		}
		for fp, k := range w.Seen {
			merge(fp, k)
		}
	}
	for fp, k := range seen {
		if now.Sub(k.Last) > forgetAfter {
			delete(seen, fp)
		}
	}
}

// agreeEvery is how often a worker asks the fleet which environment limits
// apply: it bounds how long workers apply different ones once a rollout's
// first or last worker of a configuration has come or gone.
const agreeEvery = 2 * time.Second

// envAgreement keeps the worker applying the fleet's newest environment
// limits for the tenants (newestEnv): while a rollout that changes
// THROTTLER_DEFAULT_LIMIT or THROTTLER_TENANT_LIMITS is under way, old
// and new workers would otherwise decide one tenant's bucket at two
// rates, each forgiving the debt of the slots the other reserved, and
// the tenant would be held to neither. It asks the roll call every
// agreeEvery, and at once when a worker of a configuration it has not
// seen asks (asked). The limits above the tenant (group, global) and the
// time zone are not agreed: a difference in them is warned of.
type envAgreement struct {
	nc   *nats.Conn
	subj string
	self rollcall.Worker // this worker's answer: its own limits
	own  throttle.Rules
	log  *slog.Logger
	poke chan struct{}

	mu    sync.Mutex
	known map[string]bool          // the configurations the last roll call heard
	since time.Time                // when this worker's configuration first ran, as far as it knows
	seen  map[string]rollcall.Seen // what it knows of the fleet's configurations (remember)

	differ  int         // the workers of other environments the last roll call heard
	foreign atomic.Bool // it applies another configuration's tenants' limits
}

// gauge returns throttler_env_limits_foreign, 1 while this worker applies
// the tenants' limits of another configuration of the fleet (a rollout of
// THROTTLER_TENANT_LIMITS or THROTTLER_DEFAULT_LIMIT in progress): its
// own environment does not say what it enforces then.
func (a *envAgreement) gauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "throttler_env_limits_foreign",
		Help: "1 while the worker applies the tenants' limits of another configuration of the fleet (started after its own), else 0.",
	}, func() float64 {
		if a.foreign.Load() {
			return 1
		}
		return 0
	})
}

// newEnvAgreement returns the agreement of the worker that answers roll
// calls as self, on cfg's fleet.
func newEnvAgreement(nc *nats.Conn, cfg *Settings, self rollcall.Worker, log *slog.Logger) *envAgreement {
	return &envAgreement{nc: nc, subj: RollCallSubject(cfg), self: self, own: cfg.Rules, log: log,
		poke: make(chan struct{}, 1), known: map[string]bool{self.Limits: true}, since: self.Started,
		seen: map[string]rollcall.Seen{}}
}

// answer is this worker's answer to a roll call: w with when its
// configuration first ran, as far as it knows.
func (a *envAgreement) answer(w rollcall.Worker) rollcall.Worker {
	a.mu.Lock()
	w.Since = a.since
	w.Seen = maps.Clone(a.seen)
	a.mu.Unlock()
	return w
}

// asked is the roll call's hook: a worker asking with a configuration the
// last roll call did not hear has just started, and may be a rollout's
// first: the fleet is asked again at once rather than at the next tick.
func (a *envAgreement) asked(from []byte) {
	if len(from) == 0 {
		return
	}
	a.mu.Lock()
	known := a.known[string(from)]
	a.mu.Unlock()
	if !known {
		select {
		case a.poke <- struct{}{}:
		default:
		}
	}
}

// start applies the fleet's newest environment limits to store until ctx
// ends or the returned stop is called. It asks the fleet once before it
// returns, so that a worker restarted in the middle of a rollout decides
// nothing under limits the fleet has left.
func (a *envAgreement) start(ctx context.Context, store *limits.Store) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	applied, warned := a.check(ctx, store, a.self.Limits, false)
	if a.differ == 0 {
		a.log.Debug("the workers answering the roll call agree on the limits in their environment")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(agreeEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-a.poke:
			}
			applied, warned = a.check(ctx, store, applied, warned)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// check asks the roll call once and applies the newest environment's
// tenant limits to store when they are not those applied (by
// fingerprint). It warns once of workers that differ in what is not
// agreed (warned says it has), and returns what it applied and whether it
// has warned.
func (a *envAgreement) check(ctx context.Context, store *limits.Store, applied string, warned bool) (string, bool) {
	workers, err := rollcall.Gather(ctx, a.nc, a.subj, []byte(a.self.Limits), rollCallWait, rollCallQuiet)
	if err != nil {
		return applied, warned // NATS unreachable: keep what applies
	}
	// differ counts the workers of other environments; unagreed those
	// whose difference this agreement leaves: in the limits above the
	// tenant or the time zone (their tenants' limits are the same), or
	// from a worker too old to say its tenants' limits.
	known, differ, unagreed := map[string]bool{a.self.Limits: true}, 0, 0
	for _, w := range workers {
		if w.Limits == "" || w.Limits == a.self.Limits {
			continue
		}
		known[w.Limits] = true
		differ++
		if w.Rules == nil || maps.Equal(w.Rules, a.self.Rules) {
			unagreed++
		}
	}
	a.mu.Lock()
	a.known = known
	remember(a.seen, workers, time.Now())
	if k, found := a.seen[a.self.Limits]; found && !k.Since.IsZero() && k.Since.Before(a.since) {
		a.since = k.Since
	}
	seen := maps.Clone(a.seen)
	a.mu.Unlock()
	a.differ = differ
	fp, rules, ok := newestEnv(workers, seen)
	if !ok {
		fp, rules = a.self.Limits, a.self.Rules
	}
	if unagreed > 0 && !warned {
		a.log.Warn("other workers of the fleet run with other group or global limits or another time zone in their environment (or are too old to say their tenants' limits): until all run the same, a group or tenant whose limit differs is not held to either; change a limit live with `throttler limits set` around a rollout (docs/usage.md, Changing a limit set in the environment)",
			"workers_differing", unagreed, "workers", len(workers))
	}
	warned = unagreed > 0
	if fp == applied {
		return applied, warned
	}
	if maps.Equal(rules, a.self.Rules) {
		store.SetEnv(a.own)
		a.foreign.Store(false)
		if applied != a.self.Limits {
			a.log.Info("the tenants' limits of this worker's own environment apply again: no worker started later runs with others",
				"workers", len(workers))
		}
		return fp, warned
	}
	r, err := rulesOf(rules)
	if err != nil {
		// A later version may write a spec this one cannot read.
		store.SetEnv(a.own)
		a.foreign.Store(false)
		a.log.Warn("workers started later run with tenants' limits this worker cannot read; it applies its own", "limits", fp, "err", err)
		return fp, warned
	}
	store.SetEnv(r)
	a.foreign.Store(true)
	a.log.Warn("workers started later run with other THROTTLER_DEFAULT_LIMIT or THROTTLER_TENANT_LIMITS: this worker applies theirs, so that the fleet holds each tenant to one limit while it is rolled out (docs/usage.md, Changing a limit set in the environment)",
		"their_default", rules[limits.DefaultKey], "their_tenants", len(rules)-1, "workers_differing", differ, "workers", len(workers))
	return fp, warned
}
