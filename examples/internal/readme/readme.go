// Package readme checks an example's output against the expected output
// its README.md shows, so the README cannot drift from the program.
package readme

import (
	"os"
	"strings"
	"testing"
)

// Expected returns the first ```text block after the "## Expected output"
// heading of the README.md in the current directory.
func Expected(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "## Expected output")
	if i < 0 {
		t.Fatal(`README.md has no "## Expected output" section`)
	}
	s = s[i:]
	start := strings.Index(s, "```text\n")
	if start < 0 {
		t.Fatal("README.md: no ```text block after \"## Expected output\"")
	}
	s = s[start+len("```text\n"):]
	end := strings.Index(s, "```")
	if end < 0 {
		t.Fatal("README.md: unterminated ```text block")
	}
	return s[:end]
}

// Check fails t when got differs from the README's expected output,
// showing the first differing line.
func Check(t *testing.T, got string) {
	t.Helper()
	want := Expected(t)
	if got == want {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("output differs from README.md at line %d:\n got: %q\nwant: %q\nfull output:\n%s", i+1, g, w, got)
		}
	}
}
