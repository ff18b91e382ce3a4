// A synthesizer the size of a real Go operator's: it imports k8s.io/api, apimachinery,
// client-go's scheme (every built-in API type registered) and links the typed clientset, like
// Eno's Go example built on controller-runtime. Compiled with GOOS=wasip1 it is about 90 MB of wasm; the benchmark
// (`make bench`) measures how enoki compiles, caches and runs it.
//
// It reads a KRM ResourceList on stdin and writes one with a Deployment built from typed
// structs and serialized by the scheme's codec.
package main

import (
	"bufio"
	stdjson "encoding/json"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// clients is never called with more than one argument; it links the typed clientset and the
// dynamic client (most of a real operator's binary) without using the network.
func clients() (kubernetes.Interface, dynamic.Interface) {
	if len(os.Args) < 2 {
		return nil, nil
	}
	cfg := &rest.Config{Host: os.Args[1]}
	return kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	in, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fail("reading stdin: %v", err)
	}
	if typed, dyn := clients(); typed != nil || dyn != nil {
		fail("clients are not used by this synthesizer")
	}
	var list map[string]any
	if err := stdjson.Unmarshal(in, &list); err != nil {
		fail("stdin is not a ResourceList: %v", err)
	}
	replicas := int32(2)
	labels := map[string]string{"app": "go-k8s"}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "go-k8s", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "app",
					Image: "registry.invalid/app:1",
				}}},
			},
		},
	}
	// Round-trip through the scheme: proves the registered types are really used.
	codec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
	var buf jsonBuffer
	if err := codec.Encode(d, &buf); err != nil {
		fail("encoding: %v", err)
	}
	obj, _, err := codec.Decode(buf.b, nil, nil)
	if err != nil {
		fail("decoding: %v", err)
	}
	if _, ok := obj.(runtime.Object).(*appsv1.Deployment); !ok {
		fail("decoded %T, not a Deployment", obj)
	}
	out := fmt.Sprintf(`{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[%s]}`, string(buf.b))
	os.Stdout.WriteString(out)
}

type jsonBuffer struct{ b []byte }

func (j *jsonBuffer) Write(p []byte) (int, error) {
	j.b = append(j.b, p...)
	return len(p), nil
}
