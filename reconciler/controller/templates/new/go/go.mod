module example.com/{{name}}

go 1.24

require github.com/enoki-dev/enoki/synthesizer-sdk/go v{{version}}
{{go_replace}}