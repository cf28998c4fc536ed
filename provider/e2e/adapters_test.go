package e2e_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

// onRefusalSwitch wraps first with a rule that switches to second on a
// refusal only: any other error would end the request.
func onRefusalSwitch(t *testing.T, first, second driver.Model, rec *attempts) *driver.RetryableModel {
	t.Helper()
	r, err := driver.New(first, driver.WithObserver(rec),
		driver.WithRules(driver.OnClass(abi.ClassRefusal).Switch(second)))
	require.NoError(t, err)
	rm, err := driver.NewRetryableModel(r)
	require.NoError(t, err)
	return rm
}

// Issue 12 item 7: Anthropic declares a refusal after an empty text or
// thinking block. Nothing was said, so OnClass(ClassRefusal).Switch runs
// and the caller gets the second model's answer, not an empty "success"
// finished with ReasonRefusal.
func TestAnthropicRefusalAfterEmptyBlockFailsOver(t *testing.T) {
	for _, name := range []string{"refusal_stop_after_empty_text", "refusal_stop_after_empty_thinking"} {
		t.Run(name, func(t *testing.T) {
			first := wiretest.Serve(t, transcript(t, "anthropic", name))
			answer := transcript(t, "openai", "text")
			second := wiretest.Serve(t, answer)
			rec := &attempts{}
			rm := onRefusalSwitch(t, anthropicModel(t, first), openaiModel(t, second.URL, second.Client()), rec)

			s, err := rm.Stream(t.Context(), request())
			require.NoError(t, err)
			text, starts, err := read(t, s)
			require.NoError(t, err)
			require.Equal(t, openaiText(t, answer), text)
			require.Equal(t, 1, starts)
			ends := rec.get()
			require.Len(t, ends, 2)
			require.Equal(t, abi.ClassRefusal, ends[0].Class)
			var re *driver.RefusalError
			require.ErrorAs(t, ends[0].Err, &re)
			require.Len(t, second.Requests(), 1)
		})
	}
	t.Run("generate", func(t *testing.T) {
		first := wiretest.Serve(t, transcript(t, "anthropic", "generate_refusal_after_empty_blocks"))
		second := wiretest.Serve(t, transcript(t, "openai", "generate_text"))
		rec := &attempts{}
		rm := onRefusalSwitch(t, anthropicModel(t, first), openaiModel(t, second.URL, second.Client()), rec)
		resp, err := rm.Generate(t.Context(), request())
		require.NoError(t, err)
		require.Equal(t, "Hello! How can I help you today?", resp.Text())
		require.Equal(t, abi.ReasonStop, resp.Finish.Unified)
		ends := rec.get()
		require.Len(t, ends, 2)
		require.Equal(t, abi.ClassRefusal, ends[0].Class)
	})
}
