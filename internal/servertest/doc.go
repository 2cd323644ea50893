// Package servertest holds helpers for tests of batchfit's server and
// commands: posting JSON and multipart forms to a test server, a recorded
// torch.cuda.memory._dump_snapshot trace, a log safe to share with the
// server's handlers, and a quick estimate that the server must answer in
// time. It is imported by tests only.
//
// It imports only the standard library and og-rek, so that any of
// batchfit's packages may use it in its tests without an import cycle.
package servertest
