module github.com/batchfit/batchfit

go 1.25

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/kisielk/og-rek v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
	google.golang.org/protobuf v1.36.7
)

require (
	github.com/aristanetworks/gomap v0.0.0-20230726210543-f4e41046dced // indirect
	golang.org/x/exp v0.0.0-20230725093048-515e97ebf090 // indirect
)
