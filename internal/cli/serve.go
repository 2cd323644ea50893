package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/batchfit/batchfit/capture"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/hf"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
	"github.com/batchfit/batchfit/spec"
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
}

// endpoint is one POST of the API: the command it runs and what it
// returns.
type endpoint struct {
	cmd string
	svg bool
	// extra are arguments the endpoint adds itself.
	extra []string
}

var endpoints = map[string]endpoint{
	"/api/estimate":     {cmd: "estimate", extra: []string{"--json"}},
	"/api/estimate.svg": {cmd: "estimate", svg: true, extra: []string{"--json", "--timeline", "chart"}},
	"/api/sweep":        {cmd: "sweep", extra: []string{"--json"}},
	"/api/sweep.svg":    {cmd: "sweep", svg: true, extra: []string{"--json", "--svg", "chart"}},
	"/api/maxbatch":     {cmd: "maxbatch", extra: []string{"--json"}},
	"/api/plan":         {cmd: "plan", extra: []string{"--json"}},
	"/api/oom":          {cmd: "oom", extra: []string{"--json"}},
	"/api/snapshot":     {cmd: "snapshot", extra: []string{"--json"}},
	"/api/snapshot.svg": {cmd: "snapshot", svg: true, extra: []string{"--json", "--timeline", "chart"}},
}

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
var webSolveLimit = map[string]int64{"layers": bounds["layers"].web, "hidden": bounds["hidden"].web, "seq": bounds["seq"].web}

