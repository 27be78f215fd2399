package app

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/rollcall"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/limits"
)

// TestEnvLimitsFingerprintsTheParsedLimits: workers agree when their
// environments give the same limits, however written (a burst left out is
// the rate), and differ when a limit, a group's or the time zone does.
func TestEnvLimitsFingerprintsTheParsedLimits(t *testing.T) {
	fingerprint := func(vars map[string]string) string {
		t.Helper()
		s, err := LoadSettingsFrom(vars)
		if err != nil {
			t.Fatalf("settings %v: %v", vars, err)
		}
		return envLimits(s)
	}
	base := fingerprint(map[string]string{"THROTTLER_TENANT_LIMITS": "acme=10/s,globex=5/m"})
	for _, same := range []map[string]string{
		{"THROTTLER_TENANT_LIMITS": "acme=10/s:10,globex=5/m:5"},
		{"THROTTLER_TENANT_LIMITS": "globex=5/m, acme=10/s"},
	} {
		if got := fingerprint(same); got != base {
			t.Errorf("%v: fingerprint %s, want %s as for acme=10/s,globex=5/m", same, got, base)
		}
	}
	for _, other := range []map[string]string{
		{"THROTTLER_TENANT_LIMITS": "acme=5/s,globex=5/m"},
		{"THROTTLER_TENANT_LIMITS": "acme=10/s,globex=5/m", "THROTTLER_DEFAULT_LIMIT": "50/s"},
		{"THROTTLER_TENANT_LIMITS": "acme=10/s,globex=5/m", "THROTTLER_GROUP_LIMITS": "org=1/s", "THROTTLER_GROUP_FROM": "subject:3"},
		{"THROTTLER_TENANT_LIMITS": "acme=10/s,globex=5/m", "THROTTLER_TIMEZONE": "Europe/Paris"},
	} {
		if got := fingerprint(other); got == base {
			t.Errorf("%v: the same fingerprint as acme=10/s,globex=5/m", other)
		}
	}
}

// TestEnvRulesReadBack: the tenants' limits a worker sends in the roll
// call read back as the same policies, whatever terms they hold.
func TestEnvRulesReadBack(t *testing.T) {
	s := mustSettle(t, map[string]string{
		"THROTTLER_DEFAULT_LIMIT": "100/s:200+5000/d",
		"THROTTLER_TENANT_LIMITS": "acme=10/s+sliding:50/1m,globex=window:1000/d,initech=20/s+running:3,hooli=5/s+credits,umbrella=7/s+weight:3",
		"THROTTLER_DEFAULT_BURST": "9",
		"THROTTLER_HANDLER":       "http",
		"THROTTLER_HTTP_URL":      "http://127.0.0.1:1/jobs",
	})
	got, err := rulesOf(envRules(s.Rules))
	if err != nil {
		t.Fatalf("rulesOf(envRules(...)): %v", err)
	}
	if !reflect.DeepEqual(got, s.Rules) {
		t.Errorf("read back:\n got %+v\nwant %+v", got, s.Rules)
	}
	if _, err := rulesOf(map[string]string{"acme": "10/s"}); err == nil {
		t.Errorf("rules without a default read back")
	}
	if _, err := rulesOf(map[string]string{limits.DefaultKey: "10/s", "acme": "ten a second"}); err == nil || !strings.Contains(err.Error(), "acme") {
		t.Errorf("a bad tenant's spec: err %v, want one naming acme", err)
	}
}

// TestNewestEnv: the newest environment is the one whose oldest worker
// started last; a worker of an older one restarted since does not make it
// the newest, and workers that do not say their rules are left out.
func TestNewestEnv(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	old, newer := map[string]string{limits.DefaultKey: "10/s:10"}, map[string]string{limits.DefaultKey: "5/s:5"}
	workers := []rollcall.Worker{
		{ID: "o1", Limits: "A", Rules: old, Started: at(100)},
		{ID: "o2", Limits: "A", Rules: old, Started: at(300)}, // restarted during the rollout
		{ID: "n1", Limits: "B", Rules: newer, Started: at(200)},
		{ID: "x", Limits: "C", Started: at(400)}, // too old to say its rules
	}
	fp, rules, ok := newestEnv(workers, nil)
	if !ok || fp != "B" || rules[limits.DefaultKey] != "5/s:5" {
		t.Errorf("newestEnv = %q, %v, %v; want B (started 200, A's oldest 100)", fp, rules, ok)
	}
	if _, _, ok := newestEnv(workers[3:], nil); ok {
		t.Errorf("newestEnv of a worker that does not say its rules: ok")
	}
	// o1 gone, o2 restarted (started 300) after learning from o1 that A
	// first ran at 100: A is still the older.
	restarted := []rollcall.Worker{
		{ID: "o2", Limits: "A", Rules: old, Started: at(300), Since: at(100)},
		{ID: "n1", Limits: "B", Rules: newer, Started: at(200)},
	}
	if fp, _, _ := newestEnv(restarted, nil); fp != "B" {
		t.Errorf("newestEnv = %q beside a restarted worker that knows its configuration ran from 100; want B", fp)
	}
	// Without what it learnt, A would look newer.
	restarted[0].Since = time.Time{}
	if fp, _, _ := newestEnv(restarted, nil); fp != "A" {
		t.Errorf("newestEnv = %q beside a restarted worker that says nothing of its configuration; want A (started 300)", fp)
	}
	// Restarted again once no worker that knew runs: the fleet remembers.
	seen := map[string]rollcall.Seen{"A": {Since: at(100), Last: at(350)}}
	if fp, _, _ := newestEnv(restarted, seen); fp != "B" {
		t.Errorf("newestEnv = %q when the fleet remembers A first ran at 100; want B", fp)
	}
}

