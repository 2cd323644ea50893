// Command derivgen writes capture/derivatives_gen.go from the vendored
// derivatives.yaml files; capture's go:generate runs it in capture/.
package main

import (
	"log"
	"os"

	"github.com/batchfit/batchfit/capture/internal/derivgen"
)

func main() {
	var ts []derivgen.Table
	for _, t := range derivgen.Tables {
		src, err := os.ReadFile(t.File)
		if err != nil {
			log.Fatal(err)
		}
		t.Src = src
		ts = append(ts, t)
	}
	out, err := derivgen.Generate(ts)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("derivatives_gen.go", out, 0o644); err != nil {
		log.Fatal(err)
	}
}
