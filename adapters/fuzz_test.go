package adapters_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
)

// FuzzOpenSharedParams feeds the shared URL parsing (user info, the
// shared, secret and TLS parameters) with arbitrary URLs on the probe
// schemes: Open must not panic, must answer at once (the probe opener
// dials nothing), and must not echo the password or a token in its error.
func FuzzOpenSharedParams(f *testing.F) {
	for _, seed := range []string{
		"probes://u:pw@h:1/?ca_file=/nonexistent&insecure=true",
		"probe://u@h/?password_file=/nonexistent&token=t0k",
		"probes://h/?server_name=&cert_file=a",
		"probe://u:p@h/?token_env=X&token_file=/y&inflight=3",
		"probes://%zz@h/?namespace=a&namespace=b",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		a, err := adapters.Open(ctx, raw, adapters.NotExclusive())
		if time.Since(start) > 2*time.Second {
			t.Fatalf("Open(%q) took %v", raw, time.Since(start))
		}
		if err == nil {
			_ = a.Close(ctx)
			return
		}
		msg := err.Error()
		u, perr := url.Parse(raw)
		if perr != nil {
			return
		}
		var secrets []string
		if pw, ok := u.User.Password(); ok {
			secrets = append(secrets, pw)
		}
		if q, qerr := url.ParseQuery(u.RawQuery); qerr == nil {
			secrets = append(secrets, q["token"]...)
		}
		for _, s := range secrets {
			// A secret of 4 or more characters that the rest of the URL
			// does not also hold (a host shown in the error) must not
			// appear.
			if len(s) >= 4 && !strings.Contains(strings.Replace(raw, s, "", 1), s) && strings.Contains(msg, s) {
				t.Fatalf("Open(%q) error shows the secret %q: %v", raw, s, msg)
			}
		}
	})
}
