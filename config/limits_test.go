package config

import (
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

func TestLimits(t *testing.T) {
	cfg, err := Parse("l.toml", []byte(`
[[limits]]
name = "crm-api"
concurrency = 8
rate = "20/s"
burst = 5

[[limits]]
name = "shop-token"
rate = "100/m"
per = "entity"

[[tasks]]
name = "sync-crm"
every = "15m"
command = ["true"]
limits = ["crm-api", "shop-token"]

[[tasks]]
name = "push-crm"
every = "1h"
command = ["true"]
limits = ["crm-api"]
`))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := cfg.Limit("crm-api")
	expect.True(t, "crm-api declared", ok)
	expect.Equal(t, "crm-api as read", l.RateN == 20 && l.RatePer == time.Second && l.Burst == 5 && l.Concurrency == 8 && l.Per == "all", true)
	s, _ := cfg.Limit("shop-token")
	expect.Equal(t, "shop-token as read", s.Per == "entity" && s.MaxBackoff == 10*time.Minute, true)
	expect.Equal(t, "in words", l.String(), "8 at once, 20/s (burst 5)")
	expect.Equal(t, "who shares crm-api", strings.Join(cfg.LimitUsers()["crm-api"], ","), "sync-crm,push-crm")
}

// TestLimitMistakesAtOnce: every mistake of the limits is said, with its
// file, line and key, in one error.
func TestLimitMistakesAtOnce(t *testing.T) {
	_, err := Parse("l.toml", []byte(`
[[limits]]
name = "api"
rate = "20/sec"
per = "shop"

[[limits]]
name = "api"
burst = 0

[[tasks]]
name = "a"
every = "1m"
command = ["true"]
limits = ["apj", "api", "api"]
`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`l.toml:4: limits[0].rate: "20/sec": want starts per second`,
		`l.toml:5: limits[0].per: "shop": use "all"`,
		`l.toml:8: limits[1].name: duplicate limit name "api" (also limits[0])`,
		`limits[1]: give concurrency, rate or both`,
		`l.toml:9: limits[1].burst: 0: at least 1`,
		`l.toml:15: tasks[0].limits: "api" is named twice`,
		`l.toml:15: tasks[0].limits: "apj" is no [[limits]] name (did you mean "api"?)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}
