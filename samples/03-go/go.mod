module enoki.local/samples/go

go 1.24

require enoki.local/sdk v0.0.0

replace enoki.local/sdk => ../../synthesizer-sdk/go
