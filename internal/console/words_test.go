package console

import (
	"testing"
	"time"

	"github.com/tickd/tickd/config"
)

func TestScheduleInWords(t *testing.T) {
	for _, c := range []struct {
		cron  string
		every time.Duration
		want  string
	}{
		{every: 15 * time.Minute, want: "every 15 minutes"},
		{every: time.Hour, want: "every hour"},
		{every: 48 * time.Hour, want: "every 2 days"},
		{every: 90 * time.Second, want: "every 90 seconds"},
		{cron: "@hourly", want: "every hour, on the hour"},
		{cron: "@midnight", want: "every day at midnight"},
		{cron: "@annually", want: "every 1 January at midnight"},
		{cron: "30 2 * * *", want: "every day at 02:30"},
		{cron: "0 9 * * 1-5", want: "every weekday at 09:00"},
		{cron: "0 9 * * 6", want: "at 09:00 on days of the week 6"},
		{cron: "7 * * * *", want: "every hour at minute 7"},
		{cron: "*/5 * * * *", want: "every 5 minutes"},
		{cron: "*/5 3 * * *", want: "as the cron expression says (see the next ticks)"},
		{cron: "0 9 1 * *", want: "as the cron expression says (see the next ticks)"},
		{cron: "7 * * * 1", want: "as the cron expression says (see the next ticks)"},
	} {
		if got := words(&config.Task{Cron: c.cron, Every: c.every}); got != c.want {
			t.Errorf("words(cron %q, every %v) = %q, want %q", c.cron, c.every, got, c.want)
		}
	}
}