func newServer(o serveOptions) *server {
	s := &server{opts: o, mux: http.NewServeMux(), slots: make(chan struct{}, o.workers), reading: make(chan struct{}, 4*o.workers),
		flags: map[string][]string{}, base: o.base, openModel: uploadedModel}
	if s.base == nil {
		s.base = context.Background()
	}
	for _, ep := range endpoints {
		s.flags[ep.cmd] = commandFlags(ep.cmd)
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

// commandFlags lists the flags a command defines, read from its help.
func commandFlags(cmd string) []string {
	var help bytes.Buffer
	_ = safeRun(commands[cmd], &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &help, web: true}, []string{"-h"})
	var out []string
	for _, line := range strings.Split(help.String(), "\n") {
		if f, ok := strings.CutPrefix(line, "  -"); ok {
			name, _, _ := strings.Cut(f, " ")
			if !reserved[name] {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (s *server) catalog(cmd string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var out bytes.Buffer
		if err := safeRun(commands[cmd], &env{stdout: &out, stderr: io.Discard, web: true}, []string{"--json"}); err != nil {
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
		e := &env{web: true, stdin: strings.NewReader(req.message), stdout: &out, stderr: &errb,
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

// readBody reads and parses a request's body holding one of the reading
// slots, given back on every path, and within --timeout: a body that
// arrives slower than the server's minimum rate, or outlives the
// request's context, stops being read.
func (s *server) readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, ep endpoint) (req *webRequest, err error) {
	defer func() { <-s.reading }()
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	rc := http.NewResponseController(w)
	// A read blocked on the connection returns when ctx ends: its
	// deadline is moved to now.
	unhook := context.AfterFunc(ctx, func() { rc.SetReadDeadline(time.Now()) })
	defer func() {
		if !unhook() && err == nil {
			// ctx ended while the body was parsed: its deadline may
			// stand, and would end the connection under the answer.
			err = context.Cause(ctx)
		}
		if err != nil {
			// Nothing more is read: the rest of a body refused is not
			// waited for (net/http would read it before answering), and
			// the connection, whose context the deadline's passing
			// cancels, closes after the answer.
			w.Header().Set("Connection", "close")
			rc.SetReadDeadline(time.Now())
			return
		}
		// The body is read: the connection's deadline is cleared, or
		// the server's wait for the client's leaving would take its
		// passing for the client closing.
		rc.SetReadDeadline(time.Time{})
	}()
	grace, rate := s.opts.bodyGrace, s.opts.minBodyRate
	if grace <= 0 {
		grace = defaultBodyGrace
	}
	if rate <= 0 {
		rate = defaultMinBodyRate
	}
	pace := &paceReader{r: r.Body, ctx: ctx, rc: rc, start: time.Now(), grace: grace, rate: rate}
	r.Body = http.MaxBytesReader(w, pace, s.opts.maxUpload)
	req, err = s.read(ctx, r, ep)
	if err != nil && pace.slow {
		// The parser that met the slow body (a multipart part's header,
		// read through a bufio.Reader) may hand on another error, or
		// none but the context the deadline's passing cancelled: the
		// body was too slow, whatever came of it.
		err = errSlowBody
	}
	return req, err
}

// A body must arrive at defaultMinBodyRate after defaultBodyGrace: a
// client sending a byte now and then holds a reading slot for seconds,
// not for the server's whole read timeout. At this rate the largest
// default upload (64 MiB) takes about half an hour: any working link is
// faster.
const (
	defaultBodyGrace   = 5 * time.Second
	defaultMinBodyRate = 32 << 10 // bytes a second
)

// errSlowBody is a body arriving slower than the server reads bodies.
var errSlowBody = &requestError{http.StatusRequestTimeout, errors.New("the request's body arrived too slowly: the server stopped reading it")}

// paceReader reads a request's body while it arrives at rate bytes a
// second after grace, and while ctx lasts: before each read the
// connection's deadline is set to when the next byte is due.
type paceReader struct {
	r     io.ReadCloser
	ctx   context.Context
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	n     int64
	// slow: the body fell behind the rate, and stopped being read.
	slow bool
}

func (p *paceReader) Read(b []byte) (int, error) {
	if p.ctx.Err() != nil {
		return 0, context.Cause(p.ctx)
	}
	due := p.start.Add(p.grace + time.Duration(p.n+1)*time.Second/time.Duration(p.rate))
	if time.Now().After(due) {
		p.slow = true
		return 0, errSlowBody
	}
	// Where the connection takes no deadline (not HTTP/1), the rate
	// is checked between reads only.
	_ = p.rc.SetReadDeadline(due)
	n, err := p.r.Read(b)
	p.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		// The connection's deadline passing cancels r.Context, and so
		// ctx: the rate's deadline is told from ctx's own end (which
		// moves the deadline to now) by the time.
		if errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(due) {
			p.slow = true
			return n, errSlowBody
		}
		if p.ctx.Err() != nil {
			return n, context.Cause(p.ctx)
		}
	}
	return n, err
}

func (p *paceReader) Close() error { return p.r.Close() }

// explainFlag turns the flag package's complaint about an unknown field
// into one that names the nearest field the endpoint takes.
func (s *server) explainFlag(cmd string, err error) error {
	name, ok := undefinedFlag(err)
	if !ok {
		var fe flagError
		if errors.As(err, &fe) {
			return fe.err // a field, not a command-line flag: no pointer to -h
		}
		return err
	}
	msg := fmt.Sprintf("unknown field %q", name)
	if near := models.Nearest(name, s.flags[cmd], 3); len(near) > 0 {
		msg += fmt.Sprintf("; did you mean %s?", strings.Join(near, " or "))
	}
	return errors.New(msg + " (fields: " + strings.Join(s.flags[cmd], ", ") + ")")
}

var fieldName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// read decodes a request: a JSON object, an urlencoded form or a
// multipart form of fields named as the command's flags, and in a
// multipart form the uploads.
func (s *server) read(ctx context.Context, r *http.Request, ep endpoint) (*webRequest, error) {
	req := &webRequest{}
	fields := map[string]string{}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "multipart/form-data" {
		// Only a multipart form carries uploads; anything else is a few
		// fields (an OOM message at most a log excerpt).
		raw, err := io.ReadAll(io.LimitReader(r.Body, webMaxField+1))
		if err != nil {
			return nil, err
		}
		if len(raw) > webMaxField {
			return nil, &requestError{http.StatusRequestEntityTooLarge, fmt.Errorf("a request without uploads is larger than %s", fmtBytes(webMaxField))}
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
	}
	if ct == "application/x-www-form-urlencoded" || ct == "" {
		// curl -d sends a JSON object as a form: read what it is.
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		ct = "application/x-www-form-urlencoded"
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] == '{' {
			ct = "application/json"
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
	}
	switch ct {
	case "application/json":
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) || errors.Is(err, errSlowBody) || ctx.Err() != nil {
				return nil, err
			}
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, badRequest("the body is not a JSON object: %v", err)
		}
		for k, v := range obj {
			switch v := v.(type) {
			case string:
				fields[k] = v
			case json.Number:
				fields[k] = v.String()
			case bool:
				fields[k] = strconv.FormatBool(v)
			case nil:
			default:
				return nil, badRequest("field %q: want a string, a number or true/false", k)
			}
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, badRequest("reading the form: %v", err)
		}
		for k, v := range r.PostForm {
			fields[k] = v[len(v)-1]
		}
	case "multipart/form-data":
		if err := s.readMultipart(ctx, r, ep, params["boundary"], fields, req); err != nil {
			return nil, err
		}
	default:
		return nil, badRequest("unsupported content type %q: send JSON, a form or a multipart form", ct)
	}
	if m, ok := fields["message"]; ok {
		req.message = m
		delete(fields, "message")
	}
	if ep.cmd == "oom" && strings.TrimSpace(req.message) == "" {
		return nil, badRequest("field \"message\": paste the out-of-memory message")
	}
	if len(fields) > webMaxFields {
		return nil, badRequest("%d fields: at most %d", len(fields), webMaxFields)
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := fields[k]
		if !fieldName.MatchString(k) || reserved[k] {
			return nil, badRequest("field %q cannot be set", k)
		}
		if !slices.Contains(s.flags[ep.cmd], k) {
			return nil, s.explainFlag(ep.cmd, fmt.Errorf("flag provided but not defined: -%s", k))
		}
		if err := webLimit(k, v); err != nil {
			return nil, err
		}
		req.args = append(req.args, "--"+k+"="+v)
	}
	if ep.cmd == "maxbatch" {
		// The search's own limit (solve.DefaultLimit, 2^24) is past
		// this server's bound of --limit: a request that sets none gets
		// the bound, the dimension's where it has one.
		d, ok := webSolveLimit[fields["solve"]]
		if !ok {
			d = bounds["limit"].web
		}
		if fields["limit"] == "" {
			req.args = append(req.args, "--limit="+strconv.FormatInt(d, 10))
		} else if ok {
			if n, err := strconv.ParseInt(fields["limit"], 0, 64); err == nil && n > d {
				return nil, badRequest("field \"limit\": at most %d when solving for %s on this server", d, fields["solve"])
			}
		}
	}
	return req, nil
}

// webLimit checks one field against this server's bounds, parsing numbers
// as the flag package does (any base, underscores), so that no spelling
// of a number passes the check and then means more.
func webLimit(k, v string) error {
	if b, ok := bounds[k]; ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64); err == nil && (n > b.web || n < 0) {
			lim := b.web
			return badRequest("field %q: %d is outside 0…%d on this server", k, n, lim)
		}
	}
	switch k {
	case "batch":
		b, err := parseBatches(v)
		if err != nil {
			return nil // the command says what is wrong
		}
		if len(b) > webMaxBatches {
			return badRequest("field \"batch\": %d batch sizes, at most %d on this server", len(b), webMaxBatches)
		}
		for _, n := range b {
			if n > bounds["global-batch"].web {
				return badRequest("field \"batch\": %d is more than %d on this server", n, bounds["global-batch"].web)
			}
		}
	case "gpu":
		if n, err := gpu.ParseSize(v); err == nil && n > webMaxGPU {
			got, lim := fmtBytesApart(n, webMaxGPU)
			return badRequest("field \"gpu\": %s is more than %s on this server", got, lim)
		}
	}
	return nil
}

// readMultipart reads a multipart form part by part into memory (never to
// disk, as ParseMultipartForm would): fields, and the uploads: model_file
// (a .yaml spec, an .onnx file or a config.json), model_dir (the files of a
// Hugging Face model directory, safetensors files as their headers, with
// the whole sizes in fields size:NAME and the directory's name in dir), and
// snapshot (a memory snapshot pickle).
func (s *server) readMultipart(ctx context.Context, r *http.Request, ep endpoint, boundary string, fields map[string]string, req *webRequest) error {
	if boundary == "" {
		return badRequest("multipart form without a boundary")
	}
	mr := multipart.NewReader(r.Body, boundary)
	var dir []*upload
	var modelFile, snapFile *upload
	seen := map[string]bool{}
	for {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) || errors.Is(err, errSlowBody) || ctx.Err() != nil {
				return err
			}
			return badRequest("reading the multipart form: %v", err)
		}
		name := p.FormName()
		// Of two parts of one name one would be dropped unsaid: only
		// model_dir's files share a name.
		if seen[name] && name != "model_dir" {
			return badRequest("field %q is sent twice", name)
		}
		seen[name] = true
		if len(fields) > webMaxFields {
			return badRequest("more than %d fields", webMaxFields)
		}
		if p.FileName() == "" {
			v, err := io.ReadAll(io.LimitReader(p, webMaxField+1))
			if err != nil {
				return err
			}
			if len(v) > webMaxField {
				return &requestError{http.StatusRequestEntityTooLarge, fmt.Errorf("field %q is larger than %s", name, fmtBytes(webMaxField))}
			}
			fields[name] = string(v)
			continue
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return err
		}
		u := &upload{name: path.Base(strings.ReplaceAll(p.FileName(), "\\", "/")), data: data}
		if u.name == "." || u.name == "/" || u.name == ".." {
			return badRequest("upload %q has no file name", p.FileName())
		}
		switch name {
		case "model_file":
			modelFile = u
		case "model_dir":
			if len(dir) == webMaxFiles {
				return badRequest("more than %d files in model_dir", webMaxFiles)
			}
			dir = append(dir, u)
		case "snapshot":
			snapFile = u
		default:
			return badRequest("unknown upload %q: want model_file, model_dir or snapshot", name)
		}
	}
	if modelFile != nil && len(dir) > 0 {
		return badRequest("upload a model file or a model directory, not both")
	}
	// snapshot takes a model for the prediction beside the recording
	// (snapshot --model)
	takesModel := ep.cmd == "estimate" || ep.cmd == "sweep" || ep.cmd == "maxbatch" || ep.cmd == "plan" || ep.cmd == "snapshot"
	if (modelFile != nil || len(dir) > 0) && !takesModel {
		return badRequest("%s takes no model upload", ep.cmd)
	}
	if snapFile != nil && ep.cmd != "snapshot" {
		return badRequest("%s takes no snapshot upload", ep.cmd)
	}
	var err error
	switch {
	case modelFile != nil:
		req.source, err = s.openModel(modelFile)
	case len(dir) > 0:
		req.source, err = uploadedDir(dir, fields)
	}
	if err != nil {
		return &requestError{http.StatusUnprocessableEntity, err}
	}
	for k := range fields {
		if strings.HasPrefix(k, "size:") || k == "dir" {
			delete(fields, k)
		}
	}
	if snapFile != nil {
		snap, err := s.readSnapshot(ctx, snapFile)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return &requestError{http.StatusUnprocessableEntity, fmt.Errorf("%s: %w", snapFile.name, err)}
		}
		req.snap, req.snapName = snap, snapFile.name
	}
	return nil
}