// TestRememberKeepsAConfigurationsStartAWhile: what the roll call says of
// each configuration is merged, earliest start and latest answer, from the
// workers' own answers and from what they remember; a configuration none
// of whose workers answered for forgetAfter is forgotten, so that a
// rollback to it later is a configuration of its own again.
func TestRememberKeepsAConfigurationsStartAWhile(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	seen := map[string]rollcall.Seen{}
	remember(seen, []rollcall.Worker{
		{ID: "o1", Limits: "A", Started: at(100)},
		{ID: "n1", Limits: "B", Started: at(200), Seen: map[string]rollcall.Seen{"A": {Since: at(50), Last: at(190)}}},
	}, at(210))
	if k := seen["A"]; !k.Since.Equal(at(50)) || !k.Last.Equal(at(210)) {
		t.Errorf("A: %+v, want since 50 (remembered), last 210 (answered)", k)
	}
	// o1 gone: A is remembered until forgetAfter after its last answer.
	remember(seen, []rollcall.Worker{{ID: "n1", Limits: "B", Started: at(200)}}, at(210).Add(forgetAfter))
	if _, found := seen["A"]; !found {
		t.Errorf("A forgotten at once")
	}
	remember(seen, []rollcall.Worker{{ID: "n1", Limits: "B", Started: at(200),
		Seen: map[string]rollcall.Seen{"A": {Since: at(50), Last: at(210)}}}}, at(211).Add(forgetAfter))
	if _, found := seen["A"]; found {
		t.Errorf("A still remembered %v after its last answer", forgetAfter)
	}
}

// TestAgreementAppliesTheNewestAndGoesBack: against a real NATS, a worker
// applies the tenants' limits of a worker started after it with others,
// warns that it does, and goes back to its own once that worker stops
// answering; a roll call from a configuration it has not heard makes it
// ask again at once, one it has heard does not. A worker of its own
// configuration that ran before it teaches it when that configuration
// first ran.
func TestAgreementAppliesTheNewestAndGoesBack(t *testing.T) {
	nc := testenv.StartNATS(t, "").Connect(t)
	cfg := mustSettle(t, map[string]string{"THROTTLER_TENANT_LIMITS": "acme=20/s"})
	other := mustSettle(t, map[string]string{"THROTTLER_TENANT_LIMITS": "acme=5/s"})
	logged := &testenv.Buffer{}
	log := slog.New(slog.NewTextHandler(logged, nil))
	self := newSelf(cfg)
	self.Started = time.Now().Add(-time.Hour)
	a := newEnvAgreement(nc, cfg, self, log)
	stopSelf, err := rollcall.Answer(nc, RollCallSubject(cfg), func() rollcall.Worker { return a.answer(self) }, a.asked)
	if err != nil {
		t.Fatal(err)
	}
	defer stopSelf()
	store := limits.NewStore(cfg.Rules)
	ctx := context.Background()

	elder := self
	elder.ID, elder.Started = "elder", self.Started.Add(-time.Hour)
	stopElder, err := rollcall.Answer(nc, RollCallSubject(cfg), func() rollcall.Worker { return elder }, nil)
	if err != nil {
		t.Fatal(err)
	}
	applied, _ := a.check(ctx, store, self.Limits, false)
	stopElder()
	if got := a.answer(self).Since; !got.Equal(elder.Started) {
		t.Errorf("since %v, want %v, when the elder worker of its configuration started", got, elder.Started)
	}
	if got := store.Policy("acme").String(); got != "20/s:20" || applied != self.Limits {
		t.Fatalf("alone: acme %s, applied %s; want its own 20/s:20", got, applied)
	}
	later := newSelf(other)
	stopLater, err := rollcall.Answer(nc, RollCallSubject(cfg), func() rollcall.Worker { return later }, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The later worker's first roll call, with a configuration not heard.
	if _, err := rollcall.Gather(ctx, nc, RollCallSubject(cfg), []byte(later.Limits), time.Second, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.poke:
	default:
		t.Fatalf("a roll call from a configuration not heard did not make the worker ask again")
	}
	applied, _ = a.check(ctx, store, applied, false)
	if got := store.Policy("acme").String(); got != "5/s:5" || applied != later.Limits {
		t.Fatalf("beside a later worker: acme %s, applied %s; want the later one's 5/s:5", got, applied)
	}
	if !strings.Contains(logged.String(), "this worker applies theirs") {
		t.Errorf("no warning that it applies the later workers' limits:\n%s", logged.String())
	}
	if v := gaugeValue(t, a.gauge()); v != 1 {
		t.Errorf("throttler_env_limits_foreign %v while it applies the later worker's limits, want 1", v)
	}
	a.asked([]byte(later.Limits))
	select {
	case <-a.poke:
		t.Errorf("a roll call from a configuration heard made the worker ask again")
	default:
	}
	stopLater()
	applied, _ = a.check(ctx, store, applied, false)
	if got := store.Policy("acme").String(); got != "20/s:20" || applied != self.Limits {
		t.Fatalf("once the later worker left: acme %s, applied %s; want its own 20/s:20 again", got, applied)
	}
	if v := gaugeValue(t, a.gauge()); v != 0 {
		t.Errorf("throttler_env_limits_foreign %v with its own limits again, want 0", v)
	}
	if !strings.Contains(logged.String(), "own environment apply again") {
		t.Errorf("no line saying its own limits apply again:\n%s", logged.String())
	}
}
