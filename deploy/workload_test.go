package deploy

import (
	"maps"
	"net"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/throttler/throttler/internal/app"
)

// shutdownMargin is what the grace period must leave after
// THROTTLER_SHUTDOWN_TIMEOUT: cancelled handlers returning, the
// hand-back, the last acks and the close (docs/operations.md, "Shutdown").
const shutdownMargin = 5 * time.Second

// settings returns the worker's settings as a pod of the Deployment gets
// them, the ConfigMap's and the Secret's, read and checked by the worker's
// own rules: what the workers would refuse at start-up fails here.
func settings(t *testing.T, m *manifests) *app.Settings {
	t.Helper()
	vars := maps.Clone(m.configMap.Data)
	maps.Copy(vars, m.secret.StringData)
	s, err := app.LoadSettingsFrom(vars)
	if err != nil {
		t.Fatalf("the ConfigMap's and Secret's settings: %v", err)
	}
	return s
}

// container returns the Deployment's throttler container.
func container(t *testing.T, m *manifests) *corev1.Container {
	t.Helper()
	cs := m.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "throttler" {
		t.Fatalf("the Deployment's containers: %d, want one named throttler", len(cs))
	}
	return &cs[0]
}

// TestDeploymentReadsTheConfigMapAndSecret: the container takes every
// variable from the ConfigMap and the Secret of this directory, and those
// make a configuration the worker accepts.
func TestDeploymentReadsTheConfigMapAndSecret(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	c := container(t, m)
	var cms, secrets []string
	for _, e := range c.EnvFrom {
		if e.ConfigMapRef != nil {
			cms = append(cms, e.ConfigMapRef.Name)
		}
		if e.SecretRef != nil {
			secrets = append(secrets, e.SecretRef.Name)
		}
	}
	if len(cms) != 1 || cms[0] != m.configMap.Name || len(secrets) != 1 || secrets[0] != m.secret.Name {
		t.Errorf("envFrom ConfigMaps %v and Secrets %v, want %s and %s", cms, secrets, m.configMap.Name, m.secret.Name)
	}
	if len(c.Env) > 0 {
		t.Errorf("env %v: keep the settings in the ConfigMap, where operators look", c.Env)
	}
	for k := range m.configMap.Data {
		if _, secret := m.secret.StringData[k]; secret {
			t.Errorf("%s is in both the ConfigMap and the Secret", k)
		}
	}
	for _, k := range []string{"NATS_URL", "REDIS_URL"} {
		if _, ok := m.secret.StringData[k]; !ok {
			t.Errorf("the Secret lacks %s", k)
		}
		if _, ok := m.configMap.Data[k]; ok {
			t.Errorf("%s, which may carry a password, is in the ConfigMap", k)
		}
	}
	settings(t, m)
}

// TestGracePeriodCoversTheShutdownTimeout: Kubernetes kills a pod at the
// end of its grace period; the worker needs THROTTLER_SHUTDOWN_TIMEOUT
// (the ConfigMap's, else the default) plus the margin to hand its jobs
// back.
func TestGracePeriodCoversTheShutdownTimeout(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	s := settings(t, m)
	grace := m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil {
		t.Fatal("terminationGracePeriodSeconds unset: set it with THROTTLER_SHUTDOWN_TIMEOUT in view")
	}
	if got, want := time.Duration(*grace)*time.Second, s.ShutdownTimeout+shutdownMargin; got < want {
		t.Errorf("terminationGracePeriodSeconds %v < THROTTLER_SHUTDOWN_TIMEOUT %v + %v", got, s.ShutdownTimeout, shutdownMargin)
	}
}

