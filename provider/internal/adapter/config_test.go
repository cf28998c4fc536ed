package adapter

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNames(t *testing.T) {
	tests := []struct {
		name             string
		id, prov         string
		provSet          bool
		key              string
		keySet           bool
		wantProv, wantKy string
		wantErr          string
	}{
		{name: "defaults", id: "m-1", wantProv: "gemini", wantKy: "gemini/m-1"},
		{name: "a provider name of its own", id: "m-1", prov: "vertex", provSet: true, wantProv: "vertex", wantKy: "vertex/m-1"},
		{name: "a key of its own", id: "m-1", key: "fast", keySet: true, wantProv: "gemini", wantKy: "fast"},
		{name: "blank id", id: " ", wantErr: "gemini: empty model id"},
		{name: "blank provider name", id: "m-1", prov: " ", provSet: true, wantErr: "gemini: empty provider name"},
		{name: "blank key", id: "m-1", key: "", keySet: true, wantErr: "gemini: empty model key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prov, key, err := Names("gemini", tc.id, tc.prov, tc.provSet, tc.key, tc.keySet)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantProv, prov)
			require.Equal(t, tc.wantKy, key)
		})
	}
}

func TestHeaders(t *testing.T) {
	hdr, err := Headers("bedrock", [][2]string{{"X-Team", "search"}, {"x-team", "ads"}, {"X-Env", "prod"}})
	require.NoError(t, err)
	require.Equal(t, http.Header{"X-Team": {"search", "ads"}, "X-Env": {"prod"}}, hdr)

	hdr, err = Headers("bedrock", nil)
	require.NoError(t, err)
	require.NotNil(t, hdr)
	require.Empty(t, hdr)

	_, err = Headers("bedrock", [][2]string{{"X-Ok", "1"}, {"a b", "c"}})
	require.EqualError(t, err, `bedrock: "a b" is not a valid header name`)
}
