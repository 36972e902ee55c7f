module github.com/gpubind/gpubind

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/prometheus/procfs v0.23.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.49.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
