package portable

import "strings"

// scrub returns err with every Options.Secrets value replaced by "xxxxx" in
// its text; the error chain stays reachable through Unwrap.
func (a *Adapter) scrub(err error) error {
	if err == nil || len(a.opts.Secrets) == 0 {
		return err
	}
	text := err.Error()
	clean := text
	for _, s := range a.opts.Secrets {
		if s != "" {
			clean = strings.ReplaceAll(clean, s, "xxxxx")
		}
	}
	if clean == text {
		return err
	}
	return &scrubbed{text: clean, err: err}
}

type scrubbed struct {
	text string
	err  error
}

func (e *scrubbed) Error() string { return e.text }
func (e *scrubbed) Unwrap() error { return e.err }
