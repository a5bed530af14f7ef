// Package prometheus holds tickd's alert rules (tickd-alerts.yml); its test
// runs their unit tests with promtool.
package prometheus

import (
	"os/exec"
	"testing"
)

// TestAlertRules runs promtool on the rules and their unit tests
// (tickd-alerts_test.yml). promtool comes with Debian's prometheus package.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is missing: install it (apt-get install -y prometheus, or a Prometheus release's promtool) to test the alert rules")
	}
	for _, args := range [][]string{{"check", "rules", "tickd-alerts.yml"}, {"test", "rules", "tickd-alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
