// Package sdk is the Go side of the enoki synthesizer contract (../CONTRACT.md): read one
// KRM ResourceList from stdin, look up bound inputs by key, build desired resources with
// enoki annotations, and write one ResourceList to stdout. Build synthesizers with
// GOOS=wasip1 GOARCH=wasm.
package sdk

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Object is any Kubernetes object as JSON.
type Object = map[string]any

// Result is a KRM function result; severity "error" fails the synthesis.
type Result struct {
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

// ResourceList is the stdin/stdout envelope.
type ResourceList struct {
	APIVersion     string          `json:"apiVersion"`
	Kind           string          `json:"kind"`
	Items          []Object        `json:"items"`
	FunctionConfig *FunctionConfig `json:"functionConfig,omitempty"`
	Results        []Result        `json:"results,omitempty"`
}

// FunctionConfig carries the Composition's metadata and the synthesis environment.
type FunctionConfig struct {
	Composition struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"composition"`
	Env map[string]string `json:"env"`
}

func annotation(o Object, key string) (string, bool) {
	meta, _ := o["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	for _, k := range []string{"enoki.dev/" + key, "eno.azure.io/" + key} {
		if v, ok := ann[k].(string); ok {
			return v, true
		}
	}
	return "", false
}

// Input returns the item bound under key.
func (l *ResourceList) Input(key string) (Object, error) {
	for _, item := range l.Items {
		if k, ok := annotation(item, "input-key"); ok && k == key {
			return item, nil
		}
	}
	return nil, fmt.Errorf("input %q is not bound", key)
}

// CompositionName is the name of the Composition being synthesized.
func (l *ResourceList) CompositionName() string {
	if l.FunctionConfig == nil {
		return ""
	}
	return l.FunctionConfig.Composition.Name
}

// Resource starts a desired resource.
func Resource(apiVersion, kind, name string) Object {
	return Object{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}
}

// Annotate sets metadata.annotations[key] = value.
func Annotate(o Object, key, value string) Object {
	meta, _ := o["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		o["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann[key] = value
	return o
}

// ReadinessGroup sets enoki.dev/readiness-group.
func ReadinessGroup(o Object, group int) Object {
	return Annotate(o, "enoki.dev/readiness-group", strconv.Itoa(group))
}

// Readiness sets the enoki.dev/readiness CEL check.
func Readiness(o Object, cel string) Object { return Annotate(o, "enoki.dev/readiness", cel) }

// Run reads stdin, calls f and writes its output; an error becomes an error result.
func Run(f func(in *ResourceList) ([]Object, []Result, error)) {
	out := ResourceList{APIVersion: "config.kubernetes.io/v1", Kind: "ResourceList", Items: []Object{}}
	var in ResourceList
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = json.Unmarshal(data, &in)
	}
	if err == nil {
		out.Items, out.Results, err = f(&in)
		if out.Items == nil {
			out.Items = []Object{}
		}
	}
	if err != nil {
		out.Items = []Object{}
		out.Results = append(out.Results, Result{Severity: "error", Message: err.Error()})
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
