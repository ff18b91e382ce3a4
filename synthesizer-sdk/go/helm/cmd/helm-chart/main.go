// Command helm-chart is a synthesizer that renders any packaged Helm chart: the chart comes
// from the input bound as `chart` (a ConfigMap or Secret whose binaryData/data `chart.tgz`
// holds the packaged chart), the values from the optional input `values` (a ConfigMap whose
// data `values.yaml` holds them), merged over the chart's own as `helm -f` merges them. The
// release is named after the Composition and installed in its namespace.
package main

import (
	"encoding/base64"
	"fmt"

	sdk "github.com/enoki-dev/enoki/synthesizer-sdk/go"
	"github.com/enoki-dev/enoki/synthesizer-sdk/go/helm"
	"sigs.k8s.io/yaml"
)

func main() {
	sdk.Run(func(in *sdk.ResourceList) ([]sdk.Object, []sdk.Result, error) {
		archive, err := chartArchive(in)
		if err != nil {
			return nil, nil, err
		}
		objs, err := helm.Render(in, helm.Options{Archive: archive, Values: values})
		return objs, nil, err
	})
}

// chartArchive reads `chart.tgz` of the input bound as `chart`.
func chartArchive(in *sdk.ResourceList) ([]byte, error) {
	obj, err := in.Input("chart")
	if err != nil {
		return nil, err
	}
	for _, field := range []string{"binaryData", "data"} {
		m, _ := obj[field].(map[string]any)
		if s, ok := m["chart.tgz"].(string); ok {
			return base64.StdEncoding.DecodeString(s)
		}
	}
	return nil, fmt.Errorf("input chart: no binaryData (or Secret data) key chart.tgz")
}

// values reads `values.yaml` of the optional input `values`.
func values(in *sdk.ResourceList) (map[string]any, error) {
	obj, err := in.Input("values")
	if err != nil {
		return map[string]any{}, nil
	}
	data, _ := obj["data"].(map[string]any)
	text, _ := data["values.yaml"].(string)
	out := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &out); err != nil {
		return nil, fmt.Errorf("input values: values.yaml: %w", err)
	}
	return out, nil
}
