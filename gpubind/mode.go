package gpubind

import "fmt"

// Mode says what a plan that cannot be made does to the step: in enforce mode it fails
// the step, in optional mode the step runs unbound with a warning. The zero value is
// enforce, the default.
type Mode int

// The modes; String gives the word of the plugstack's mode=, the request's mode= and the
// table's mode line.
const (
	ModeEnforce Mode = iota
	ModeOptional
)

func (m Mode) String() string {
	if m == ModeOptional {
		return "optional"
	}
	return "enforce"
}

// ParseMode reads a mode as the plugstack and the request write it: "" (the default) and
// "enforce" are enforce, "optional" is optional, anything else an error naming the value.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "enforce":
		return ModeEnforce, nil
	case "optional":
		return ModeOptional, nil
	}
	return ModeEnforce, fmt.Errorf("mode %q: want enforce or optional", s)
}
