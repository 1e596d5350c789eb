// Package validate checks the example manifests in deploy/kubernetes by
// decoding each strictly into the Kubernetes API types (an unknown or
// misspelt field, or a value of the wrong type, is an error) and then
// checking what the example promises: a native sidecar, the shared socket
// volume, the key from a Secret, discovery through a headless Service.
// It is a module of its own so the main module does not depend on
// k8s.io/api. No cluster is involved: the API server's own validation and
// admission are not run.
package validate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// decode strictly decodes a manifest file into v.
func decode(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func TestManifestsDecodeStrictly(t *testing.T) {
	var dep appsv1.Deployment
	decode(t, "deployment.yaml", &dep)
	var svc corev1.Service
	decode(t, "service-peers.yaml", &svc)
	var cm corev1.ConfigMap
	decode(t, "configmap-rules.yaml", &cm)
	var sec corev1.Secret
	decode(t, "secret-gossip-key.yaml", &sec)

	if dep.Kind != "Deployment" || svc.Kind != "Service" || cm.Kind != "ConfigMap" || sec.Kind != "Secret" {
		t.Fatalf("kinds: %s %s %s %s", dep.Kind, svc.Kind, cm.Kind, sec.Kind)
	}
	pod := dep.Spec.Template.Spec
	if !labelsMatch(dep.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) || !labelsMatch(svc.Spec.Selector, dep.Spec.Template.Labels) {
		t.Error("the Deployment's selector or the Service's does not select the pods")
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 3 {
		t.Error("the example should run at least three pods")
	}

	// The native sidecar.
	if len(pod.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the sidecar alone", len(pod.InitContainers))
	}
	side := pod.InitContainers[0]
	if side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("sluiced is not a native sidecar (restartPolicy: Always)")
	}
	args := strings.Join(side.Args, " ")
	for _, want := range []string{"--socket=/run/sluice/sock/sluiced.sock", "--socket-mode=0660", "--socket-shared-volume",
		"--gossip-key-file=/etc/sluice/gossip/gossip.key", "--join=" + svc.Name + ".", "--metrics-addr=0.0.0.0:9465", "--rules=/etc/sluice/rules/rules.yaml"} {
		if !strings.Contains(args, want) {
			t.Errorf("sidecar args lack %s", want)
		}
	}
	if side.ReadinessProbe == nil || side.LivenessProbe == nil || side.StartupProbe == nil {
		t.Error("the sidecar needs startup, readiness and liveness probes")
	} else if side.ReadinessProbe.HTTPGet.Path != "/readyz" || side.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("probes should use /readyz and /healthz")
	}
	if side.Resources.Requests.Cpu().IsZero() || side.Resources.Requests.Memory().IsZero() || side.Resources.Limits.Memory().IsZero() {
		t.Error("the sidecar needs cpu and memory requests and a memory limit")
	}
	// Memory is bounded by --max-keys and GOMEMLIMIT, which must leave the
	// limit room for what the Go heap does not count (the measured flood
	// peaked 19 MB over a GOMEMLIMIT of 200MiB).
	if !strings.Contains(args, "--max-keys=") {
		t.Error("the sidecar's memory limit is sized for a --max-keys: give it")
	}
	if soft, err := goMemLimit(envOf(side)["GOMEMLIMIT"]); err != nil {
		t.Errorf("the sidecar's GOMEMLIMIT: %v", err)
	} else if limit := side.Resources.Limits.Memory().Value(); soft > limit-48<<20 || soft < limit/2 {
		t.Errorf("GOMEMLIMIT %d bytes against a memory limit of %d: want at least 48 MiB and at most half of it below", soft, limit)
	}
	sc := side.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the sidecar must run as a non-root user with a read-only root filesystem")
	}
	if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil {
		t.Fatal("the pod needs an fsGroup: the socket's group")
	}

	// The app: the socket volume read-only, the socket's path, the daemon's uid.
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the app", len(pod.Containers))
	}
	app := pod.Containers[0]
	if env := envOf(app); env["SLUICE_SOCKET"] != "/run/sluice/sock/sluiced.sock" || env["SLUICE_DAEMON_UIDS"] != "65532" {
		t.Errorf("app env %v: want SLUICE_SOCKET and SLUICE_DAEMON_UIDS=65532 (the sidecar's uid)", env)
	}
	if m := mountOf(app, "sluice-socket"); m == nil || !m.ReadOnly || m.MountPath != "/run/sluice" {
		t.Errorf("app mount of the socket volume: %+v; want /run/sluice, read-only", m)
	}
	if mountOf(app, "sluice-gossip-key") != nil {
		t.Error("the app must not mount the gossip key")
	}
	if m := mountOf(side, "sluice-socket"); m == nil || m.ReadOnly || m.MountPath != "/run/sluice" {
		t.Errorf("sidecar mount of the socket volume: %+v", m)
	}

	// The volumes.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	if v := vols["sluice-socket"]; v.EmptyDir == nil {
		t.Error("the socket volume should be an emptyDir")
	}
	if v := vols["sluice-gossip-key"]; v.Secret == nil || v.Secret.SecretName != sec.Name {
		t.Error("the gossip key should come from the Secret")
	}
	if v := vols["sluice-rules"]; v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || slices.ContainsFunc(side.VolumeMounts, func(m corev1.VolumeMount) bool { return m.SubPath != "" }) {
		t.Error("the rules should come from the ConfigMap, mounted as a directory (subPath mounts are never updated)")
	}
	if _, ok := sec.StringData["gossip.key"]; !ok {
		t.Error("the Secret should hold gossip.key")
	}
	if _, ok := cm.Data["rules.yaml"]; !ok {
		t.Error("the ConfigMap should hold rules.yaml")
	}

	// Discovery: headless, every pod listed from the start.
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Error("the peers Service must be headless and publish not-ready addresses")
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 15 {
		t.Error("the grace period should leave time for the app to drain and sluiced to leave")
	}
	if dep.Spec.Template.Annotations["prometheus.io/port"] != "9465" {
		t.Error("the metrics port should be annotated for Prometheus")
	}
}

// The rules in the ConfigMap are YAML with a rules: mapping here; the main
// module's TestShipKubernetesExampleRulesAreValid parses them with the
// daemon's own parser.
func TestConfigMapRulesAreYAML(t *testing.T) {
	var cm corev1.ConfigMap
	decode(t, "configmap-rules.yaml", &cm)
	var rules struct {
		Rules map[string]any `json:"rules"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["rules.yaml"]), &rules); err != nil || len(rules.Rules) == 0 {
		t.Fatalf("rules.yaml in the ConfigMap: %v %+v", err, rules)
	}
	if !bytes.Contains([]byte(cm.Data["rules.yaml"]), []byte("rate:")) {
		t.Error("no rate in the rules")
	}
}

func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// goMemLimit is a GOMEMLIMIT value in bytes (a number with an optional
// B, KiB, MiB, GiB or TiB suffix).
func goMemLimit(v string) (int64, error) {
	if v == "" {
		return 0, errors.New("not set")
	}
	num := strings.TrimSuffix(v, "B")
	if num != v && strings.HasSuffix(num, "i") {
		num = strings.TrimSuffix(num, "i") + "i" // KiB -> Ki, the quantity's spelling
	}
	q, err := resource.ParseQuantity(num)
	if err != nil {
		return 0, fmt.Errorf("parse %q: %w", v, err)
	}
	return q.Value(), nil
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

func mountOf(c corev1.Container, volume string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == volume {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}
