package driver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
)

// TestNewRejectsWhatAPolicyRejects: a Match built in Go from values a
// policy file rejects (a status that is not one, an empty list, an unknown
// class) is an error at New, where the same mistake in a file is an error
// at load, instead of a rule that silently never matches.
func TestNewRejectsWhatAPolicyRejects(t *testing.T) {
	base := &cannedModel{key: "a"}
	fb := &cannedModel{key: "b"}
	tests := []struct {
		name string
		m    driver.Match
		want string
	}{
		{"status typo", driver.OnStatus(429, 4290), "4290 is not an HTTP status (100-599)"},
		{"no status", driver.OnStatus(), "no status code"},
		{"range reversed", driver.OnStatusRange(599, 500), "want 100 <= lo <= hi <= 599"},
		{"range too wide", driver.OnStatusRange(0, 599), "want 100 <= lo <= hi <= 599"},
		{"no class", driver.OnClass(), "no class"},
		{"unknown class", driver.OnClass(driver.ClassRateLimit, driver.ErrorClass(200)), "200 is not an error class"},
		{"empty substring", driver.OnMessage("quota", ""), "empty substring"},
		{"no finish", driver.OnFinish(), "no finish reason"},
		{"unknown finish", driver.OnFinish(driver.Reason(99)), "99 is not a finish reason"},
		{"inside and", driver.And(driver.Timeout(), driver.OnStatus(4290)), "4290"},
		{"inside or", driver.Or(driver.Timeout(), driver.OnStatus(4290)), "4290"},
		{"inside not", driver.Not(driver.OnStatus(4290)), "4290"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorContains(t, tt.m.Err(), tt.want)
			for _, rule := range []*driver.Rule{tt.m.Switch(fb), tt.m.Retry(), tt.m.GiveUp()} {
				r, err := driver.New(base, driver.WithRules(rule))
				require.Nil(t, r)
				require.ErrorContains(t, err, tt.want)
			}
			r, err := driver.New(base, driver.WithCooldown(driver.Cooldown{Failures: 1, For: time.Second, When: tt.m}))
			require.Nil(t, r)
			require.ErrorContains(t, err, tt.want)
		})
	}
	for _, ok := range []driver.Match{driver.OnStatus(100, 599), driver.OnStatusRange(500, 599), driver.OnClass(driver.ClassUnknown, driver.ClassPlugin),
		driver.OnFinish(driver.ReasonUnknown, driver.ReasonRefusal), driver.OnMessage("quota"), driver.And(), driver.Or()} {
		require.NoError(t, ok.Err(), "%v", ok)
		_, err := driver.New(base, driver.WithRules(ok.Switch(fb)))
		require.NoError(t, err, "%v", ok)
	}
}
