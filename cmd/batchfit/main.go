// Command batchfit predicts, explains and watches the GPU memory of PyTorch
// training jobs. See 'batchfit -h'.
package main

import (
	"os"

	"github.com/batchfit/batchfit/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
