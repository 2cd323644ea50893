package server

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
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
)

//go:embed web
var webFiles embed.FS

// Options are the server's limits, and how it runs a command.
type Options struct {
	// MaxUpload bounds a request's body.
	MaxUpload int64
	// Workers is how many requests are answered at once; the others wait
	// their turn (none is refused for being one too many).
	Workers int
	// Timeout bounds the reading of a request's upload, and then the
	// computing of its answer (0: none): past it the work stops and the
	// request is answered 503.
	Timeout time.Duration
	// Loopback: the server listens on the loopback interface, so it
	// answers only requests addressed to this machine by a loopback name
	// (a web page elsewhere cannot reach it by rebinding a name of its
	// own to 127.0.0.1).
	Loopback bool
	// Base ends when the server stops: the work under way stops and its
	// requests are answered 503 (nil: never).
	Base context.Context
	// Log receives the requests' internal errors (nil: standard error).
	Log io.Writer
	// BodyGrace and MinBodyRate: a body must arrive at MinBodyRate bytes
	// a second after BodyGrace (0: five seconds, 32 KiB a second).
	BodyGrace   time.Duration
	MinBodyRate int64
	// Fields are the job's fields requests are read by (nil: job.Fields).
	Fields job.Table
	// Run runs the command cmd (estimate, sweep, maxbatch, plan, oom,
	// snapshot, models, gpus) with args and what the request sent (in),
	// writing its answer, JSON, to stdout, under ctx. It is the command
	// line's own commands, run as a remote request may: no path of this
	// machine read, no process started. An error that job.IsUsage
	// reports is the request's fault (400); a panic is recovered and
	// answered 500.
	Run func(ctx context.Context, cmd string, args []string, in Inputs, stdout io.Writer) error
}

// Inputs are what a request hands a command besides its arguments.
type Inputs struct {
	// Message is the command's standard input (an out-of-memory message).
	Message string
	// Source is an uploaded model (nil: none).
	Source predict.Source
	// Snapshot and SnapshotName are an uploaded memory snapshot (nil:
	// none).
	Snapshot     *snapshot.Snapshot
	SnapshotName string
	// Chart receives the chart the command draws, in place of the file
	// its flag names (nil: the endpoint answers no chart).
	Chart io.Writer
}

// DefaultTimeout is serve's --timeout: a minute is many times what
// the largest request within the server's bounds takes to answer (the
// planner's work is bounded, see plan.MaxPredictions), and it stops a
// request that has gone wrong from holding a worker for long.
const DefaultTimeout = time.Minute

// IsLoopback reports whether a listener's address is on the loopback
// interface.
func IsLoopback(a net.Addr) bool {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server answers the page and its API.
type Server struct {
	opts Options
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

// New is the server of the page and its API, with the limits of o, which
// runs the commands with o.Run.
func New(o Options) *Server {
	s := &Server{opts: o, mux: http.NewServeMux(), slots: make(chan struct{}, o.Workers), reading: make(chan struct{}, 4*o.Workers),
		flags: map[string][]string{}, base: o.Base, openModel: uploadedModel, fields: o.Fields}
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
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	if s.opts.Loopback && !loopbackHost(r.Host) {
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

// Active is how many requests are being answered now (each holding one
// of the Workers' slots).
func (s *Server) Active() int { return int(s.active.Load()) }

// MaxActive is the most requests answered at once so far.
func (s *Server) MaxActive() int { return int(s.maxActive.Load()) }

// logf writes one line to the server's log.
func (s *Server) logf(format string, args ...any) {
	w := s.opts.Log
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

func (s *Server) serveFields(w http.ResponseWriter, r *http.Request) {
	out := fieldsJSON{Fields: s.fields, Commands: map[string][]string{}}
	for _, ep := range endpoints {
		out.Commands[ep.cmd] = s.flags[ep.cmd]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func (s *Server) catalog(cmd string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var out bytes.Buffer
		if err := s.run(context.Background(), cmd, []string{"--json"}, Inputs{}, &out); err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(out.Bytes())
	}
}

// APIError is the body of every error answer.
type APIError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(APIError{report.ClipMessage(err.Error())})
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

func (s *Server) handle(ep endpoint) http.HandlerFunc {
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
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("the request is larger than the %s this server accepts (batchfit serve --max-upload)", report.FormatBytes(mbe.Limit)))
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
		var out, chartOut bytes.Buffer
		in := Inputs{Message: req.message, Source: req.source, Snapshot: req.snap, SnapshotName: req.snapName}
		if ep.svg {
			in.Chart = &chartOut
		}
		runErr := s.run(ctx, ep.cmd, append(req.args, ep.extra...), in, &out)
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
		case job.IsUsage(runErr):
			writeError(w, http.StatusBadRequest, s.explainFlag(ep.cmd, runErr))
		default:
			writeError(w, http.StatusUnprocessableEntity, runErr)
		}
	}
}

// requestContext is the context of a request's work: it ends when the
// client leaves or the server stops.
func (s *Server) requestContext(r *http.Request) (context.Context, func()) {
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
func (s *Server) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.opts.Timeout > 0 {
		return context.WithTimeoutCause(ctx, s.opts.Timeout, errTimeout)
	}
	return context.WithCancel(ctx)
}

// writeStopped answers a request whose work stopped, cause saying why:
// the server is stopping (503), --timeout passed (503), or the client
// left (nobody reads an answer).
func (s *Server) writeStopped(w http.ResponseWriter, cause error) {
	switch {
	case s.base.Err() != nil:
		writeError(w, http.StatusServiceUnavailable, errors.New("the server is stopping: send the request again once it is restarted"))
	case errors.Is(cause, errTimeout):
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("the answer took longer than the %s this server computes one for (batchfit serve --timeout): ask for less (fewer levers, a smaller search) or raise the limit", s.opts.Timeout))
	}
}

// run runs a command with s.opts.Run, its panic (a bug, not bad input)
// recovered as an internalError.
func (s *Server) run(ctx context.Context, cmd string, args []string, in Inputs, stdout io.Writer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = internalError{r}
		}
	}()
	return s.opts.Run(ctx, cmd, args, in, stdout)
}

// internalError is a command's panic, recovered: a bug, not bad input.
type internalError struct{ v any }

func (e internalError) Error() string {
	return fmt.Sprintf("internal error: %v (please report it)", e.v)
}
