package deploy

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// alertsFile and dashboardFile are the rules and the dashboard.
var (
	alertsFile    = filepath.Join("prometheus", "alerts.yaml")
	dashboardFile = filepath.Join("grafana", "throttler.json")
)

// promql parses PromQL as Prometheus does, with its default functions.
var promql = parser.NewParser(parser.Options{})

// query is one PromQL expression of the rules or the dashboard.
type query struct {
	where string // the alert or panel, for messages
	expr  string
}

// metricNames parses q and returns the metric names its selectors use.
func metricNames(t *testing.T, q query) []string {
	t.Helper()
	expr, err := promql.ParseExpr(q.expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", q.where, err, q.expr)
		return nil
	}
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%s: a selector without a metric name (%s): name the metric so the name check covers it", q.where, vs)
			return nil
		}
		names = append(names, name)
		return nil
	})
	return names
}

// ruleQueries parses alertsFile with Prometheus' rule parser, strictly
// (unknown fields fail; expressions, durations, templates in annotations
// are checked), and returns its expressions.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, promql, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("%v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	var qs []query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			qs = append(qs, query{where: "rule " + name, expr: r.Expr})
		}
	}
	return qs
}

// TestAlertRules: the rules parse, and each alert says what it is about
// and what to do (summary and runbook) and has a severity.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	ruleQueries(t)
	groups, _ := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			for _, a := range []string{"summary", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, a)
				}
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
		}
	}
	// What the deployment promises to watch (deploy/README.md).
	for _, want := range []string{"ThrottlerBacklogGrowing", "ThrottlerRedisErrors", "ThrottlerDeadLetters",
		"ThrottlerWorkerNotReady", "ThrottlerNoWorkerReady", "ThrottlerTenantHeld"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
}

// grafanaVars are the dashboard's variables and Grafana's own, replaced
// as Grafana would before the expressions go to Prometheus.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"${job}", "throttler",
	"$job", "throttler",
	"$topk", "10",
)

// unreplaced finds a variable grafanaVars does not know.
var unreplaced = regexp.MustCompile(`\$\{?\w+`)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

// panel is a dashboard panel; rows hold panels of their own when
// collapsed.
type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

// dashboardQueries reads the dashboard and returns its panels'
// expressions with the variables replaced.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: a dashboard needs a title and a uid", dashboardFile)
	}
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				e := grafanaVars.Replace(tg.Expr)
				if v := unreplaced.FindString(e); v != "" {
					t.Errorf("panel %q: variable %s unknown to the test", p.Title, v)
				}
				qs = append(qs, query{where: "panel " + p.Title + " " + tg.RefID, expr: e})
			}
		}
	}
	walk(d.Panels)
	if len(qs) == 0 {
		t.Fatalf("%s: no queries", dashboardFile)
	}
	return qs
}

// TestDashboardQueriesParse: every panel's query is PromQL once the
// variables are replaced, and the panels the deployment promises are
// there.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	for _, q := range dashboardQueries(t) {
		for _, n := range metricNames(t, q) {
			used[n] = true
		}
	}
	for _, want := range []string{"throttler_admitted_total", "throttler_deferred_total", "throttler_dead_lettered_total",
		"throttler_queue_wait_seconds_bucket", "throttler_throttle_wait_seconds_bucket", "throttler_handler_duration_seconds_bucket",
		"throttler_decision_duration_seconds_bucket", "throttler_ack_pending", "throttler_max_ack_pending",
		"throttler_redis_errors_total", "throttler_ready", "throttler_completed_total", "throttler_failed_total",
		"throttler_waiting_jobs", "throttler_consumer_pending", "throttler_parks_total", "throttler_running"} {
		if !used[want] {
			t.Errorf("no panel uses %s", want)
		}
	}
}
