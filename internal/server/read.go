package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/batchfit/batchfit/capture"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/hf"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/onnx"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
	"github.com/batchfit/batchfit/spec"
)

// Reading a request: its body, read at a minimum rate and within
// --timeout, decoded into the command's fields and uploads (a model file,
// a Hugging Face directory, a memory snapshot) under the limits the
// server states.

// readBody reads and parses a request's body holding one of the reading
// slots, given back on every path, and within --timeout: a body that
// arrives slower than the server's minimum rate, or outlives the
// request's context, stops being read.
func (s *Server) readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, ep endpoint) (req *webRequest, err error) {
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
	grace, rate := s.opts.BodyGrace, s.opts.MinBodyRate
	if grace <= 0 {
		grace = defaultBodyGrace
	}
	if rate <= 0 {
		rate = defaultMinBodyRate
	}
	pace := &paceReader{r: r.Body, ctx: ctx, rc: rc, start: time.Now(), grace: grace, rate: rate}
	r.Body = http.MaxBytesReader(w, pace, s.opts.MaxUpload)
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
func (s *Server) explainFlag(cmd string, err error) error {
	name, ok := job.UndefinedFlag(err)
	if !ok {
		var fe job.FlagError
		if errors.As(err, &fe) {
			return fe.Err // a field, not a command-line flag: no pointer to -h
		}
		return err
	}
	msg := fmt.Sprintf("unknown field %q", name)
	if near := job.Nearest(name, s.flags[cmd], 3); len(near) > 0 {
		msg += fmt.Sprintf("; did you mean %s?", strings.Join(near, " or "))
	}
	return errors.New(msg + " (fields: " + strings.Join(s.flags[cmd], ", ") + ")")
}

var fieldName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// read decodes a request: a JSON object, an urlencoded form or a
// multipart form of fields named as the command's flags, and in a
// multipart form the uploads.
func (s *Server) read(ctx context.Context, r *http.Request, ep endpoint) (*webRequest, error) {
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
			return nil, &requestError{http.StatusRequestEntityTooLarge, fmt.Errorf("a request without uploads is larger than %s", report.FormatBytes(webMaxField))}
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
		if f, ok := s.fields.Lookup(k); ok && jobCommands[ep.cmd] {
			// the job's fields are type-checked, and their choices
			// checked, before the command runs
			if err := f.Check(v); err != nil {
				return nil, badRequest("field %q: %v", k, err)
			}
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
			d = job.Bounds["limit"].Web
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
	if b, ok := job.Bounds[k]; ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64); err == nil && (n > b.Web || n < 0) {
			lim := b.Web
			return badRequest("field %q: %d is outside 0…%d on this server", k, n, lim)
		}
	}
	switch k {
	case "batch":
		b, err := job.ParseBatches(v)
		if err != nil {
			return nil // the command says what is wrong
		}
		if len(b) > webMaxBatches {
			return badRequest("field \"batch\": %d batch sizes, at most %d on this server", len(b), webMaxBatches)
		}
		for _, n := range b {
			if n > job.Bounds["global-batch"].Web {
				return badRequest("field \"batch\": %d is more than %d on this server", n, job.Bounds["global-batch"].Web)
			}
		}
	case "gpu":
		if n, err := gpu.ParseSize(v); err == nil && n > webMaxGPU {
			got, lim := report.FormatBytesApart(n, webMaxGPU)
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
func (s *Server) readMultipart(ctx context.Context, r *http.Request, ep endpoint, boundary string, fields map[string]string, req *webRequest) error {
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
				return &requestError{http.StatusRequestEntityTooLarge, fmt.Errorf("field %q is larger than %s", name, report.FormatBytes(webMaxField))}
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
func (s *Server) readSnapshot(ctx context.Context, u *upload) (*snapshot.Snapshot, error) {
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
		opts.MaxBytes = s.opts.MaxUpload
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
		return spec.NewSource(sp, u.name), nil
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
