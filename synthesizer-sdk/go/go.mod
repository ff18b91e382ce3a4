module enoki.local/sdk

go 1.24
