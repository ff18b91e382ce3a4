// Sample 12: a Helm chart as a synthesizer. The chart in chart/ is embedded and rendered with
// Helm's own engine (synthesizer-sdk/go/helm); its values come from the bound ConfigMap.
package main

import (
	"embed"
	"strconv"

	sdk "github.com/enoki-dev/enoki/synthesizer-sdk/go"
	"github.com/enoki-dev/enoki/synthesizer-sdk/go/helm"
)

//go:embed all:chart
var chart embed.FS

func main() {
	helm.Run(helm.Options{FS: chart, Dir: "chart", Values: values})
}

// values maps the bound ConfigMap's data to the chart's values.
func values(in *sdk.ResourceList) (map[string]any, error) {
	cfg, err := in.Input("config")
	if err != nil {
		return nil, err
	}
	data, _ := cfg["data"].(map[string]any)
	out := map[string]any{}
	if g, ok := data["greeting"].(string); ok {
		out["greeting"] = g
	}
	if p, ok := data["port"].(string); ok {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		out["port"] = n
	}
	return out, nil
}
