package plan

import (
	"errors"
	"fmt"
)

// InputError is options the planner cannot take (a global batch the
// setup does not make, a minimum micro-batch no accumulation leaves): the
// caller's input is wrong, not the planning, so a command line answers it
// as a usage error.
type InputError struct{ Err error }

func (e InputError) Error() string { return e.Err.Error() }
func (e InputError) Unwrap() error { return e.Err }

func inputErrorf(format string, args ...any) error {
	return InputError{fmt.Errorf(format, args...)}
}

// IsInputError reports whether err is, or wraps, an InputError.
func IsInputError(err error) bool {
	var e InputError
	return errors.As(err, &e)
}
