package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// kubeDir holds the manifests kubectl apply -k applies.
const kubeDir = "kubernetes"

// manifests are the Kubernetes objects of kubeDir, each decoded strictly
// into its API type.
type manifests struct {
	deployment appsv1.Deployment
	configMap  corev1.ConfigMap
	secret     corev1.Secret
	pdb        policyv1.PodDisruptionBudget
	service    corev1.Service
}

// loadManifests decodes every manifest of kubeDir.
func loadManifests(t testing.TB) *manifests {
	t.Helper()
	m := &manifests{}
	decodeStrict(t, filepath.Join(kubeDir, "deployment.yaml"), "apps/v1", "Deployment", &m.deployment)
	decodeStrict(t, filepath.Join(kubeDir, "configmap.yaml"), "v1", "ConfigMap", &m.configMap)
	decodeStrict(t, filepath.Join(kubeDir, "secret.yaml"), "v1", "Secret", &m.secret)
	decodeStrict(t, filepath.Join(kubeDir, "pdb.yaml"), "policy/v1", "PodDisruptionBudget", &m.pdb)
	decodeStrict(t, filepath.Join(kubeDir, "service.yaml"), "v1", "Service", &m.service)
	return m
}

// decodeStrict decodes the YAML file path into obj, failing on a field
// obj's type does not have (sigs.k8s.io/yaml goes through JSON with
// DisallowUnknownFields, as the API server's strict field validation
// does), on a value of the wrong type, and on an apiVersion or kind other
// than those given.
func decodeStrict(t testing.TB, path, apiVersion, kind string, obj runtime.Object) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "\n---") {
		t.Fatalf("%s: keep one object per file, so that each is decoded into its type", path)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.GroupVersion().String() != apiVersion || gvk.Kind != kind {
		t.Fatalf("%s: %s %s, want %s %s", path, gvk.GroupVersion(), gvk.Kind, apiVersion, kind)
	}
}

// TestStrictDecodingRejectsUnknownFields: the decoding the other tests
// rely on fails on a misspelt field, rather than dropping it as kubectl
// apply without strict validation may.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	bad := []byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      terminationGracePeriod: 30\n")
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(bad, &d); err == nil || !strings.Contains(err.Error(), "terminationGracePeriod") {
		t.Errorf("decoding a misspelt field: %v, want an error naming it", err)
	}
}

// TestKustomizationListsEveryManifest: kubectl apply -k applies exactly
// the manifests this test decodes, so no file is left out of either.
func TestKustomizationListsEveryManifest(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(kubeDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Labels     []struct {
			Pairs map[string]string `json:"pairs"`
		} `json:"labels"`
		Resources []string `json:"resources"`
		Images    []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(kubeDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml resources %v, want the manifests %v", got, want)
	}
	m := loadManifests(t)
	image := m.deployment.Spec.Template.Spec.Containers[0].Image
	if len(k.Images) != 1 || k.Images[0].Name != image {
		t.Errorf("kustomization.yaml images %+v, want one replacing the Deployment's %q", k.Images, image)
	}
}
