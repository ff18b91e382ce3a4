module example.com/{{name}}

go 1.24

require enoki.local/sdk v0.0.0

replace enoki.local/sdk => {{sdk}}/go
