package gateway

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/oci"
	"github.com/retryhost/retryhost/policy"
)

// ociRig is a gateway whose policy's transform is an "oci" plugin following
// a tag on a registry on loopback.
type ociRig struct {
	*rig
	reg      *httptest.Server
	c        *oci.Client
	tag      string
	wasm     map[string][]byte
	resolves atomic.Int64 // requests for the tag's manifest
}

func newOCIRig(t *testing.T, opts ...Option) *ociRig {
	t.Helper()
	o := &ociRig{wasm: map[string][]byte{}}
	h := ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0)))
	o.reg = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut && strings.HasSuffix(r.URL.Path, "/manifests/stable") {
			o.resolves.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(o.reg.Close)
	o.tag = strings.TrimPrefix(o.reg.URL, "http://") + "/team/xf:stable"
	var err error
	o.c, err = oci.New(oci.WithPlainHTTP(), oci.WithAllowTags(), oci.WithCacheDir(t.TempDir()),
		oci.WithCredentialsFile(filepath.Join(t.TempDir(), "none.json")),
		oci.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	for _, n := range []string{"upper", "refusal"} {
		o.wasm[n], err = os.ReadFile(filepath.Join("..", "host", "testdata", n+".wasm"))
		require.NoError(t, err)
	}
	o.push(t, "upper")

	up := newUpstream("one")
	t.Cleanup(up.srv.Close)
	pol := `{"models": [{"name": "m", "provider": "openai", "model": "m", "base_url": "` + up.url() + `", "api_key_env": "K"}],
		"transforms": [{"plugin": {"oci": "` + o.tag + `", "follow_tag": true}}]}`
	logs := &testkit.LogBuffer{}
	gw, err := New(context.Background(), Bytes("p.json", []byte(pol), policy.Options{
		Getenv: func(string) string { return "k" }, OCI: o.c.Source,
	}), append([]Option{WithLogger(newJSONLogger(logs))}, opts...)...)
	require.NoError(t, err)
	o.rig = &rig{t: t, gw: gw, up: map[string]*upstream{"one": up}, logs: logs}
	o.srv = newTestServer(t, gw)
	o.hc = &http.Client{Transport: &http.Transport{}}
	o.client = o.newClient("")
	t.Cleanup(func() {
		o.hc.CloseIdleConnections()
		require.NoError(t, gw.Close(context.Background()))
	})
	return o
}

func (o *ociRig) push(t *testing.T, name string) {
	t.Helper()
	_, err := o.c.Push(context.Background(), o.tag, o.wasm[name])
	require.NoError(t, err)
}

// TestPluginPoll_SwapsAFollowedTag: v1 (upper-cases the text) is pushed
// under a tag the policy follows; a stream starts on it and is held; v2 (a
// refusal detector: text passes unchanged) is pushed under the same tag;
// within the poll the gateway serves v2 to new requests, and the held
// stream finishes on v1.
func TestPluginPoll_SwapsAFollowedTag(t *testing.T) {
	o := newOCIRig(t, WithPluginPoll(5*time.Millisecond))
	up := o.up["one"]
	hold := make(chan struct{})
	up.play(act{chunks: []string{"from", " v1"}, afterText: hold}, act{chunks: []string{"from v2"}})
	done := make(chan streamed, 1)
	go func() { done <- o.stream("m") }()
	require.Eventually(t, func() bool { return len(up.requests()) == 1 }, 10*time.Second, time.Millisecond)

	o.push(t, "refusal")
	require.Eventually(t, func() bool {
		got := o.stream("m")
		require.NoError(t, got.err)
		return got.text == "from v2"
	}, 20*time.Second, 10*time.Millisecond, "the new version behind the tag is served")
	require.Contains(t, o.logs.String(), "a followed plugin has a new version")

	close(hold)
	old := <-done
	require.NoError(t, old.err)
	require.Equal(t, "FROM V1", old.text, "the stream in flight finished on the old version")

	// The registry goes down: the current version keeps serving.
	o.reg.Close()
	require.Eventually(t, func() bool { return strings.Contains(o.logs.String(), "plugin poll failed") }, 10*time.Second, 5*time.Millisecond)
	got := o.stream("m")
	require.NoError(t, got.err)
	require.Equal(t, "from v2", got.text)
}

// A version behind the tag that does not load is rejected once, and not
// reloaded on every poll; the current version keeps serving.
func TestPluginPoll_BrokenVersionIsNotRetriedEveryPoll(t *testing.T) {
	o := newOCIRig(t, WithPluginPoll(2*time.Millisecond))
	o.wasm["broken"] = []byte("\x00asm\x01\x00\x00\x00garbage")
	o.push(t, "broken")
	require.Eventually(t, func() bool { return strings.Contains(o.logs.String(), "policy reload rejected") },
		10*time.Second, 2*time.Millisecond)
	// Each poll and each reload asks for the tag once: wait for enough
	// polls that a reload on every poll would show.
	from := o.resolves.Load()
	require.Eventually(t, func() bool { return o.resolves.Load()-from > 4*pluginRetryPolls }, 20*time.Second, 2*time.Millisecond)
	// The rejections first, then the polls: the poller runs on meanwhile,
	// and a rejection counted after the polls were could exceed them.
	rejected := int64(strings.Count(o.logs.String(), "policy reload rejected"))
	polls := o.resolves.Load() - from
	require.LessOrEqual(t, rejected, polls/pluginRetryPolls+2,
		"a broken version is retried every %d polls, not on every one (%d polls)", pluginRetryPolls, polls)
	require.Greater(t, rejected, int64(1), "and it is retried")
	o.up["one"].play(act{chunks: []string{"still v1"}})
	got := o.stream("m")
	require.NoError(t, got.err)
	require.Equal(t, "STILL V1", got.text)
}

// A policy that follows no tag starts no poll (goleak would see it after
// Close otherwise; here: before Close), and WithPluginPoll refuses 0.
func TestPluginPoll_OnlyForFollowedTags(t *testing.T) {
	r := newRig(t, "")
	r.gw.poller.mu.Lock()
	started := r.gw.poller.done != nil
	r.gw.poller.mu.Unlock()
	require.False(t, started)
	_, err := New(context.Background(), Bytes("p.json", []byte(`{}`), policy.Options{}), WithPluginPoll(0))
	require.ErrorContains(t, err, "plugin poll interval must be positive")
}
