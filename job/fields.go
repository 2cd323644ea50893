package job

import (
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is the type of a field's value.
type Kind string

const (
	String   Kind = "string"
	Int      Kind = "int"
	Float    Kind = "float"
	Bool     Kind = "bool"
	Duration Kind = "duration"
)

// Field is one field of a Job: its flag, its entry in a web request and
// its control on the page.
type Field struct {
	// Name is the flag's name and the JSON name of the Job's field.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Choices are the values it takes, where it takes one of a set (the
	// owning package's table: train's optimizers, precisions, ...).
	// Aliases the owning package reads are accepted too.
	Choices []string `json:"choices,omitempty"`
	// Default is the value where none is given; "" for a field whose
	// unset state is no value at all (--weight-decay: the optimizer's).
	Default string `json:"default,omitempty"`
	// Defaults are the commands' own defaults, where one differs.
	Defaults map[string]string `json:"defaults,omitempty"`
	Help     string            `json:"help"`
	// Env are the environment variables, first first, that give the
	// value where the field is not given (on the command line only: a web
	// request never reads the server's environment).
	Env []string `json:"env,omitempty"`
	// Commands are the commands that take the field; nil: every job
	// command.
	Commands []string `json:"commands,omitempty"`

	// parse reads a value as the request will (the owning package's
	// parser, which knows its aliases); nil: any value of the kind.
	parse func(string) error
	// index is the Job field's index.
	index int
}

// DefaultFor is the field's default for command cmd.
func (f Field) DefaultFor(cmd string) string {
	if d, ok := f.Defaults[cmd]; ok {
		return d
	}
	return f.Default
}

// takes reports whether command cmd takes the field.
func (f Field) takes(cmd string) bool {
	return f.Commands == nil || slices.Contains(f.Commands, cmd)
}

// Check reads v as the field's kind and, for a field of choices, as one
// of them (or an alias its owner reads): the server refuses a value here,
// before any command runs.
func (f Field) Check(v string) error {
	switch f.Kind {
	case Int:
		if _, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64); err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
	case Float:
		if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
	case Bool:
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
	case Duration:
		if _, err := time.ParseDuration(v); err != nil {
			return fmt.Errorf("%q is not a duration such as 8ms", v)
		}
	}
	if len(f.Choices) == 0 {
		if f.parse != nil {
			return f.parse(v)
		}
		return nil
	}
	if slices.ContainsFunc(f.Choices, func(c string) bool { return squash(c) == squash(v) }) {
		return nil
	}
	if f.parse != nil {
		if err := f.parse(v); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("%q: want %s", v, orList(f.Choices))
}

// squash is a choice as compared: case, '_' and '-' aside.
func squash(s string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(strings.TrimSpace(s)))
}

// orList is "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Table is the fields of a Job, one entry a field.
type Table []Field

// Fields is the table of a Job's fields, with the choices of the packages
// that own them.
var Fields = NewTable(DefaultChoices())

// Lookup is the field named name.
func (t Table) Lookup(name string) (Field, bool) {
	for _, f := range t {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// For are the fields command cmd takes.
func (t Table) For(cmd string) []Field {
	var out []Field
	for _, f := range t {
		if f.takes(cmd) {
			out = append(out, f)
		}
	}
	return out
}

// Names are the names of the fields command cmd takes.
func (t Table) Names(cmd string) []string {
	var out []string
	for _, f := range t.For(cmd) {
		out = append(out, f.Name)
	}
	return out
}

var jobType = reflect.TypeFor[Job]()

// fieldIndex is the index of the Job field whose JSON name is name.
func fieldIndex(name string) (int, bool) {
	for i := range jobType.NumField() {
		tag, _, _ := strings.Cut(jobType.Field(i).Tag.Get("json"), ",")
		if tag == name {
			return i, true
		}
	}
	return 0, false
}

// kindOf is the Kind of a Job field's Go type.
func kindOf(t reflect.Type) Kind {
	switch t {
	case reflect.TypeFor[time.Duration]():
		return Duration
	case reflect.TypeFor[*float64]():
		return Float
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return Int
	case reflect.Float64:
		return Float
	case reflect.Bool:
		return Bool
	}
	return String
}

// Register defines on fs a flag for each field command cmd takes, bound
// to j's field and set to its default.
func Register(fs *flag.FlagSet, j *Job, cmd string) { Fields.Register(fs, j, cmd) }

// Register defines on fs a flag for each field of t that command cmd
// takes, bound to j's field and set to its default.
func (t Table) Register(fs *flag.FlagSet, j *Job, cmd string) {
	v := reflect.ValueOf(j).Elem()
	for _, f := range t.For(cmd) {
		p := v.Field(f.index).Addr().Interface()
		def := f.DefaultFor(cmd)
		switch p := p.(type) {
		case *string:
			if f.Name == "checkpoint" {
				// unset is "": an explicit value is told from the default
				*p = ""
				fs.Var(&setString{p: p, def: def}, f.Name, f.Help)
				continue
			}
			fs.StringVar(p, f.Name, def, f.Help)
		case *int:
			n, _ := strconv.Atoi(def)
			fs.IntVar(p, f.Name, n, f.Help)
		case *int64:
			n, _ := strconv.ParseInt(def, 10, 64)
			fs.Int64Var(p, f.Name, n, f.Help)
		case *float64:
			x, _ := strconv.ParseFloat(def, 64)
			fs.Float64Var(p, f.Name, x, f.Help)
		case **float64:
			*p = nil
			fs.Var(optFloat{p}, f.Name, f.Help)
		case *bool:
			b, _ := strconv.ParseBool(def)
			fs.BoolVar(p, f.Name, b, f.Help)
		case *time.Duration:
			d, _ := time.ParseDuration(def)
			fs.DurationVar(p, f.Name, d, f.Help)
		default:
			panic(fmt.Sprintf("job: field %s of type %T has no flag", f.Name, p))
		}
	}
}

// setDefaults sets each field command cmd takes to its default.
func (t Table) setDefaults(j *Job, cmd string) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	t.Register(fs, j, cmd)
}

// setString is a string flag whose unset state is "" and shows as def:
// an explicit value that contradicts another flag is refused, the
// default is not.
type setString struct {
	p   *string
	def string
}

func (s *setString) String() string {
	if s.p == nil {
		return ""
	}
	if *s.p == "" {
		return s.def
	}
	return *s.p
}

func (s *setString) Set(v string) error {
	*s.p = v
	return nil
}

// optFloat is a float flag whose unset state is nil: its help shows no
// default, since the default depends on other fields.
type optFloat struct{ p **float64 }

func (o optFloat) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return strconv.FormatFloat(**o.p, 'g', -1, 64)
}

func (o optFloat) Set(v string) error {
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return errors.New("parse error")
	}
	*o.p = &x
	return nil
}