// TestProbesAndMetricsPort: the probes ask /healthz and /readyz on the
// port the worker serves (THROTTLER_METRICS_ADDR), and the Service
// scrapes that port.
func TestProbesAndMetricsPort(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	s := settings(t, m)
	_, portStr, err := net.SplitHostPort(s.MetricsAddr)
	if err != nil {
		t.Fatalf("THROTTLER_METRICS_ADDR %q: %v", s.MetricsAddr, err)
	}
	port, _ := strconv.Atoi(portStr)
	c := container(t, m)
	var named string
	for _, p := range c.Ports {
		if int(p.ContainerPort) == port {
			named = p.Name
		}
	}
	if named == "" {
		t.Fatalf("no container port %d (THROTTLER_METRICS_ADDR) among %v", port, c.Ports)
	}
	probeOK := func(what string, p *corev1.Probe, path string) {
		t.Helper()
		switch {
		case p == nil || p.HTTPGet == nil:
			t.Errorf("%s probe: want an HTTP GET of %s", what, path)
		case p.HTTPGet.Path != path:
			t.Errorf("%s probe asks %s, want %s", what, p.HTTPGet.Path, path)
		case p.HTTPGet.Port != intstr.FromString(named) && p.HTTPGet.Port != intstr.FromInt32(int32(port)):
			t.Errorf("%s probe on port %s, want %s (%d)", what, p.HTTPGet.Port.String(), named, port)
		}
	}
	probeOK("liveness", c.LivenessProbe, "/healthz")
	probeOK("readiness", c.ReadinessProbe, "/readyz")

	sp := m.service.Spec.Ports
	if len(sp) != 1 || int(sp[0].Port) != port || (sp[0].TargetPort != intstr.FromString(named) && sp[0].TargetPort.IntValue() != port) {
		t.Errorf("Service ports %+v, want %d to the container's %s", sp, port, named)
	}
	if got := m.service.Annotations["prometheus.io/port"]; got != portStr {
		t.Errorf("prometheus.io/port %q, want %s", got, portStr)
	}
	if got := m.service.Annotations["prometheus.io/path"]; got != "/metrics" {
		t.Errorf("prometheus.io/path %q, want /metrics", got)
	}
}

// TestSecurityContext: non-root, no privilege escalation, no
// capabilities, a read-only root filesystem and the runtime's seccomp
// profile: the restricted Pod Security Standard.
func TestSecurityContext(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	pod := m.deployment.Spec.Template.Spec.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot {
		t.Error("the pod must set runAsNonRoot")
	}
	if pod == nil || pod.RunAsUser == nil || *pod.RunAsUser == 0 {
		t.Error("the pod must name a numeric non-root user, which runAsNonRoot can check")
	}
	if pod == nil || pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod must use the RuntimeDefault seccomp profile")
	}
	sc := container(t, m).SecurityContext
	switch {
	case sc == nil:
		t.Fatal("the container has no securityContext")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation must be false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem must be true")
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v, want all dropped and none added", sc.Capabilities)
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("the container must not be privileged")
	}
	if m.deployment.Spec.Template.Spec.AutomountServiceAccountToken == nil || *m.deployment.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("the worker never calls the Kubernetes API: mount no service account token")
	}
}

// TestResources: CPU and memory requested, memory limited.
func TestResources(t *testing.T) {
	t.Parallel()
	r := container(t, loadManifests(t)).Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := r.Requests[name]; !ok || q.IsZero() {
			t.Errorf("no %s request", name)
		}
	}
	lim, ok := r.Limits[corev1.ResourceMemory]
	if !ok || lim.Cmp(r.Requests[corev1.ResourceMemory]) < 0 {
		t.Errorf("memory limit %v, want one at least the request", lim.String())
	}
}

// TestSelectorsMatchThePods: the Deployment, the PodDisruptionBudget and
// the Service all select the Deployment's pods.
func TestSelectorsMatchThePods(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	pod := labels.Set(m.deployment.Spec.Template.Labels)
	check := func(what string, ls *metav1.LabelSelector) {
		t.Helper()
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil || ls == nil || sel.Empty() || !sel.Matches(pod) {
			t.Errorf("%s selector %v (%v) does not select the pods' labels %v", what, ls, err, pod)
		}
	}
	check("Deployment", m.deployment.Spec.Selector)
	check("PodDisruptionBudget", m.pdb.Spec.Selector)
	check("Service", &metav1.LabelSelector{MatchLabels: m.service.Spec.Selector})
	if m.pdb.Spec.MaxUnavailable == nil && m.pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
}
