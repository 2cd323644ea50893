package cli

import "github.com/batchfit/batchfit/internal/live"

// runRun is 'batchfit run' (internal/live), from the command line only.
func runRun(e *env, args []string) error {
	if !e.policy.machine {
		return usagef("run starts a process: not from the web page")
	}
	return live.Run(e.live(), args)
}

// runWatch is 'batchfit watch' (internal/live), from the command line
// only.
func runWatch(e *env, args []string) error {
	if !e.policy.machine {
		return usagef("watch reads this machine's GPUs: not from the web page")
	}
	return live.Watch(e.live(), args)
}

// live is what run and watch are given of e.
func (e *env) live() live.Env {
	return live.Env{Stdin: e.stdin, Stdout: e.stdout, Stderr: e.stderr, JobEnv: e.jobEnv, Hooks: e.hooks}
}
