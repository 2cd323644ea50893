package cli

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
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

//go:embed web
var webFiles embed.FS

// serveOptions are the server's limits.
type serveOptions struct {
	// maxUpload bounds a request's body.
	maxUpload int64
	// workers is how many requests are answered at once; the others wait
	// their turn (none is refused for being one too many).
	workers int
	// timeout bounds the reading of a request's upload, and then the
	// computing of its answer (0: none): past it the work stops and the
	// request is answered 503.
	timeout time.Duration
	// loopback: the server listens on the loopback interface, so it
	// answers only requests addressed to this machine by a loopback name
	// (a web page elsewhere cannot reach it by rebinding a name of its
	// own to 127.0.0.1).
	loopback bool
	// base ends when the server stops: the work under way stops and its
	// requests are answered 503 (nil: never).
	base context.Context
	// log receives the requests' internal errors (nil: standard error).
	log io.Writer
	// bodyGrace and minBodyRate: a body must arrive at minBodyRate bytes
	// a second after bodyGrace (0: defaultBodyGrace, defaultMinBodyRate).
	bodyGrace   time.Duration
	minBodyRate int64
	// fields are the job's fields requests are read by (nil: job.Fields).
	fields job.Table
}

func runServe(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	flags := newFlagSet("serve", stderr, serveUsage)
	addr := flags.String("addr", "127.0.0.1:8080", "address to listen on")
	maxUpload := flags.String("max-upload", "64MiB", "largest request body (a model file, a snapshot)")
	workers := flags.Int("workers", runtime.NumCPU(), "requests answered at once; more wait their turn")
	timeout := flags.Duration("timeout", defaultServeTimeout, "longest time one request's upload is read, and then its answer computed; past it the request is answered 503 (0: no limit)")
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
	loopback := isLoopback(ln.Addr())
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
	srv := &http.Server{Handler: newServer(serveOptions{maxUpload: lim, workers: *workers, loopback: loopback, timeout: *timeout, base: ctx, log: stderr}),
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

// defaultServeTimeout is serve's --timeout: a minute is many times what
// the largest request within the server's bounds takes to answer (the
// planner's work is bounded, see plan.MaxPredictions), and it stops a
// request that has gone wrong from holding a worker for long.
const defaultServeTimeout = time.Minute

// isLoopback reports whether a listener's address is on the loopback
// interface.
func isLoopback(a net.Addr) bool {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// server answers the page and its API.
type server struct {
	opts serveOptions
	mux  *http.ServeMux
	// slots bounds the requests being answered at once: a prediction
	// takes a core and, for a large model, megabytes. reading bounds the
	// requests whose bodies are being read, so that slow uploads hold no
	// slot and the memory of bodies is bounded too.
	slots, reading chan struct{}
	// active and maxActive count the requests holding a slot.
	active, maxActive atomic.Int32
	// flags are the flags each served command accepts, for requests that
	// name one it does not.
	flags map[string][]string
	// base is opts.base, never nil.
	base context.Context
	// openModel reads an uploaded model file (uploadedModel; a test
	// replaces it).
	openModel func(*upload) (predict.Source, error)
	// fields are the job's fields (job.Fields unless a test gives others).
	fields job.Table
}

// endpoint is one POST of the API: the command it runs and what it
// returns.
type endpoint struct {
	cmd string
	svg bool
	// extra are arguments the endpoint adds itself.
	extra []string
	// own are the fields of the command's own flags a request may set;
	// the job's fields (job.Fields) it takes besides.
	own []string
}

var endpoints = map[string]endpoint{
	"/api/estimate":     {cmd: "estimate", extra: []string{"--json"}},
	"/api/estimate.svg": {cmd: "estimate", svg: true, extra: []string{"--json", "--timeline", "chart"}},
	"/api/sweep":        {cmd: "sweep", extra: []string{"--json"}, own: sweepOwn},
	"/api/sweep.svg":    {cmd: "sweep", svg: true, extra: []string{"--json", "--svg", "chart"}, own: sweepOwn},
	"/api/maxbatch":     {cmd: "maxbatch", extra: []string{"--json"}, own: []string{"limit", "margin", "objective", "solve"}},
	"/api/plan": {cmd: "plan", extra: []string{"--json"}, own: []string{"fixed-precision", "global-batch", "levers", "margin",
		"max-accumulate", "max-predictions", "min-micro-batch", "no-checkpointing", "top"}},
	"/api/oom":          {cmd: "oom", extra: []string{"--json"}, own: []string{"margin"}},
	"/api/snapshot":     {cmd: "snapshot", extra: []string{"--json"}, own: snapshotOwn},
	"/api/snapshot.svg": {cmd: "snapshot", svg: true, extra: []string{"--json", "--timeline", "chart"}, own: snapshotOwn},
}

var (
	sweepOwn    = []string{"margin"}
	snapshotOwn = []string{"device", "top"}
)

// reserved are the fields a request may not set: the server sets the
// output format and where charts go.
var reserved = map[string]bool{"json": true, "csv": true, "svg": true, "timeline": true, "h": true, "help": true}

// webLimits bound what one request may ask for: a request is answered on
// this machine, and a prediction's time and memory grow with depth,
// width, sequence, accumulation and steps.
const (
	webMaxBatches = 64
	webMaxFiles   = 256
	webMaxFields  = 64
	webMaxField   = 1 << 20 // a form field (an OOM message, a log excerpt), and a body without uploads
	webMaxGPU     = 2 << 40 // a custom --gpu capacity
)

// webSolveLimit bounds maxbatch's search of a dimension other than the
// batch, where each probe's cost grows with the value.
var webSolveLimit = map[string]int64{"layers": job.Bounds["layers"].Web, "hidden": job.Bounds["hidden"].Web, "seq": job.Bounds["seq"].Web}

func newServer(o serveOptions) *server {
	s := &server{opts: o, mux: http.NewServeMux(), slots: make(chan struct{}, o.workers), reading: make(chan struct{}, 4*o.workers),
		flags: map[string][]string{}, base: o.base, openModel: uploadedModel, fields: o.fields}
	if s.base == nil {
		s.base = context.Background()
	}
	if s.fields == nil {
		s.fields = job.Fields
	}
	for _, ep := range endpoints {
		s.flags[ep.cmd] = acceptedFields(s.fields, ep)
	}
	static, _ := fs.Sub(webFiles, "web")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServer(http.FS(static))))
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		page, _ := webFiles.ReadFile("web/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	s.mux.HandleFunc("GET /api/models", s.catalog("models"))
	s.mux.HandleFunc("GET /api/gpus", s.catalog("gpus"))
	s.mux.HandleFunc("GET /api/fields", s.serveFields)
	for p, ep := range endpoints {
		s.mux.HandleFunc("POST "+p, s.handle(ep))
	}
	return s
}

// ServeHTTP adds the headers every answer carries: the page fetches
// nothing from elsewhere and runs no script but its own.
// A panic anywhere in answering a request is recovered, logged and
// answered 500; the slots the request held are given back by their
// deferred releases as the panic unwinds.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			err := internalError{strings.Join(strings.Fields(fmt.Sprint(v)), " ")}
			s.logf("%s %s: %v\n%s", r.Method, r.URL.Path, err, debug.Stack())
			writeError(w, http.StatusInternalServerError, err)
		}
	}()
	if s.opts.loopback && !loopbackHost(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, fmt.Errorf("this server answers requests for localhost only, not %q", r.Host))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// A page of another site may send a form here; it may not have
		// it answered.
		if o := r.Header.Get("Origin"); o != "" {
			if !sameOrigin(o, r) {
				writeError(w, http.StatusForbidden, fmt.Errorf("requests from %s are refused: only this server's own page may post", o))
				return
			}
		}
		// Header values such as this one are compared case-insensitively
		// (Fetch Metadata's values are tokens).
		if strings.EqualFold(strings.TrimSpace(r.Header.Get("Sec-Fetch-Site")), "cross-site") {
			writeError(w, http.StatusForbidden, errors.New("cross-site requests are refused"))
			return
		}
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

