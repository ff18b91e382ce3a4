// Package enofn is a thin helper with the contract of Eno's Go SDK
// (github.com/Azure/eno/pkg/function), so an Eno synthesizer moves to enoki by changing one
// import: inputs are a struct whose fields carry `eno_key:"<ref key>"` tags and hold typed
// Kubernetes objects (k8s.io/api types), read from stdin by `eno.azure.io/input-key`; the
// function returns objects (controller-runtime's client.Object method set) and Main writes the
// KRM ResourceList to stdout. A missing input is an error result unless its key is listed in
// functionConfig.optionalRefs, in which case the field stays nil — as in Eno.
//
// Written for enoki from the documented contract; no Eno code is copied.
package enofn

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is what a synthesizer returns: the method set of controller-runtime's client.Object.
type Object interface {
	metav1.Object
	runtime.Object
}

// SynthFunc turns typed inputs into objects.
type SynthFunc[T any] func(inputs T) ([]Object, error)

// Result is a KRM function result.
type Result struct {
	Message     string            `json:"message"`
	Severity    string            `json:"severity,omitempty"`
	ResourceRef *ResourceRef      `json:"resourceRef,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
}

// ResourceRef names the object a Result is about.
type ResourceRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace,omitempty"`
}

// ResourceList is the KRM wire format on stdin and stdout.
type ResourceList struct {
	APIVersion     string           `json:"apiVersion"`
	Kind           string           `json:"kind"`
	Items          []map[string]any `json:"items"`
	FunctionConfig map[string]any   `json:"functionConfig,omitempty"`
	Results        []Result         `json:"results,omitempty"`
}

const inputKey = "eno.azure.io/input-key"

// Main reads stdin, fills T's `eno_key` fields, calls fn and writes the output; a failure is
// an error result (and exit status 1).
func Main[T any](fn SynthFunc[T]) {
	out, err := Run(os.Stdin, fn)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
	if err != nil {
		// As Eno's Main (which panics): the reason on stderr and a non-zero exit.
		fmt.Fprintf(os.Stderr, "error while calling synthesizer function: %s\n", err)
		os.Exit(1)
	}
}

// Run is Main without the process: for tests.
func Run[T any](stdin io.Reader, fn SynthFunc[T]) (*ResourceList, error) {
	out := &ResourceList{APIVersion: "config.kubernetes.io/v1", Kind: "ResourceList", Items: []map[string]any{}}
	fail := func(err error) (*ResourceList, error) {
		out.Results = append(out.Results, Result{Message: err.Error(), Severity: "error"})
		return out, err
	}
	var in ResourceList
	if err := json.NewDecoder(stdin).Decode(&in); err != nil && err != io.EOF {
		return fail(fmt.Errorf("decoding stdin as a ResourceList: %w", err))
	}
	var inputs T
	if err := readInputs(&in, reflect.ValueOf(&inputs).Elem()); err != nil {
		return fail(err)
	}
	objects, err := fn(inputs)
	if err != nil {
		return fail(err)
	}
	for _, o := range objects {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return fail(fmt.Errorf("converting %s: %w", o.GetName(), err))
		}
		// client-go structs carry creationTimestamp: null and an empty status; Eno drops them.
		delete(u, "status")
		if m, ok := u["metadata"].(map[string]any); ok {
			delete(m, "creationTimestamp")
		}
		out.Items = append(out.Items, u)
	}
	return out, nil
}

func optional(in *ResourceList, key string) bool {
	refs, _ := in.FunctionConfig["optionalRefs"].([]any)
	for _, r := range refs {
		if r == key {
			return true
		}
	}
	return false
}

func readInputs(in *ResourceList, v reflect.Value) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		field, value := t.Field(i), v.Field(i)
		key := field.Tag.Get("eno_key")
		if key == "" || !value.CanSet() {
			continue
		}
		item := find(in, key)
		if item == nil {
			if optional(in, key) {
				continue
			}
			return fmt.Errorf("error while reading input with key %q: input not found", key)
		}
		if value.Kind() != reflect.Ptr {
			return fmt.Errorf("input %q: field %s must be a pointer to a Kubernetes type", key, field.Name)
		}
		obj := reflect.New(value.Type().Elem())
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item, obj.Interface()); err != nil {
			return fmt.Errorf("input %q: %w", key, err)
		}
		value.Set(obj)
	}
	return nil
}

func find(in *ResourceList, key string) map[string]any {
	for _, item := range in.Items {
		meta, _ := item["metadata"].(map[string]any)
		annotations, _ := meta["annotations"].(map[string]any)
		if annotations[inputKey] == key {
			return item
		}
	}
	return nil
}
