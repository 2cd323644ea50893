// Package server is `batchfit serve`: the HTTP server of the local page
// (web/, embedded in the binary) and of its JSON API, which gives the
// same answers as the commands' --json.
//
// The server reads a request (its fields and uploads: a model file, a
// Hugging Face directory, a memory snapshot) within limits of size, rate
// and time, turns it into a command's arguments, and answers with what
// the command printed. It refuses requests for another host than the
// loopback's when it listens there, and posts from other origins.
//
// It runs the commands through Options.Run, a function the command line
// (internal/cli) hands it, rather than by importing that package: the
// serve command is one of the command line's commands, so the command
// line imports this package, and this package knows the commands only by
// name. Each request runs with what it uploaded in place of files, and
// never reaches a path, process or environment variable of the machine.
package server
