// {{name}}: an enoki synthesizer in Go (GOOS=wasip1 GOARCH=wasm, a WASI preview1 module).
package main

import sdk "github.com/enoki-dev/enoki/synthesizer-sdk/go"

// synthesize reads config.data.greeting (default "hello") and emits <composition>-greeting.
func synthesize(in *sdk.ResourceList) ([]sdk.Object, []sdk.Result, error) {
	cfg, err := in.Input("config")
	if err != nil {
		return nil, nil, err
	}
	data, _ := cfg["data"].(map[string]any)
	greeting, _ := data["greeting"].(string)
	if greeting == "" {
		greeting = "hello"
	}
	name := in.CompositionName()
	cm := sdk.Resource("v1", "ConfigMap", name+"-greeting")
	cm["metadata"].(map[string]any)["labels"] = map[string]any{"app.kubernetes.io/name": name}
	cm["data"] = map[string]any{"message": greeting + ", world"}
	sdk.ReadinessGroup(cm, 0)
	sdk.Readiness(cm, "has(self.data.message)")
	return []sdk.Object{cm}, nil, nil
}

func main() { sdk.Run(synthesize) }
