package leaseconf

import (
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestLimitsAsEnforced: a config's limits are what the store enforces: a
// rate's count and period, the burst, the concurrency, per entity or not.
func TestLimitsAsEnforced(t *testing.T) {
	cfg, err := config.Parse("l.toml", []byte(`
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
name = "sync"
every = "15m"
command = ["true"]
limits = ["crm-api", "shop-token"]
history_ticks = 7
`))
	if err != nil {
		t.Fatal(err)
	}
	ls := Limits(cfg)
	expect.Equal(t, "limits", len(ls), 2)
	crm, shop := ls[0], ls[1]
	expect.Equal(t, "crm-api as enforced", crm.Rate == 20 && crm.Per == time.Second && crm.Burst == 5 && crm.Concurrency == 8 && !crm.PerEntity, true)
	expect.Equal(t, "shop-token as enforced", shop.PerEntity && shop.Interval() == 600*time.Millisecond, true)
	task := &cfg.Tasks[0]
	expect.Equal(t, "the registry's", TaskInfo(task).Schedule, "every 15m")
	expect.Equal(t, "the history kept", Retention(task).Ticks, 7)
}
