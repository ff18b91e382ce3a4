module example.com/{{name}}

go 1.26.0

require (
	github.com/enoki-dev/enoki/synthesizer-sdk/go v{{version}}
	github.com/enoki-dev/enoki/synthesizer-sdk/go/helm v{{version}}
)
{{go_replace}}{{go_helm_replace}}
