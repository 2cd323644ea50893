// Package onnxpb holds the Go protobuf bindings of the ONNX model format,
// generated from onnx.proto (ONNX 1.12, as Debian's python3-onnx ships it at
// /usr/lib/python3/dist-packages/onnx/onnx.proto; syntax proto2, package
// onnx). The generated code is committed; regenerate it with
//
//	go generate ./onnx/onnxpb
//
// which needs protoc (Debian: apt-get install protobuf-compiler) and
// protoc-gen-go at the version of google.golang.org/protobuf in go.mod
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.7) on PATH.
package onnxpb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go_opt=Monnx.proto=github.com/batchfit/batchfit/onnx/onnxpb onnx.proto
