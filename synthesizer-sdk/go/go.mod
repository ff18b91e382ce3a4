module github.com/enoki-dev/enoki/synthesizer-sdk/go

go 1.24
