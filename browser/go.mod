module github.com/batchfit/batchfit/browser

go 1.25

require (
	github.com/batchfit/batchfit v0.0.0-00010101000000-000000000000
	github.com/chromedp/chromedp v0.23.0
)

require (
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/aristanetworks/gomap v0.0.0-20230726210543-f4e41046dced // indirect
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/kisielk/og-rek v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/exp v0.0.0-20230725093048-515e97ebf090 // indirect
	google.golang.org/protobuf v1.36.7 // indirect
)

// the tests are of this checkout's batchfit, not of a published version
replace github.com/batchfit/batchfit => ../
