module enoki.local/samples/go

go 1.24

require github.com/enoki-dev/enoki/synthesizer-sdk/go v0.0.0

replace github.com/enoki-dev/enoki/synthesizer-sdk/go => ../../synthesizer-sdk/go