// readSnapshot reads an uploaded snapshot, gzip-compressed or not (the
// command line reads both: snapshot.ReadFile), while ctx lasts.
func (s *server) readSnapshot(ctx context.Context, u *upload) (*snapshot.Snapshot, error) {
	opts := snapshot.Options{Frames: true}
	var r io.Reader = &ctxReader{ctx: ctx, Reader: bytes.NewReader(u.data)}
	if len(u.data) >= 2 && u.data[0] == 0x1f && u.data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(u.data))
		if err != nil {
			return nil, fmt.Errorf("reading the gzip stream: %w", err)
		}
		defer zr.Close()
		r = &ctxReader{ctx: ctx, Reader: zr}
		// Decompressed, the snapshot is bounded as an upload is.
		opts.MaxBytes = s.opts.maxUpload
	}
	return snapshot.Read(r, opts)
}

// ctxReader reads while ctx lasts; it has its reader's length, if any, so
// that snapshot.Read checks declared lengths against it.
type ctxReader struct {
	ctx context.Context
	io.Reader
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.Reader.Read(b)
}

func (c *ctxReader) Len() int {
	if l, ok := c.Reader.(interface{ Len() int }); ok {
		return l.Len()
	}
	return -1
}

type upload struct {
	name string
	data []byte
}

