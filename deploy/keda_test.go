package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/yaml"
)

// scaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) the
// manifest uses. KEDA's API module is not imported for one CRD; decoding
// with DisallowUnknownFields into this struct catches a misspelt field
// as long as every field used is listed here.
type scaledObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int `json:"minReplicaCount"`
		MaxReplicaCount *int `json:"maxReplicaCount"`
		PollingInterval int  `json:"pollingInterval"`
		CooldownPeriod  int  `json:"cooldownPeriod"`
		Advanced        struct {
			HorizontalPodAutoscalerConfig struct {
				Behavior json.RawMessage `json:"behavior"` // autoscaling/v2's, checked below
			} `json:"horizontalPodAutoscalerConfig"`
		} `json:"advanced"`
		Triggers []struct {
			Type     string            `json:"type"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// natsJetStreamFields are the nats-jetstream scaler's metadata (KEDA
// docs, scalers/nats-jetstream); required marks those it cannot do
// without.
var natsJetStreamFields = map[string]bool{
	"natsServerMonitoringEndpoint": true,
	"account":                      true,
	"stream":                       true,
	"consumer":                     true,
	"lagThreshold":                 true,
	"activationLagThreshold":       false,
	"useHttps":                     false,
}

// TestScaledObject: the ScaledObject scales the Deployment on the lag of
// the stream and consumer the ConfigMap configures, with the scaler's
// fields only.
func TestScaledObject(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("keda", "scaledobject.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var so scaledObject
	if err := dec.Decode(&so); err != nil {
		t.Fatalf("scaledobject.yaml: %v", err)
	}
	if so.APIVersion != "keda.sh/v1alpha1" || so.Kind != "ScaledObject" {
		t.Errorf("%s %s, want keda.sh/v1alpha1 ScaledObject", so.APIVersion, so.Kind)
	}
	m := loadManifests(t)
	s := settings(t, m)
	if so.Spec.ScaleTargetRef.Name != m.deployment.Name {
		t.Errorf("scaleTargetRef %q, want the Deployment %q", so.Spec.ScaleTargetRef.Name, m.deployment.Name)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
		t.Error("minReplicaCount must be at least 1: jobs coming due after a deferral would wait for a pod to start")
	}
	if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount < *so.Spec.MinReplicaCount {
		t.Error("maxReplicaCount must be set, at least minReplicaCount")
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "nats-jetstream" {
		t.Fatalf("triggers %+v, want one nats-jetstream", so.Spec.Triggers)
	}
	md := so.Spec.Triggers[0].Metadata
	for k := range md {
		if _, ok := natsJetStreamFields[k]; !ok {
			t.Errorf("metadata %s is not a nats-jetstream scaler field", k)
		}
	}
	for k, required := range natsJetStreamFields {
		if _, ok := md[k]; required && !ok {
			t.Errorf("metadata lacks %s", k)
		}
	}
	if md["stream"] != s.Stream || md["consumer"] != s.Consumer {
		t.Errorf("scaler watches %s/%s, the workers consume %s/%s", md["stream"], md["consumer"], s.Stream, s.Consumer)
	}
	for _, k := range []string{"lagThreshold", "activationLagThreshold"} {
		if v, ok := md[k]; ok {
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				t.Errorf("%s %q: want a whole number", k, v)
			}
		}
	}
	if b := so.Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior; b != nil {
		var behavior autoscalingv2.HorizontalPodAutoscalerBehavior
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&behavior); err != nil {
			t.Errorf("horizontalPodAutoscalerConfig.behavior: %v", err)
		}
	}
}
