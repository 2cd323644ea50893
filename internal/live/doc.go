// Package live is batchfit beside real jobs rather than predictions of
// them: 'batchfit run' runs a training command under the recorder and
// reports PyTorch's memory after every optimizer step, with the
// prediction of the same job beside it, and 'batchfit watch' shows every
// GPU and process as NVML sees them, with what PyTorch says inside the
// processes a run started. A run publishes its last figures in a small
// registry of files that watch reads; both can write what they saw to a
// file that 'batchfit validate' compares with the prediction
// (CompareRecording, CompareWatch).
//
// The command line (internal/cli) parses the command name, checks that
// the command may reach this machine, and maps what Run and Watch return
// to the process' exit status: ExitStatus is the training command's own,
// CannotStart the shell's 127. Everything live reaches of the machine
// besides files (its GPUs, clock, zone, processes and where runs publish
// their state) comes through Hooks, so tests can stand in for it.
package live
