package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// FieldError is a config.json field that is missing, of the wrong JSON
// type, out of range, or in contradiction with another field.
type FieldError struct {
	File  string // the config file (or the name ParseConfig was given)
	Field string // the config.json key, as transformers spells it
	Msg   string
}

func (e *FieldError) Error() string { return e.File + ": " + e.Field + ": " + e.Msg }

// fields reads typed values out of a decoded JSON object. The first
// problem is kept in err; later reads return defaults.
type fields struct {
	file string
	m    map[string]json.RawMessage
	err  error
	// prefix names the object the fields sit in ("quantization_config.")
	// in errors.
	prefix string
}

// required marks an integer field without a default.
const required = -1

func (f *fields) fail(field, format string, args ...any) {
	if f.err == nil {
		f.err = &FieldError{File: f.file, Field: f.prefix + field, Msg: fmt.Sprintf(format, args...)}
	}
}

// raw returns the field's JSON text when present and not null.
func (f *fields) raw(key string) (json.RawMessage, bool) {
	r, ok := f.m[key]
	if !ok {
		return nil, false
	}
	r = bytes.TrimSpace(r)
	if string(r) == "null" {
		return nil, false
	}
	return r, true
}

// has reports whether the field is present and not null.
func (f *fields) has(key string) bool {
	_, ok := f.raw(key)
	return ok
}

// describe names a JSON value's type for error messages.
func describe(r json.RawMessage) string {
	const max = 40
	s := string(r)
	if len(s) > max {
		s = s[:max] + "…"
	}
	if len(r) == 0 {
		return "nothing"
	}
	switch r[0] {
	case '"':
		return "the string " + s
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "the boolean " + s
	}
	return s
}

func isNumber(r json.RawMessage) bool {
	return len(r) > 0 && (r[0] == '-' || (r[0] >= '0' && r[0] <= '9'))
}

// int reads an integer field: absent or null gives ok = false.
func (f *fields) int(key string) (int64, bool) {
	r, ok := f.raw(key)
	if !ok {
		return 0, false
	}
	if !isNumber(r) {
		f.fail(key, "want an integer, got %s", describe(r))
		return 0, false
	}
	v, err := strconv.ParseInt(string(r), 10, 64)
	if err != nil {
		f.fail(key, "want an integer, got %s", describe(r))
		return 0, false
	}
	return v, true
}

// size reads a positive size no larger than max; def is used when the
// field is absent or null, and required makes its absence an error.
func (f *fields) size(key string, def, max int64) int64 {
	v, ok := f.int(key)
	if !ok {
		if def == required && f.err == nil {
			f.fail(key, "missing")
		}
		return def
	}
	switch {
	case v <= 0:
		f.fail(key, "must be positive, got %d", v)
	case v > max:
		f.fail(key, "%d is beyond any real model (at most %d accepted)", v, max)
	}
	return v
}

// nonNegative reads an integer that may be zero (token ids).
func (f *fields) nonNegative(key string, def int64) int64 {
	v, ok := f.int(key)
	if !ok {
		return def
	}
	if v < 0 {
		f.fail(key, "must not be negative, got %d", v)
	}
	return v
}

func (f *fields) float(key string, def float64) float64 {
	r, ok := f.raw(key)
	if !ok {
		return def
	}
	if !isNumber(r) {
		f.fail(key, "want a number, got %s", describe(r))
		return def
	}
	v, err := strconv.ParseFloat(string(r), 64)
	if err != nil {
		f.fail(key, "want a number, got %s", describe(r))
		return def
	}
	return v
}

// prob reads a dropout probability in [0, 1).
func (f *fields) prob(key string, def float64) float64 {
	v := f.float(key, def)
	if v < 0 || v >= 1 {
		f.fail(key, "a dropout probability must lie in [0, 1), got %g", v)
	}
	return v
}

// positiveFloat reads a number > 0 (norm epsilons).
func (f *fields) positiveFloat(key string, def float64) float64 {
	v := f.float(key, def)
	if !(v > 0) {
		f.fail(key, "must be positive, got %g", v)
	}
	return v
}

func (f *fields) boolean(key string, def bool) bool {
	r, ok := f.raw(key)
	if !ok {
		return def
	}
	switch string(r) {
	case "true":
		return true
	case "false":
		return false
	}
	f.fail(key, "want true or false, got %s", describe(r))
	return def
}

func (f *fields) str(key, def string) string {
	r, ok := f.raw(key)
	if !ok {
		return def
	}
	var s string
	if r[0] != '"' || json.Unmarshal(r, &s) != nil {
		f.fail(key, "want a string, got %s", describe(r))
		return def
	}
	return s
}

// strings reads an array of strings (architectures).
func (f *fields) strings(key string) []string {
	r, ok := f.raw(key)
	if !ok {
		return nil
	}
	var ss []string
	if r[0] != '[' || json.Unmarshal(r, &ss) != nil {
		f.fail(key, "want an array of strings, got %s", describe(r))
		return nil
	}
	return ss
}
