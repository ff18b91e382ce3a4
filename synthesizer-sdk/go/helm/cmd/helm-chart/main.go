// Command helm-chart is the module of enoki's built-in `helm` synthesizer: it renders any
// packaged Helm chart with Helm's own engine.
//
// Inputs (each a ConfigMap or Secret; a Secret's data is base64 as the API serves it):
//   - `chart`: `binaryData` (or Secret `data`) key `chart.tgz`, the packaged chart. With
//     `spec.helm.chart` on the Synthesizer the controller fetches it and passes it here.
//   - `helm-values`: `data` key `values.yaml`, the Synthesizer's `spec.helm.values`.
//   - `values`, then every `values-*` input in key order: `values.yaml`, bound by each
//     Composition.
//
// Values are merged in that order over the chart's own, as `helm -f a -f b` merges files
// (maps merge key by key, anything else is replaced). The release is named after the
// Composition and installed in its namespace; with HELM_SHIM=eno (the controller sets it
// from spec.helm.shim) it is Eno's shim's, `eno-helm-shim` in `default`, hooks included. `.Capabilities` take HELM_KUBE_VERSION (e.g.
// v1.35.0) and HELM_API_VERSIONS (comma-separated, e.g. monitoring.coreos.com/v1) from the
// synthesis environment when set: the controller sets both from the target cluster's
// discovery (a Synthesizer's `env` or a Composition's `synthesisEnv` overrides either).
package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"sort"
	"strings"

	sdk "github.com/enoki-dev/enoki/synthesizer-sdk/go"
	"github.com/enoki-dev/enoki/synthesizer-sdk/go/helm"
	"sigs.k8s.io/yaml"
)

// render is the synthesis: the ResourceList on stdin, the rendered objects on stdout.
func render() {
	sdk.Run(func(in *sdk.ResourceList) ([]sdk.Object, []sdk.Result, error) {
		archive, err := chartArchive(in)
		if err != nil {
			return nil, nil, err
		}
		objs, err := helm.Render(in, helm.Options{
			Archive: archive,
			Values:  values,
			EnoShim: os.Getenv("HELM_SHIM") == "eno",
		})
		return objs, nil, err
	})
}

// field reads key of a ConfigMap's data/binaryData or a Secret's data (base64 in both
// binaryData and Secret data, plain in ConfigMap data).
func field(obj sdk.Object, key string) ([]byte, bool, error) {
	secret := obj["kind"] == "Secret"
	for _, f := range []string{"data", "binaryData", "stringData"} {
		m, _ := obj[f].(map[string]any)
		s, ok := m[key].(string)
		if !ok {
			continue
		}
		if f == "binaryData" || (f == "data" && secret) {
			b, err := base64.StdEncoding.DecodeString(s)
			return b, true, err
		}
		return []byte(s), true, nil
	}
	return nil, false, nil
}

// chartArchive reads `chart.tgz` of the input bound as `chart`.
func chartArchive(in *sdk.ResourceList) ([]byte, error) {
	obj, err := in.Input("chart")
	if err != nil {
		return nil, fmt.Errorf("%w: set spec.helm.chart on the Synthesizer, or bind a ConfigMap with binaryData chart.tgz", err)
	}
	b, ok, err := field(obj, "chart.tgz")
	if err != nil {
		return nil, fmt.Errorf("input chart: chart.tgz: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("input chart: no binaryData (or Secret data) key chart.tgz")
	}
	return b, nil
}

// inputKey is the input key of a bound input; "" for observed outputs (they are never values).
func inputKey(item sdk.Object) string {
	meta, _ := item["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	if ann["enoki.dev/observed"] == "true" {
		return ""
	}
	k, _ := ann["enoki.dev/input-key"].(string)
	return k
}

// valueKeys are the input keys values are read from, in merge order, each once.
func valueKeys(in *sdk.ResourceList) []string {
	seen := map[string]bool{}
	var more []string
	for _, item := range in.Items {
		if k := inputKey(item); strings.HasPrefix(k, "values-") && !seen[k] {
			seen[k] = true
			more = append(more, k)
		}
	}
	sort.Strings(more)
	return append([]string{"helm-values", "values"}, more...)
}

// values merges `values.yaml` of each values input, in order (every object of a collection,
// in the order delivered).
func values(in *sdk.ResourceList) (map[string]any, error) {
	out := map[string]any{}
	for _, key := range valueKeys(in) {
		for _, obj := range in.Items {
			if inputKey(obj) != key {
				continue
			}
			vals, err := valuesOf(obj, key)
			if err != nil {
				return nil, err
			}
			out = merge(out, vals)
		}
	}
	return out, nil
}

// valuesOf reads `values.yaml` of one values input.
func valuesOf(obj sdk.Object, key string) (map[string]any, error) {
	text, ok, err := field(obj, "values.yaml")
	if err != nil {
		return nil, fmt.Errorf("input %s: values.yaml: %w", key, err)
	}
	if !ok {
		return nil, fmt.Errorf("input %s: no data key values.yaml", key)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(text, &vals); err != nil {
		return nil, fmt.Errorf("input %s: values.yaml: %w", key, err)
	}
	return vals, nil
}

// merge is how `helm -f` merges a later file over an earlier one: maps key by key,
// anything else replaced.
func merge(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = merge(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
