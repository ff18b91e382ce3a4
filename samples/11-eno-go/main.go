// Sample 11: a synthesizer written the way Eno's Go SDK is used — typed inputs by key,
// typed Kubernetes objects out — built with GOOS=wasip1 GOARCH=wasm. The local enofn
// package mirrors github.com/Azure/eno/pkg/function's contract; an Eno synthesizer swaps
// that import and runs unchanged.
//
// Input `config` (a ConfigMap: data.image, data.replicas) and optional `extra` (a ConfigMap
// whose data become the Deployment's environment) → a Deployment and a Service named after
// the Composition (COMPOSITION_NAME, which enoki sets as Eno does).
package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"enoki.local/samples/eno-go/enofn"
)

// Inputs are read by ref key, as in Eno.
type Inputs struct {
	Config *corev1.ConfigMap `eno_key:"config"`
	Extra  *corev1.ConfigMap `eno_key:"extra"`
}

func synthesize(in Inputs) ([]enofn.Object, error) {
	name := os.Getenv("COMPOSITION_NAME")
	if name == "" {
		return nil, fmt.Errorf("COMPOSITION_NAME is not set")
	}
	image := in.Config.Data["image"]
	if image == "" {
		return nil, fmt.Errorf("config: data.image is required")
	}
	replicas := int32(1)
	if r, err := strconv.Atoi(in.Config.Data["replicas"]); err == nil {
		replicas = int32(r)
	}
	var env []corev1.EnvVar
	if in.Extra != nil {
		keys := make([]string, 0, len(in.Extra.Data))
		for k := range in.Extra.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			env = append(env, corev1.EnvVar{Name: k, Value: in.Extra.Data[k]})
		}
	}
	labels := map[string]string{"app": name}
	deploy := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				"eno.azure.io/readiness-group": "1",
				"eno.azure.io/readiness":       "self.status.availableReplicas >= self.spec.replicas",
			},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: image, Env: env,
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}}},
			},
		},
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	return []enofn.Object{svc, deploy}, nil
}

func main() { enofn.Main(synthesize) }
