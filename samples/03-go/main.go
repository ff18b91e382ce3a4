// Sample 03: a synthesizer in Go, built with GOOS=wasip1 GOARCH=wasm. It reads the
// ConfigMap bound under "config" (data.app, data.port) and emits a ConfigMap in readiness
// group 0, then a Service and a ServiceAccount in group 1.
package main

import (
	"fmt"

	sdk "github.com/enoki-dev/enoki/synthesizer-sdk/go"
)

func synthesize(in *sdk.ResourceList) ([]sdk.Object, []sdk.Result, error) {
	cfg, err := in.Input("config")
	if err != nil {
		return nil, nil, err
	}
	data, _ := cfg["data"].(map[string]any)
	app, _ := data["app"].(string)
	if app == "" {
		app = in.CompositionName()
	}
	port, _ := data["port"].(string)
	if port == "" {
		port = "8080"
	}
	settings := sdk.Resource("v1", "ConfigMap", app+"-settings")
	settings["data"] = map[string]any{"port": port}
	sdk.ReadinessGroup(settings, 0)
	sdk.Readiness(settings, "has(self.data.port)")

	var portNum int
	fmt.Sscanf(port, "%d", &portNum)
	svc := sdk.Resource("v1", "Service", app)
	svc["spec"] = map[string]any{
		"selector": map[string]any{"app": app},
		"ports":    []any{map[string]any{"port": portNum}},
	}
	sdk.ReadinessGroup(svc, 1)

	sa := sdk.Resource("v1", "ServiceAccount", app)
	sdk.ReadinessGroup(sa, 1)
	return []sdk.Object{settings, svc, sa}, []sdk.Result{{Severity: "info", Message: "built with Go"}}, nil
}

func main() { sdk.Run(synthesize) }
