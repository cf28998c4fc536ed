package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A non-streaming client's request is non-streamed upstream when the
// policy needs no stream for it (no transforms, no first-content or gap
// deadline, no hedge), with the same answer, and failing over as ever; a
// policy that needs the stream (here the default hedge, which a rule
// that switches models brings) keeps it streamed; a streaming client's
// request is streamed either way.
func TestNonStreamingRequestNonStreamedUpstreamWhenPolicyNeedsNoStream(t *testing.T) {
	const rules = `"rules": [{"when": {"class": ["server", "network"]}, "action": "switch", "model": "backup"}]`
	for _, tc := range []struct {
		name, rules, want string
	}{
		{"no hedge", rules + `, "hedge": null`, "false"},
		{"the default hedge", rules, "true"},
		{"a gap deadline", rules + `, "hedge": null, "deadlines": {"gap": "5s"}`, "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.rules)
			r.up["primary"].play(act{chunks: []string{"Hel", "lo"}})
			cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
			require.NoError(t, err)
			require.Equal(t, "Hello", cc.Choices[0].Message.Content)
			require.Equal(t, []string{tc.want}, streamAsked(r.up["primary"]))

			r.up["primary"].play(act{status: 500})
			r.up["backup"].play(act{chunks: []string{"from backup"}})
			cc, err = r.client.Chat.Completions.New(context.Background(), params("primary"))
			require.NoError(t, err)
			require.Equal(t, "from backup", cc.Choices[0].Message.Content)
			require.Equal(t, []string{tc.want}, streamAsked(r.up["backup"]))

			r.up["primary"].reset()
			r.up["primary"].play(act{chunks: []string{"str", "eamed"}})
			got := r.stream("primary")
			require.NoError(t, got.err)
			require.Equal(t, "streamed", got.text)
			require.Equal(t, []string{"true"}, streamAsked(r.up["primary"]))
			r.healthy()
		})
	}
}
