// {{name}}: a Helm chart as an enoki synthesizer. The chart in chart/ is embedded and rendered
// with Helm's own engine (synthesizer-sdk/go/helm, GOOS=wasip1), exactly as `helm template`
// renders it; values computes the chart's values from the bound inputs.
package main

import (
	"embed"

	sdk "github.com/enoki-dev/enoki/synthesizer-sdk/go"
	"github.com/enoki-dev/enoki/synthesizer-sdk/go/helm"
)

//go:embed all:chart
var chart embed.FS

// values maps config.data.greeting to the chart's `greeting` (the chart defaults it to hello).
func values(in *sdk.ResourceList) (map[string]any, error) {
	cfg, err := in.Input("config")
	if err != nil {
		return nil, err
	}
	data, _ := cfg["data"].(map[string]any)
	out := map[string]any{}
	if g, _ := data["greeting"].(string); g != "" {
		out["greeting"] = g
	}
	return out, nil
}

// The release is named after the Composition and installed in its namespace.
func main() { helm.Run(helm.Options{FS: chart, Dir: "chart", Values: values}) }
