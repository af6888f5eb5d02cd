package faults

import (
	"regexp"
	"strings"
)

// goroutineHeader starts each goroutine in a goleak.Find error
// ("Goroutine 12 in state chan receive, with f on top of the stack:").
var goroutineHeader = regexp.MustCompile(`Goroutine \d+ in state [^\n]*, with [^\n]* on top of the stack:\n`)

// SplitLeaks splits the goroutines a goleak.Find error lists into those
// excused says a known broker defect stranded and all the others, each
// as its goleak text. A test excuses a leak only when others is empty.
func SplitLeaks(err error, excused func(stack string) bool) (stranded, others []string) {
	if err == nil {
		return nil, nil
	}
	text := err.Error()
	idx := goroutineHeader.FindAllStringIndex(text, -1)
	if len(idx) == 0 {
		return nil, []string{text}
	}
	for i, at := range idx {
		end := len(text)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		g := strings.TrimRight(text[at[0]:end], " ]\n")
		if excused(g) {
			stranded = append(stranded, g)
		} else {
			others = append(others, g)
		}
	}
	return stranded, others
}

// TopFrame returns the first function of a goroutine stack (as
// SplitLeaks hands it over, or as runtime.Stack prints it) that is not
// in the runtime or sync packages: the code that is blocked, rather than
// the primitive it blocks in.
func TopFrame(stack string) string {
	for _, line := range strings.Split(stack, "\n") {
		if line == "" || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "goroutine ") ||
			strings.HasPrefix(line, "Goroutine ") || strings.HasPrefix(line, "created by ") {
			continue
		}
		fn := line
		if i := strings.LastIndexByte(fn, '('); i > 0 && strings.HasSuffix(fn, ")") {
			fn = fn[:i]
		}
		if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "sync.") || strings.HasPrefix(fn, "internal/") {
			continue
		}
		return fn
	}
	return ""
}
