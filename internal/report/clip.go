package report

import (
	"fmt"
	"regexp"
	"unicode/utf8"
)

// Error messages quote the input they refuse; a request may be a
// megabyte, which must not come back inside its own refusal.
const (
	// maxQuoted is the longest quoted input an error body repeats whole.
	maxQuoted = 80
	// maxMessage bounds an error body's message, whatever it holds.
	MaxMessage = 4096
)

var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// ClipMessage shortens the quoted strings of an error message longer than
// maxQuoted to their beginning, saying how much was cut, and the message
// to maxMessage bytes.
func ClipMessage(msg string) string {
	msg = ClipQuoted(msg)
	if len(msg) > MaxMessage {
		keep := runeCut(msg, MaxMessage)
		msg = fmt.Sprintf("%s… (%d bytes cut)", keep, len(msg)-len(keep))
	}
	return msg
}

// ClipQuoted shortens the quoted strings of a message longer than
// maxQuoted to their beginning, saying how much was cut: the command line
// repeats input no more than the server does.
func ClipQuoted(msg string) string {
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
