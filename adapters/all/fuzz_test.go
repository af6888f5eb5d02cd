package all_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
)

// fuzzOpenLimit is the context of one Open in FuzzOpenURL; Open must
// return within it and a little slack. Every host is a loopback port
// nothing listens on, so most adapters give up at once; MQTT retries until
// its connect_timeout, which the target sets short unless the input names
// one.
const fuzzOpenLimit = 10 * time.Second

// FuzzOpenURL opens URLs of every scheme with fuzzed user info, path and
// query against a loopback port nothing listens on (the fuzzer never
// chooses the host, so nothing leaves the machine) and checks that Open
// does not panic, returns within fuzzOpenLimit, and never echoes a secret
// in its error: the password (made by the target so that it cannot occur
// in an error by chance), a token parameter, and the content of a secret
// file or environment variable. Every *_file parameter is pointed at a
// file the target wrote, so the fuzzer cannot make Open read the machine's
// files (or /dev/zero).
//
//	go test -run XXX -fuzz FuzzOpenURL -fuzztime 30s ./adapters/all/
func FuzzOpenURL(f *testing.F) {
	dir := f.TempDir()
	const fileSecret = "FileSecret-9f3kq2-zz"
	const envSecret = "EnvSecret-77a1xq-zz"
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(fileSecret+"\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Setenv("SLUICE_FUZZ_SECRET", envSecret)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close()

	for i := range schemes {
		f.Add(uint8(i), "user", "", "", uint32(1))
		f.Add(uint8(i), "user", "/ns", "inflight=10&max_attempts=3&backoff=10ms", uint32(2))
		f.Add(uint8(i), "u", "", "password_file=x&insecure=true", uint32(0))
		f.Add(uint8(i), "", "/a/b", "token_env=SLUICE_FUZZ_SECRET&ca_file=x&cert_file=x&key_file=x", uint32(3))
		f.Add(uint8(i), "a:b", "/%zz", "password_env=SLUICE_FUZZ_SECRET&server_name=&connect_timeout=1h", uint32(4))
		f.Add(uint8(i), "user", "", "mechanism=scram-sha-512&token=x&namespace=bad%20ns", uint32(5))
	}
	f.Fuzz(func(t *testing.T, schemeIdx uint8, user, path, query string, seed uint32) {
		scheme := schemes[int(schemeIdx)%len(schemes)]
		password := fmt.Sprintf("Pw%08xQ-secret", seed)
		q, err := url.ParseQuery(query)
		if err != nil {
			q = url.Values{}
		}
		for k := range q {
			if strings.HasSuffix(k, "_file") || strings.HasSuffix(k, "file") {
				q[k] = []string{secretFile}
			}
		}
		token := fmt.Sprintf("Tk%08xZ-secret", seed^0x5a5a5a5a)
		if seed%3 == 0 {
			q.Set("token", token)
		}
		if strings.HasPrefix(scheme, "mqtt") && !q.Has("connect_timeout") {
			q.Set("connect_timeout", "300ms")
		}
		u := &url.URL{Scheme: scheme, Host: dead, Path: path, RawQuery: q.Encode()}
		if scheme == "mqtt+embedded" {
			u.Host = ""
		}
		if user != "" {
			if seed%2 == 0 {
				u.User = url.UserPassword(user, password)
			} else {
				u.User = url.User(user)
			}
		}
		var logs opentest.LogBuffer
		ctx, cancel := context.WithTimeout(context.Background(), fuzzOpenLimit)
		defer cancel()
		start := time.Now()
		a, err := adapters.Open(ctx, u.String(), adapters.NotExclusive(), adapters.WithLogger(logs.Logger()))
		if took := time.Since(start); took > fuzzOpenLimit+2*time.Second {
			t.Fatalf("Open(%s) took %v", adapters.Redact(u), took)
		}
		if err == nil {
			opentest.Close(t, a)
			return
		}
		msg := err.Error()
		for _, s := range []string{password, token, fileSecret, envSecret} {
			if strings.Contains(msg, s) {
				t.Fatalf("Open(%s) echoed a secret in its error: %s", adapters.Redact(u), msg)
			}
			if strings.Contains(logs.String(), s) {
				t.Fatalf("Open(%s) logged a secret: %s", adapters.Redact(u), logs.String())
			}
		}
	})
}
