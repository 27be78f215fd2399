package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtool returns the path of Prometheus' promtool (scripts/deps.sh,
// ensure_prometheus, installs Debian's); a missing one fails the test.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not in PATH (scripts/test.sh installs Debian's prometheus package): %v", err)
	}
	return p
}

// ruleTests is the part of a promtool rule test file the checks read.
type ruleTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlertUnitTests: promtool's lint finds nothing in the rules, and its
// unit tests (prometheus/alerts_test.yaml) pass; they cover every alert,
// each with a case where it fires and one where it stays quiet.
func TestAlertUnitTests(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	if out, err := exec.Command(bin, "check", "rules", "--lint=all", alertsFile).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules --lint=all: %v\n%s", err, out)
	}
	testFile := filepath.Join("prometheus", "alerts_test.yaml")
	if out, err := exec.Command(bin, "test", "rules", testFile).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}

	data, err := os.ReadFile(testFile)
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal(data, &rt); err != nil {
		t.Fatalf("%s: %v", testFile, err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, q := range ruleQueries(t) {
		name := q.where[len("rule "):]
		if !fires[name] {
			t.Errorf("%s: no unit test where it fires", name)
		}
		if !quiet[name] {
			t.Errorf("%s: no unit test where it stays quiet", name)
		}
	}
}
