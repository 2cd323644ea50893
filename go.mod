module github.com/batchfit/batchfit

go 1.26.8

require (
	github.com/aristanetworks/gomap v0.0.0-20230726210543-f4e41046dced // indirect
	github.com/kisielk/og-rek v1.3.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/exp v0.0.0-20230725093048-515e97ebf090 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
