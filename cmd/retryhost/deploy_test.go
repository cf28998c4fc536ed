package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// These tests hold the files in deploy/ and examples/policies/ to what
// serve really accepts, so that a renamed flag or a policy field breaks a
// test here before it breaks someone's rollout.

const deployDir = "../../deploy"

// k8sObject is the part of a Kubernetes manifest the checks read.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec yaml.Node         `yaml:"spec"`
	Data map[string]string `yaml:"data"`
}

func readManifest(t *testing.T, name string) k8sObject {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", name))
	require.NoError(t, err)
	var o k8sObject
	require.NoError(t, yaml.Unmarshal(b, &o), name)
	return o
}

// deploymentSpec is what the checks read of the Deployment.
type deploymentSpec struct {
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Grace      int `yaml:"terminationGracePeriodSeconds"`
			Containers []struct {
				Image string   `yaml:"image"`
				Args  []string `yaml:"args"`
				Ports []struct {
					Name string `yaml:"name"`
					Port int    `yaml:"containerPort"`
				} `yaml:"ports"`
				Readiness probe `yaml:"readinessProbe"`
				Liveness  probe `yaml:"livenessProbe"`
				Mounts    []struct {
					Name string `yaml:"name"`
					Path string `yaml:"mountPath"`
				} `yaml:"volumeMounts"`
			} `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

func readDeployment(t *testing.T) deploymentSpec {
	t.Helper()
	o := readManifest(t, "deployment.yaml")
	require.Equal(t, "Deployment", o.Kind)
	var d deploymentSpec
	require.NoError(t, o.Spec.Decode(&d))
	require.Len(t, d.Template.Spec.Containers, 1)
	return d
}

// flagValue returns the value of --name=value or --name value in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// TestDeploy_KubernetesManifestsHangTogether: the selectors select the
// pods, the kustomization lists every manifest, the probes name the
// container's port and serve's health paths, and the grace period covers
// the shutdown delay plus the drain, so Kubernetes never kills a draining
// pod.
func TestDeploy_KubernetesManifestsHangTogether(t *testing.T) {
	d := readDeployment(t)
	pods := d.Template.Metadata.Labels
	require.NotEmpty(t, pods)
	require.Equal(t, d.Selector.MatchLabels, pods)
	c := d.Template.Spec.Containers[0]

	var svc struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Target string `yaml:"targetPort"`
		} `yaml:"ports"`
	}
	require.NoError(t, specOf(t, "service.yaml").Decode(&svc))
	require.Equal(t, pods, svc.Selector)
	require.Len(t, c.Ports, 1)
	require.Equal(t, c.Ports[0].Name, svc.Ports[0].Target)

	var pdb struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	}
	require.NoError(t, specOf(t, "poddisruptionbudget.yaml").Decode(&pdb))
	require.Equal(t, pods, pdb.Selector.MatchLabels)

	var hpa struct {
		Target struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
	}
	require.NoError(t, specOf(t, "hpa.yaml").Decode(&hpa))
	require.Equal(t, "Deployment", hpa.Target.Kind)
	require.Equal(t, readManifest(t, "deployment.yaml").Metadata.Name, hpa.Target.Name)

	require.Equal(t, "/readyz", c.Readiness.HTTPGet.Path)
	require.Equal(t, "/healthz", c.Liveness.HTTPGet.Path)
	require.Equal(t, c.Ports[0].Name, c.Readiness.HTTPGet.Port)
	require.Equal(t, c.Ports[0].Name, c.Liveness.HTTPGet.Port)

	addr, ok := flagValue(c.Args, "addr")
	require.True(t, ok, "serve listens on loopback without --addr: the pod would be unreachable")
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(c.Ports[0].Port), port)

	var wait time.Duration
	for _, f := range []string{"shutdown-delay", "drain"} {
		v, ok := flagValue(c.Args, f)
		require.True(t, ok, f)
		dur, err := time.ParseDuration(v)
		require.NoError(t, err)
		wait += dur
	}
	require.Greater(t, time.Duration(d.Template.Spec.Grace)*time.Second, wait,
		"terminationGracePeriodSeconds must outlast --shutdown-delay plus --drain")

	var k struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &k))
	files, err := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	require.NoError(t, err)
	var want []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			want = append(want, filepath.Base(f))
		}
	}
	slices.Sort(k.Resources)
	require.Equal(t, want, k.Resources)
}

// TestDeploy_ExamplePoliciesAreValid: every policy shipped for copying, and
// the one in the ConfigMap, passes the checks serve runs when it loads it.
func TestDeploy_ExamplePoliciesAreValid(t *testing.T) {
	files, err := filepath.Glob("../../examples/policies/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	cm := readManifest(t, "configmap.yaml")
	require.Contains(t, cm.Data, "policy.yaml")
	cmFile := filepath.Join(t.TempDir(), "configmap-policy.yaml")
	require.NoError(t, os.WriteFile(cmFile, []byte(cm.Data["policy.yaml"]), 0o600))
	for _, f := range append(files, cmFile) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			require.NoError(t, policy.ValidateFile(context.Background(), f, policy.Options{Builtin: plugins.Module}))
		})
	}
}

// TestDeploy_ComposeRunsServeWithItsFlags: the compose file's command is
// serve's, with flags serve knows, and mounts a policy that exists.
func TestDeploy_ComposeRunsServeWithItsFlags(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "compose.yaml"))
	require.NoError(t, err)
	var c struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
			Build   struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &c))
	gateways := 0
	for name, s := range c.Services {
		if s.Build.Dockerfile == "" {
			continue
		}
		gateways++
		require.FileExists(t, filepath.Join(deployDir, s.Build.Context, s.Build.Dockerfile), name)
		require.Equal(t, "serve", s.Command[0], name)
		for _, v := range s.Volumes {
			host, _, _ := strings.Cut(v, ":")
			require.FileExists(t, filepath.Join(deployDir, host), name)
		}
		checkServeAccepts(t, s.Command[1:])
	}
	require.GreaterOrEqual(t, gateways, 2, "a fleet of at least two replicas")
}

// checkServeAccepts fails unless every flag in args is one of serve's.
func checkServeAccepts(t *testing.T, args []string) {
	t.Helper()
	code, stdout, stderr := run(t, "serve", "-h")
	require.Equal(t, exitOK, code)
	help := stdout + stderr
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		require.Contains(t, help, "--"+name+" ", "serve has no flag --%s", name)
	}
}

// kubeletMount lays out dir as the kubelet mounts a ConfigMap: the file is
// a symlink through ..data to a timestamped directory, and an update
// writes a new directory and swaps ..data in one rename.
func kubeletMount(t *testing.T, dir, file, data string) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	require.NoError(t, os.Mkdir(ts, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ts, file), []byte(data), 0o644))
	tmp := filepath.Join(dir, "..data_tmp")
	require.NoError(t, os.Symlink(filepath.Base(ts), tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	link := filepath.Join(dir, file)
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		require.NoError(t, os.Symlink(filepath.Join("..data", file), link))
	}
}

// TestDeploy_ServeRunsWithTheDeploymentsArgs starts the real binary with
// the Deployment's arguments (the ConfigMap's policy mounted as the kubelet
// mounts it, its models pointed at a loopback upstream), probes it where
// Kubernetes does, edits the ConfigMap the kubelet's way and sees the
// policy reload, then sends SIGTERM and sees /readyz turn 503 during the
// shutdown delay and the process exit 0.
func TestDeploy_ServeRunsWithTheDeploymentsArgs(t *testing.T) {
	d := readDeployment(t)
	c := d.Template.Spec.Containers[0]
	polPath, ok := flagValue(c.Args, "policy")
	require.True(t, ok)
	up := newHeldUpstream(t)
	up.free()

	dir := t.TempDir()
	cm := readManifest(t, "configmap.yaml").Data["policy.yaml"]
	local := func(policy string) string {
		var spec map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(policy), &spec))
		for _, m := range spec["models"].([]any) {
			m := m.(map[string]any)
			m["base_url"] = up.srv.URL + "/v1"
			m["api_key_env"] = "UPSTREAM_KEY"
		}
		b, err := json.Marshal(spec)
		require.NoError(t, err)
		return string(b)
	}
	kubeletMount(t, dir, filepath.Base(polPath), local(cm))

	args := slices.Clone(c.Args[1:])
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--addr"):
			args[i] = "--addr=127.0.0.1:0"
		case strings.HasPrefix(a, "--policy"):
			args[i] = "--policy=" + filepath.Join(dir, filepath.Base(polPath))
		case strings.HasPrefix(a, "--shutdown-delay"):
			args[i] = "--shutdown-delay=2s" // long enough to see /readyz at 503
		}
	}
	require.Equal(t, "serve", c.Args[0])
	b := startServeBinary(t, args...)
	for _, p := range []string{c.Readiness.HTTPGet.Path, c.Liveness.HTTPGet.Path} {
		resp, err := http.Get(b.base() + p)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
	}
	cl := oai.NewClient(option.WithBaseURL(b.base()+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	require.Equal(t, []string{"claude", "openai"}, modelIDs(t, cl))
	var hpa struct {
		Metrics []struct {
			Pods struct {
				Metric struct {
					Name string `yaml:"name"`
				} `yaml:"metric"`
			} `yaml:"pods"`
		} `yaml:"metrics"`
	}
	require.NoError(t, specOf(t, "hpa.yaml").Decode(&hpa))
	require.Len(t, hpa.Metrics, 1)
	require.Contains(t, b.metrics(), "\n"+hpa.Metrics[0].Pods.Metric.Name+" ", "the autoscaler's metric is one serve exports")
	st, _ := openStream(t, cl, "openai")
	text, _, err := st.rest()
	require.NoError(t, err)
	require.Equal(t, "first second", text)

	// The kubelet's update: a policy with one model, renamed.
	var spec map[string]any
	require.NoError(t, json.Unmarshal([]byte(local(cm)), &spec))
	first := spec["models"].([]any)[0].(map[string]any)
	first["name"] = "edited"
	spec["models"] = []any{first}
	delete(spec, "rules")
	edited, err := json.Marshal(spec)
	require.NoError(t, err)
	kubeletMount(t, dir, filepath.Base(polPath), string(edited))
	b.waitLog(`policy reloaded`)
	require.Equal(t, []string{"edited"}, modelIDs(t, cl), "the routes of the edited policy")

	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		resp, err := http.Get(b.base() + c.Readiness.HTTPGet.Path)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}, 30*time.Second, 10*time.Millisecond, "/readyz during the shutdown delay")
	require.Equal(t, exitOK, b.waitExit(), b.stderr.String())
}

// TestDeploy_ImageRunsAsNonRootFromScratch builds the Dockerfile's final
// stage with podman, from the binary the tests built (the build stage
// needs a Go image from a registry; the final stage is what ships), and
// checks what an operator relies on: a non-root user, the entrypoint and
// default command, the cache directory, the port, a small image; then runs
// it and asks it for a chat completion from its demo policy.
func TestDeploy_ImageRunsAsNonRootFromScratch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("podman is missing: .ci/run installs it")
		}
		t.Skip("podman is not installed")
	}
	if out, err := exec.Command("podman", "info").CombinedOutput(); err != nil {
		t.Skipf("podman cannot run containers on this machine: %v: %s", err, out)
	}
	bin, err := buildOnce()
	require.NoError(t, err)
	df, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	require.NoError(t, err)
	require.Contains(t, string(df), "go build -trimpath -ldflags='-s -w'",
		"the image's binary is built with buildOnce's flags, so its size here is the size users pull")
	final := string(df[strings.LastIndex(string(df), "\nFROM ")+1:])

	// A stand-in for the build stage with the files the final stage copies.
	ctxDir := t.TempDir()
	for _, p := range []string{"out/cache", "etc/ssl/certs"} {
		require.NoError(t, os.MkdirAll(filepath.Join(ctxDir, "rootfs", p), 0o755))
	}
	exe, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "rootfs/out/retryhost"), exe, 0o755))
	certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		certs = []byte("# no CA bundle on the test machine\n")
	}
	require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "rootfs/etc/ssl/certs/ca-certificates.crt"), certs, 0o644))
	containerfile := "FROM scratch AS build\nCOPY rootfs/ /\n" + final
	require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "Containerfile"), []byte(containerfile), 0o644))

	tag := fmt.Sprintf("localhost/retryhost-test:%d", time.Now().UnixNano())
	podman := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		cmd := exec.Command("podman", args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		require.NoError(t, cmd.Run(), "podman %v: %s", args, errb.String())
		return out.String()
	}
	podman("build", "-q", "-t", tag, "-f", filepath.Join(ctxDir, "Containerfile"), ctxDir)
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "-f", tag).Run() })

	var img []struct {
		Size   int64 `json:"Size"`
		Config struct {
			User         string              `json:"User"`
			Entrypoint   []string            `json:"Entrypoint"`
			Cmd          []string            `json:"Cmd"`
			Env          []string            `json:"Env"`
			ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		} `json:"Config"`
	}
	require.NoError(t, json.Unmarshal([]byte(podman("image", "inspect", tag)), &img))
	require.Len(t, img, 1)
	cfg := img[0].Config
	require.Equal(t, "65532:65532", cfg.User)
	require.Equal(t, []string{"/retryhost"}, cfg.Entrypoint)
	require.Equal(t, []string{"serve", "--addr", "0.0.0.0:8080"}, cfg.Cmd)
	require.Contains(t, cfg.Env, "XDG_CACHE_HOME=/cache")
	require.Contains(t, cfg.ExposedPorts, "8080/tcp")
	require.Less(t, img[0].Size, int64(128<<20), "the binary and certificates, nothing else")
	checkServeAccepts(t, cfg.Cmd[1:])

	// Run it: the demo policy, on the host's loopback.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	name := strings.ReplaceAll(strings.TrimPrefix(tag, "localhost/"), ":", "-")
	out, err := exec.Command("podman", "run", "-d", "--rm", "--name", name, "--network", "host",
		"--read-only", "--tmpfs", "/cache:rw,mode=1777", tag, "serve", "--addr", addr).CombinedOutput()
	if err != nil {
		t.Skipf("podman cannot start containers on this machine: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("podman", "rm", "-f", "-t", "0", name).Run() })
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 50*time.Millisecond, "the container never became ready: %s", podmanLogs(name))
	cl := oai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	resp, err := cl.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model:    "alpha",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hello")},
	})
	require.NoError(t, err, podmanLogs(name))
	require.NotEmpty(t, resp.Choices[0].Message.Content)
	require.NoError(t, exec.Command("podman", "stop", "-t", "30", name).Run())
}

func podmanLogs(name string) string {
	out, _ := exec.Command("podman", "logs", name).CombinedOutput()
	return string(out)
}

func specOf(t *testing.T, name string) *yaml.Node {
	t.Helper()
	o := readManifest(t, name)
	return &o.Spec
}

// modelIDs lists the routes a gateway serves, sorted.
func modelIDs(t *testing.T, cl oai.Client) []string {
	t.Helper()
	ms, err := cl.Models.List(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, m := range ms.Data {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}
