// Package cli is batchfit's command line: the table of commands, each
// command's flags, the work each does (a prediction, a search, a plan, a
// snapshot's replay) and its exit status (0 answered or fits, 1 does not
// fit or failed, 2 a usage error). run and watch, which stand beside real
// jobs rather than predict them, are internal/live's: cli checks that
// they may reach the machine, calls them, and passes a run's
// live.ExitStatus through as batchfit's own (live.CannotStart as 127).
//
// What an answer looks like lives elsewhere, so that the command line and
// the web page print the same: a command builds its view with
// internal/report and prints it as text or JSON. The web server is
// internal/server; the serve command starts it, handing it the commands
// to run (runRemote) under the remote policy, which reaches no file,
// process or environment of the machine.
package cli
