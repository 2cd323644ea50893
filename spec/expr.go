package spec

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxExprLen bounds the text of one expression, so that parsing (which
// recurses on parentheses) stays cheap whatever the input.
const maxExprLen = 256

// expr is an integer expression over symbols: literals, symbols ($name or
// name), + - * / // and parentheses.
type expr struct {
	op   byte // 0: literal, 'v': symbol, 'n': negation, '+', '-', '*', '/', 'f' (floor division)
	val  int64
	sym  string
	a, b *expr
}

func lit(v int64) *expr { return &expr{val: v} }

// parseExpr parses s. Symbols may be written $name or name.
func parseExpr(s string) (*expr, error) {
	if len(s) > maxExprLen {
		return nil, fmt.Errorf("expression longer than %d characters", maxExprLen)
	}
	p := &exprParser{s: s}
	p.next()
	e, err := p.sum()
	if err != nil {
		return nil, err
	}
	if p.tok != "" {
		return nil, fmt.Errorf("unexpected %q in %q", p.tok, s)
	}
	return e, nil
}

type exprParser struct {
	s   string
	pos int
	tok string // current token; "" at the end
	err error
}

func isIdentStart(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }

func (p *exprParser) next() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
	if p.pos >= len(p.s) {
		p.tok = ""
		return
	}
	start := p.pos
	c := p.s[p.pos]
	switch {
	case '0' <= c && c <= '9':
		for p.pos < len(p.s) && ('0' <= p.s[p.pos] && p.s[p.pos] <= '9' || p.s[p.pos] == '_') {
			p.pos++
		}
	case c == '$' || isIdentStart(c):
		p.pos++
		for p.pos < len(p.s) && isIdentChar(p.s[p.pos]) {
			p.pos++
		}
	case c == '/' && p.pos+1 < len(p.s) && p.s[p.pos+1] == '/':
		p.pos += 2
	default:
		p.pos++
	}
	p.tok = p.s[start:p.pos]
}

// sum := product (('+' | '-') product)*
func (p *exprParser) sum() (*expr, error) {
	e, err := p.product()
	for err == nil && (p.tok == "+" || p.tok == "-") {
		op := p.tok[0]
		p.next()
		var r *expr
		if r, err = p.product(); err == nil {
			e = &expr{op: op, a: e, b: r}
		}
	}
	return e, err
}

// product := unary (('*' | '/' | '//') unary)*
func (p *exprParser) product() (*expr, error) {
	e, err := p.unary()
	for err == nil && (p.tok == "*" || p.tok == "/" || p.tok == "//") {
		op := p.tok[0]
		if p.tok == "//" {
			op = 'f'
		}
		p.next()
		var r *expr
		if r, err = p.unary(); err == nil {
			e = &expr{op: op, a: e, b: r}
		}
	}
	return e, err
}

// unary := '-' unary | '+' unary | primary
func (p *exprParser) unary() (*expr, error) {
	switch p.tok {
	case "-":
		p.next()
		e, err := p.unary()
		if err != nil {
			return nil, err
		}
		if e.op == 0 && e.val != math.MinInt64 {
			return lit(-e.val), nil
		}
		return &expr{op: 'n', a: e}, nil
	case "+":
		p.next()
		return p.unary()
	}
	return p.primary()
}

// primary := integer | symbol | '(' sum ')'
func (p *exprParser) primary() (*expr, error) {
	t := p.tok
	switch {
	case t == "":
		return nil, fmt.Errorf("incomplete expression %q", p.s)
	case '0' <= t[0] && t[0] <= '9':
		v, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, 64)
		if err != nil || strings.HasSuffix(t, "_") {
			return nil, fmt.Errorf("bad integer %q", t)
		}
		p.next()
		return lit(v), nil
	case t[0] == '$' || isIdentStart(t[0]):
		name := strings.TrimPrefix(t, "$")
		if name == "" || !isIdentStart(name[0]) {
			return nil, fmt.Errorf("bad symbol %q in %q", t, p.s)
		}
		p.next()
		return &expr{op: 'v', sym: name}, nil
	case t == "(":
		p.next()
		e, err := p.sum()
		if err != nil {
			return nil, err
		}
		if p.tok != ")" {
			return nil, fmt.Errorf("missing ')' in %q", p.s)
		}
		p.next()
		return e, nil
	}
	return nil, fmt.Errorf("unexpected %q in %q", t, p.s)
}

// walk calls fn for every symbol e mentions.
func (e *expr) walk(fn func(sym string)) {
	if e == nil {
		return
	}
	if e.op == 'v' {
		fn(e.sym)
	}
	e.a.walk(fn)
	e.b.walk(fn)
}

// constant reports whether e mentions no symbol.
func (e *expr) constant() bool {
	c := true
	e.walk(func(string) { c = false })
	return c
}

var errOverflow = errors.New("integer overflow")

// eval computes e with the given symbol values.
func (e *expr) eval(env map[string]int64) (int64, error) {
	switch e.op {
	case 0:
		return e.val, nil
	case 'v':
		v, ok := env[e.sym]
		if !ok {
			return 0, fmt.Errorf("symbol %q has no value", e.sym)
		}
		return v, nil
	}
	a, err := e.a.eval(env)
	if err != nil {
		return 0, err
	}
	if e.op == 'n' {
		if a == math.MinInt64 {
			return 0, errOverflow
		}
		return -a, nil
	}
	b, err := e.b.eval(env)
	if err != nil {
		return 0, err
	}
	switch e.op {
	case '+':
		r := a + b
		if (r > a) != (b > 0) {
			return 0, errOverflow
		}
		return r, nil
	case '-':
		r := a - b
		if (r < a) != (b > 0) {
			return 0, errOverflow
		}
		return r, nil
	case '*':
		if a == 0 || b == 0 {
			return 0, nil
		}
		r := a * b
		if r/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
			return 0, errOverflow
		}
		return r, nil
	case '/', 'f':
		if b == 0 {
			return 0, errors.New("division by zero")
		}
		if a == math.MinInt64 && b == -1 {
			return 0, errOverflow
		}
		q, r := a/b, a%b
		if e.op == '/' && r != 0 {
			return 0, fmt.Errorf("%d / %d is not a whole number (write // to round down)", a, b)
		}
		if r != 0 && (r < 0) != (b < 0) {
			q-- // floor, as Python's //
		}
		return q, nil
	}
	return 0, fmt.Errorf("bad expression")
}

func (e *expr) String() string {
	switch e.op {
	case 0:
		return strconv.FormatInt(e.val, 10)
	case 'v':
		return "$" + e.sym
	case 'n':
		return "-(" + e.a.String() + ")"
	case 'f':
		return "(" + e.a.String() + " // " + e.b.String() + ")"
	}
	return "(" + e.a.String() + " " + string(e.op) + " " + e.b.String() + ")"
}
