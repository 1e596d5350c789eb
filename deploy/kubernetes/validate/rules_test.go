package validate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestRulesServiceManifestsDecodeStrictly checks sluice-rules.yaml: the
// rules service's Deployment, Service and claim decode strictly and fit
// together (the Service selects the pods, the claim and the Secret are the
// ones mounted, the data directory is the mounted volume, the probes are
// the service's health endpoints, it runs as the image's non-root user).
func TestRulesServiceManifestsDecodeStrictly(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "sluice-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 3 {
		t.Fatalf("%d documents; want Deployment, Service, PersistentVolumeClaim", len(docs))
	}
	var dep appsv1.Deployment
	var svc corev1.Service
	var pvc corev1.PersistentVolumeClaim
	for i, v := range []any{&dep, &svc, &pvc} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), v); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
	}
	if dep.Kind != "Deployment" || svc.Kind != "Service" || pvc.Kind != "PersistentVolumeClaim" {
		t.Fatalf("kinds: %s %s %s", dep.Kind, svc.Kind, pvc.Kind)
	}
	pod := dep.Spec.Template.Spec
	if !labelsMatch(dep.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) || !labelsMatch(svc.Spec.Selector, dep.Spec.Template.Labels) {
		t.Error("the Deployment's selector or the Service's does not select the pods")
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Error("one SQLite writer: want replicas 1 and the Recreate strategy")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != 65532 {
		t.Error("the pod should run as the image's user 65532")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("probes should be /readyz and /healthz")
	}
	if m := mountOf(c, "data"); m == nil || !slices.Contains(c.Args, "--data-dir="+m.MountPath) {
		t.Error("--data-dir is not the data volume's mount")
	}
	if m := mountOf(c, "admin-token"); m == nil || !slices.Contains(c.Args, "--admin-token-file="+m.MountPath+"/token") {
		t.Error("--admin-token-file is not in the admin-token volume")
	}
	var claim, secret string
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
		if v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if claim != pvc.Name || secret != "sluice-rules-admin" {
		t.Errorf("volumes: claim %q (want %q), secret %q", claim, pvc.Name, secret)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9470 || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9470 {
		t.Error("the service port should be 9470")
	}
}
