package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/batchfit/batchfit/internal/server"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/batchfit/batchfit/gpu"
)

const serveUsage = `usage: batchfit serve [--addr 127.0.0.1:8080] [flags]

Serves a local web page where you pick or upload a model, set the GPU and
the training setup, and see the breakdown, memory over batch size and memory
over the step; paste an out-of-memory message to have it explained; upload
a memory snapshot to see its timeline, an allocator what-if and, if asked,
the prediction beside it. The page and its JSON API (the same answers as
the commands' --json) are served from the binary; nothing is fetched from
elsewhere and nothing is written to disk.

It listens on the loopback interface only, unless --addr names another.

Examples:
  batchfit serve
  batchfit serve --addr 127.0.0.1:9000
`

func runServe(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	flags := newFlagSet("serve", stderr, serveUsage)
	addr := flags.String("addr", "127.0.0.1:8080", "address to listen on")
	maxUpload := flags.String("max-upload", "64MiB", "largest request body (a model file, a snapshot)")
	workers := flags.Int("workers", runtime.NumCPU(), "requests answered at once; more wait their turn")
	timeout := flags.Duration("timeout", server.DefaultTimeout, "longest time one request's upload is read, and then its answer computed; past it the request is answered 503 (0: no limit)")
	pos, err := parseArgs(flags, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("serve takes no arguments, got %q", pos[0])
	}
	lim, err := gpu.ParseSize(*maxUpload)
	if err != nil || lim <= 0 {
		return usagef("--max-upload %q: want a size such as 64MiB", *maxUpload)
	}
	if *workers < 1 {
		return usagef("--workers must be at least 1, got %d", *workers)
	}
	if *timeout < 0 {
		return usagef("--timeout must not be negative, got %s", *timeout)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *addr, err)
	}
	loopback := server.IsLoopback(ln.Addr())
	if !loopback {
		fmt.Fprintf(stderr, "batchfit serve: listening on %s, which is not the loopback interface: other machines can reach this page\n", ln.Addr())
	}
	// An answer is written once computed: the write deadline is the
	// computing's, and a minute more for waiting a turn and writing.
	write := 5 * time.Minute
	if *timeout > 0 {
		write = *timeout + time.Minute
	}
	// An interrupt or SIGTERM ends ctx: the work under way stops and its
	// requests are answered 503 while the server shuts down.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: newServer(server.Options{MaxUpload: lim, Workers: *workers, Loopback: loopback, Timeout: *timeout, Base: ctx, Log: stderr}),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 2 * time.Minute, WriteTimeout: write, IdleTimeout: time.Minute}
	fmt.Fprintf(stdout, "batchfit: serving http://%s/ (Ctrl-C stops)\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// Interrupted: the answers under way get ten seconds, then the
		// server closes; either way it stopped as asked.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); errors.Is(err, context.DeadlineExceeded) {
			srv.Close()
		}
		return nil
	}
}

// newServer is the server of o that runs this package's commands, as a
// remote request may run them (runRemote).
func newServer(o server.Options) *server.Server {
	o.Run = runRemote
	return server.New(o)
}

// runRemote runs the command cmd for a web request: with what the request
// sent in place of files, and the remote policy.
func runRemote(ctx context.Context, cmd string, args []string, in server.Inputs, stdout io.Writer) error {
	c, ok := commands[cmd]
	if !ok {
		return fmt.Errorf("no command %q", cmd)
	}
	e := &env{policy: remote, stdin: strings.NewReader(in.Message), stdout: stdout, stderr: io.Discard,
		source: in.Source, snap: in.Snapshot, snapName: in.SnapshotName, chart: in.Chart, ctx: ctx}
	return c(e, args)
}
