// Package clitest runs third-party command-line clients (mosquitto_pub,
// redis-cli, kcat) in the adapters' interoperability tests. A missing
// client skips the test, or fails it when the environment variable CI is
// "true" (scripts/test.sh installs them: mosquitto-clients, redis-tools,
// kcat).
package clitest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Require returns the path of the command-line client name, or skips t
// (fails it with CI=true) when it is not installed; pkg is the Debian
// package that provides it.
func Require(t testing.TB, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found (Debian package %s; scripts/test.sh installs it): %v", name, pkg, err)
	}
	t.Skipf("skipping: %s not found (install Debian package %s, or set CI=true to make this a failure)", name, pkg)
	return ""
}

// Run runs path with args and stdin, bounded by ctx and by timeout, and
// returns its standard output. A non-zero exit fails with its standard
// error in the message.
func Run(ctx context.Context, timeout time.Duration, stdin []byte, path string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return out.Bytes(), &Error{Cmd: path + " " + strings.Join(args, " "), Stderr: errOut.String(), Err: err}
	}
	return out.Bytes(), nil
}

// Error is a client run that failed.
type Error struct {
	Cmd    string
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	return e.Cmd + ": " + e.Err.Error() + ": " + strings.TrimSpace(e.Stderr)
}

func (e *Error) Unwrap() error { return e.Err }