// logf writes one line to the server's log.
func (s *server) logf(format string, args ...any) {
	w := s.opts.log
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "batchfit serve: "+format+"\n", args...)
}

// sameOrigin reports whether an Origin header names this server: the same
// scheme, host and port (RFC 6454 section 5: an origin is the triple), with
// a port left out meaning the scheme's default; an origin carries no user
// information, path, query or fragment.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.User != nil || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if !strings.EqualFold(u.Scheme, scheme) {
		return false
	}
	host, port := splitHostPort(u.Host, scheme)
	rhost, rport := splitHostPort(r.Host, scheme)
	return host != "" && strings.EqualFold(host, rhost) && port == rport
}

// splitHostPort splits a Host header or an origin's host into the host and
// the port, the scheme's default when none is given.
func splitHostPort(hostport, scheme string) (string, string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
	}
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return host, port
}

// acceptedFields are the fields a request to ep may set: the job's fields
// its command takes, and the command's own.
func acceptedFields(t job.Table, ep endpoint) []string {
	var out []string
	if jobCommands[ep.cmd] {
		out = append(out, t.Names(ep.cmd)...)
	}
	for _, name := range ep.own {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// jobCommands are the commands that take a job's fields (jobFlags).
var jobCommands = map[string]bool{"estimate": true, "sweep": true, "maxbatch": true, "plan": true, "oom": true, "snapshot": true}

// fieldsJSON is /api/fields: the job's fields, and the fields each
// command takes, from which the page builds its controls and options.
type fieldsJSON struct {
	Fields   []job.Field         `json:"fields"`
	Commands map[string][]string `json:"commands"`
}

func (s *server) serveFields(w http.ResponseWriter, r *http.Request) {
	out := fieldsJSON{Fields: s.fields, Commands: map[string][]string{}}
	for _, ep := range endpoints {
		out.Commands[ep.cmd] = s.flags[ep.cmd]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func (s *server) catalog(cmd string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var out bytes.Buffer
		if err := safeRun(commands[cmd], &env{stdout: &out, stderr: io.Discard, policy: remote}, []string{"--json"}); err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(out.Bytes())
	}
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(apiError{clipMessage(err.Error())})
}

// Error messages quote the input they refuse; a request may be a
// megabyte, which must not come back inside its own refusal.
const (
	// maxQuoted is the longest quoted input an error body repeats whole.
	maxQuoted = 80
	// maxMessage bounds an error body's message, whatever it holds.
	maxMessage = 4096
)

var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// clipMessage shortens the quoted strings of an error message longer than
// maxQuoted to their beginning, saying how much was cut, and the message
// to maxMessage bytes.
func clipMessage(msg string) string {
	msg = clipQuoted(msg)
	if len(msg) > maxMessage {
		keep := runeCut(msg, maxMessage)
		msg = fmt.Sprintf("%s… (%d bytes cut)", keep, len(msg)-len(keep))
	}
	return msg
}

// clipQuoted shortens the quoted strings of a message longer than
// maxQuoted to their beginning, saying how much was cut: the command line
// repeats input no more than the server does.
func clipQuoted(msg string) string {
	return quoted.ReplaceAllStringFunc(msg, func(q string) string {
		if len(q) <= maxQuoted {
			return q
		}
		keep := runeCut(q, maxQuoted-16)
		return fmt.Sprintf("%s…\" (%d bytes)", keep, len(q)-2)
	})
}

// runeCut is s cut to at most n bytes on a character boundary.
func runeCut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// webRequest is a request read: its flags as command-line arguments and
// what it uploaded.
type webRequest struct {
	args     []string
	message  string
	source   predict.Source
	snap     *snapshot.Snapshot
	snapName string
}

// requestError is bad input from the client: 400, or 413 when too large.
type requestError struct {
	code int
	err  error
}

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &requestError{http.StatusBadRequest, fmt.Errorf(format, args...)}
}

// loopbackHost reports whether a Host header names this machine by a
// loopback name or address.
func loopbackHost(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (s *server) handle(ep endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The work stops when the client leaves (r.Context is cancelled
		// when its connection closes) or the server stops (s.base).
		ctx, stop := s.requestContext(r)
		defer stop()
		select {
		case s.reading <- struct{}{}:
		case <-ctx.Done():
			s.writeStopped(w, context.Cause(ctx))
			return
		}
		req, err := s.readBody(ctx, w, r, ep)
		if err != nil {
			var re *requestError
			var mbe *http.MaxBytesError
			switch {
			// A body refused (too slow, bad) ends the connection's
			// reading, which cancels r.Context: that is no client
			// leaving, and is answered first.
			case errors.As(err, &re):
				writeError(w, re.code, re)
			case ctx.Err() != nil || errors.Is(err, errTimeout):
				s.writeStopped(w, err)
			case errors.As(err, &mbe):
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("the request is larger than the %s this server accepts (batchfit serve --max-upload)", fmtBytes(mbe.Limit)))
			default:
				writeError(w, http.StatusBadRequest, err)
			}
			return
		}
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		case <-ctx.Done():
			s.writeStopped(w, context.Cause(ctx))
			return
		}
		n := s.active.Add(1)
		defer s.active.Add(-1)
		for m := s.maxActive.Load(); n > m && !s.maxActive.CompareAndSwap(m, n); m = s.maxActive.Load() {
		}
		ctx, cancel := s.withTimeout(ctx)
		defer cancel()
		var out, chartOut, errb bytes.Buffer
		e := &env{policy: remote, stdin: strings.NewReader(req.message), stdout: &out, stderr: &errb,
			source: req.source, snap: req.snap, snapName: req.snapName, ctx: ctx}
		if ep.svg {
			e.chart = &chartOut
		}
		runErr := safeRun(commands[ep.cmd], e, append(req.args, ep.extra...))
		switch {
		case ctx.Err() != nil || s.base.Err() != nil:
			s.writeStopped(w, context.Cause(ctx))
		case ep.svg && chartOut.Len() > 0:
			w.Header().Set("Content-Type", "image/svg+xml")
			w.Write(chartOut.Bytes())
		case !ep.svg && out.Len() > 0 && json.Valid(out.Bytes()):
			// An answer, even when the command then fails the way the
			// command line does (plan: nothing fits): the JSON says so.
			w.Header().Set("Content-Type", "application/json")
			w.Write(out.Bytes())
		case runErr == nil:
			writeError(w, http.StatusInternalServerError, errors.New("the command gave no answer"))
		case errors.As(runErr, new(internalError)):
			s.logf("%s %s: %v", r.Method, r.URL.Path, runErr)
			writeError(w, http.StatusInternalServerError, runErr)
		case IsUsage(runErr):
			writeError(w, http.StatusBadRequest, s.explainFlag(ep.cmd, runErr))
		default:
			writeError(w, http.StatusUnprocessableEntity, runErr)
		}
	}
}

// requestContext is the context of a request's work: it ends when the
// client leaves or the server stops.
func (s *server) requestContext(r *http.Request) (context.Context, func()) {
	ctx, cancel := context.WithCancel(r.Context())
	if s.base.Err() != nil {
		// stopped already: AfterFunc would cancel ctx a moment late
		cancel()
	}
	unhook := context.AfterFunc(s.base, cancel)
	return ctx, func() { unhook(); cancel() }
}

// errTimeout is the cause of a context ended by --timeout.
var errTimeout = errors.New("the request's time (batchfit serve --timeout) passed")

// withTimeout bounds ctx by --timeout, if set.
func (s *server) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.opts.timeout > 0 {
		return context.WithTimeoutCause(ctx, s.opts.timeout, errTimeout)
	}
	return context.WithCancel(ctx)
}

// writeStopped answers a request whose work stopped, cause saying why:
// the server is stopping (503), --timeout passed (503), or the client
// left (nobody reads an answer).
func (s *server) writeStopped(w http.ResponseWriter, cause error) {
	switch {
	case s.base.Err() != nil:
		writeError(w, http.StatusServiceUnavailable, errors.New("the server is stopping: send the request again once it is restarted"))
	case errors.Is(cause, errTimeout):
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("the answer took longer than the %s this server computes one for (batchfit serve --timeout): ask for less (fewer levers, a smaller search) or raise the limit", s.opts.timeout))
	}
}