// uploadedModel reads a single uploaded model file with the reader its
// extension names, as the command line does for a path.
func uploadedModel(u *upload) (predict.Source, error) {
	switch ext := strings.ToLower(path.Ext(u.name)); ext {
	case ".yaml", ".yml":
		sp, err := spec.Parse(u.data, u.name)
		if err != nil {
			return nil, err
		}
		return specSource{s: sp, name: u.name}, nil
	case ".onnx":
		return onnx.Parse(u.data, u.name)
	case ".bfgraph", ".gz":
		if ext == ".gz" && !strings.HasSuffix(strings.ToLower(u.name), ".bfgraph.gz") {
			return nil, fmt.Errorf("%s: unknown model file type %q (want .yaml, .onnx, .bfgraph or config.json)", u.name, ext)
		}
		return capture.Read(u.name, bytes.NewReader(u.data))
	case ".json":
		dir := strings.TrimSuffix(u.name, ext)
		if dir == "config" {
			dir = "model"
		}
		return hf.OpenFS(&hf.Headers{Dir: dir, Files: map[string]hf.HeaderFile{hf.ConfigName: {Data: u.data, Size: int64(len(u.data))}}}, dir)
	default:
		return nil, fmt.Errorf("%s: unknown model file type %q (want .yaml, .onnx, .bfgraph or config.json)", u.name, ext)
	}
}

// uploadedDir opens the files of an uploaded Hugging Face model directory:
// config.json, and the safetensors files' headers with their whole sizes.
func uploadedDir(files []*upload, fields map[string]string) (predict.Source, error) {
	name := path.Base(strings.ReplaceAll(fields["dir"], "\\", "/"))
	if name == "." || name == "/" || name == ".." || name == "" {
		name = "model"
	}
	h := &hf.Headers{Dir: name, Files: map[string]hf.HeaderFile{}}
	for _, u := range files {
		size := int64(len(u.data))
		if v, ok := fields["size:"+u.name]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < size {
				return nil, fmt.Errorf("size:%s = %q: want the whole file's size in bytes, at least the %d bytes sent", u.name, v, size)
			}
			size = n
		}
		h.Files[u.name] = hf.HeaderFile{Data: u.data, Size: size}
	}
	return hf.OpenFS(h, name)
}
