package adapters_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/ports"
)

// probe is what the TLS probe opener was given.
var probe struct {
	cfg   *adapters.Config
	tls   *tls.Config
	token string
	has   bool
}

// The probe schemes: probes (TLS: the opener calls cfg.TLS) and probe
// (plaintext: PlainOnly). Both read a token with Params.Secret, and a
// "fail" parameter makes the opener fail with an error quoting every
// secret it has, as a careless broker client might.
func init() {
	open := adapters.OpenerFunc(func(_ context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
		probe.cfg, probe.tls = cfg, nil
		probe.token, probe.has = cfg.Params.Secret("token")
		fail := cfg.Params.Bool("fail", false)
		if err := cfg.Params.Err("token", "token_file", "token_env", "fail"); err != nil {
			return nil, err
		}
		if u.Scheme == "probes" {
			probe.tls = cfg.TLS()
		} else if err := cfg.PlainOnly("probes"); err != nil {
			return nil, err
		}
		cfg.Logger.Info("connecting", "password", cfg.Password, "token", probe.token, "err", fmt.Errorf("dial with %s", probe.token))
		if fail {
			return nil, fmt.Errorf("%w: broker said: bad password %q or token %q", adapters.ErrAuth, cfg.Password, probe.token)
		}
		return fakeAdapter{}, nil
	})
	adapters.Register("probes", open)
	adapters.Register("probe", open)
	adapters.Register("probe-pw", adapters.PasswordOnly(open))
}

// A PasswordOnly scheme takes a password without a user name, in the URL
// or from a file; the other schemes still refuse both.
func TestPasswordOnlyScheme(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("file-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openProbe(t, "probe-pw://:inline-s3cret@h/"); err != nil || probe.cfg.Username != "" || probe.cfg.Password != "inline-s3cret" || !probe.cfg.HasCredentials {
		t.Fatalf("probe-pw://:password@h: %v, user %q password %q", err, probe.cfg.Username, probe.cfg.Password)
	}
	if _, err := openProbe(t, "probe-pw://h/?password_file="+file); err != nil || probe.cfg.Password != "file-s3cret" {
		t.Fatalf("probe-pw://h/?password_file: %v, password %q", err, probe.cfg.Password)
	}
	for _, raw := range []string{"probe://:inline-s3cret@h/", "probe-pw://:@h/"} {
		if _, err := openProbe(t, raw); err == nil || !strings.Contains(err.Error(), "user info without a user name") {
			t.Errorf("Open(%s) = %v, want the user info refused", raw, err)
		}
	}
}

func openProbe(t *testing.T, raw string, opts ...adapters.Option) (*logBuffer, error) {
	t.Helper()
	var logs logBuffer
	a, err := adapters.Open(context.Background(), raw, append(opts, adapters.WithLogger(logs.Logger()), adapters.NotExclusive())...)
	if err == nil {
		closeAdapter(t, a)
	}
	return &logs, err
}

func TestTLSParametersBuildTheConfig(t *testing.T) {
	pki := tlstest.New(t)
	q := url.Values{"ca_file": {pki.CAFile}, "cert_file": {pki.ClientCert}, "key_file": {pki.ClientKey}, "server_name": {"localhost"}}
	logs, err := openProbe(t, "probes://127.0.0.1:5671/?"+q.Encode())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	c := probe.tls
	if c.ServerName != "localhost" || c.InsecureSkipVerify || c.MinVersion != tls.VersionTLS12 || len(c.Certificates) != 1 {
		t.Fatalf("TLS = server %q insecure %v min %x certificates %d", c.ServerName, c.InsecureSkipVerify, c.MinVersion, len(c.Certificates))
	}
	if !probe.cfg.CustomTLS() || !probe.cfg.ClientCertificate() {
		t.Errorf("CustomTLS %v ClientCertificate %v, want both true", probe.cfg.CustomTLS(), probe.cfg.ClientCertificate())
	}
	// The pool is the CA's: the server certificate verifies against it.
	server, _ := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	leaf, _ := x509.ParseCertificate(server.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.RootCAs, DNSName: "localhost"}); err != nil {
		t.Errorf("the server certificate does not verify with the ca_file pool: %v", err)
	}
	if strings.Contains(logs.String(), "verification is OFF") {
		t.Errorf("a verified connection logged the insecure warning:\n%s", logs)
	}
	// The file parameters are paths, shown in the URL as they are.
	if !strings.Contains(logs.String(), filepath.Base(pki.ClientKey)) {
		t.Errorf("the logged URL hides the key_file path:\n%s", logs)
	}

	// The same with options, over a WithTLS base that keeps its settings.
	_, err = openProbe(t, "probes://127.0.0.1:5671/", adapters.WithTLS(&tls.Config{MinVersion: tls.VersionTLS13}),
		adapters.WithTLSFiles(pki.CAFile, pki.ClientCert, pki.ClientKey))
	if err != nil {
		t.Fatalf("Open with options: %v", err)
	}
	if c := probe.tls; c.MinVersion != tls.VersionTLS13 || c.ServerName != "127.0.0.1" || len(c.Certificates) != 1 || c.RootCAs == nil {
		t.Errorf("options TLS = min %x server %q certificates %d roots %v", c.MinVersion, c.ServerName, len(c.Certificates), c.RootCAs != nil)
	}
	// Default: system roots (nil pool), the host as the server name.
	if _, err := openProbe(t, "probes://broker.example:5671/"); err != nil {
		t.Fatal(err)
	}
	if c := probe.tls; c.RootCAs != nil || c.ServerName != "broker.example" || c.InsecureSkipVerify || probe.cfg.CustomTLS() {
		t.Errorf("default TLS = roots %v server %q insecure %v", c.RootCAs != nil, c.ServerName, c.InsecureSkipVerify)
	}
}

func TestInsecureTLSIsExplicitAndLoggedAsAWarning(t *testing.T) {
	for name, open := range map[string]func() (*logBuffer, error){
		"insecure=true":   func() (*logBuffer, error) { return openProbe(t, "probes://h:1/?insecure=true") },
		"WithInsecureTLS": func() (*logBuffer, error) { return openProbe(t, "probes://h:1/", adapters.WithInsecureTLS()) },
		"InsecureSkipVerify": func() (*logBuffer, error) {
			return openProbe(t, "probes://h:1/", adapters.WithTLS(&tls.Config{InsecureSkipVerify: true}))
		},
	} {
		logs, err := open()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !probe.tls.InsecureSkipVerify {
			t.Errorf("%s: verification still on", name)
		}
		var warned bool
		for _, r := range logs.Records(t) {
			if r["level"] == "WARN" && strings.Contains(r["msg"].(string), "TLS certificate verification is OFF") {
				warned = true
			}
		}
		if !warned {
			t.Errorf("%s: no warning logged:\n%s", name, logs)
		}
	}
	if _, err := openProbe(t, "probes://h:1/?insecure=false"); err != nil || probe.tls.InsecureSkipVerify {
		t.Errorf("insecure=false: %v, insecure %v", err, probe.tls.InsecureSkipVerify)
	}
}

func TestTLSSettingsAreRefusedClearly(t *testing.T) {
	pki := tlstest.New(t)
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url  string
		opts []adapters.Option
		want string
	}{
		{url: "probe://h/?ca_file=" + pki.CAFile, want: "parameter ca_file: TLS settings given for the plaintext scheme probe:// (use probes://)"},
		{url: "probe://h/?insecure=true", want: "parameter insecure: TLS settings given for the plaintext scheme"},
		{url: "probe://h/", opts: []adapters.Option{adapters.WithTLSFiles(pki.CAFile, "", "")}, want: "parameter WithTLSFiles: TLS settings given for the plaintext scheme"},
		{url: "probe://h/", opts: []adapters.Option{adapters.WithInsecureTLS()}, want: "parameter WithInsecureTLS: TLS settings"},
		{url: "probes://h/?ca_file=/nonexistent/ca.pem", want: "parameter ca_file: cannot read the CA file: open /nonexistent/ca.pem: no such file or directory"},
		{url: "probes://h/?ca_file=" + notPEM, want: "holds no PEM certificate"},
		{url: "probes://h/?cert_file=" + pki.ClientCert, want: "cert_file and key_file go together"},
		{url: "probes://h/?cert_file=" + pki.ClientCert + "&key_file=" + pki.ServerKey, want: "cannot load the client certificate"},
		{url: "probes://h/?ca_file=" + pki.CAFile, opts: []adapters.Option{adapters.WithTLSFiles(pki.CAFile, "", "")}, want: "TLS files given both in the URL"},
		{url: "probes://h/?insecure=true", opts: []adapters.Option{adapters.WithInsecureTLS()}, want: "parameter insecure: given both in the URL and with WithInsecureTLS"},
		{url: "probes://h/?insecure=yes", want: `parameter insecure: "yes" is not true or false`},
		{url: "probes://h/?server_name=", want: "parameter server_name: must not be empty"},
		{url: "probes://h/", opts: []adapters.Option{adapters.WithTLSFiles("", pki.ClientCert, "")}, want: "give both the certificate and the key file"},
	} {
		_, err := openProbe(t, c.url, c.opts...)
		if err == nil || !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s) = %v\nwant an ErrInvalid saying %q", c.url, err, c.want)
		}
	}
}

func TestPasswordFromAFileOrTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "password")
	if err := os.WriteFile(file, []byte("f1le-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_PASSWORD", "env-s3cret")
	if _, err := openProbe(t, "probe://alice@h/?password_file="+file); err != nil || probe.cfg.Password != "f1le-s3cret" || !probe.cfg.HasCredentials {
		t.Fatalf("password_file: %v, password %q", err, probe.cfg.Password)
	}
	if _, err := openProbe(t, "probe://alice@h/?password_env=SLUICE_TEST_PASSWORD"); err != nil || probe.cfg.Password != "env-s3cret" {
		t.Fatalf("password_env: %v, password %q", err, probe.cfg.Password)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_EMPTY", "")
	for raw, want := range map[string]string{
		"probe://h/?password_file=" + file:                                              "a password needs a user name: put it in the URL's user info (probe://user@host/…)",
		"probe://alice:inline@h/?password_file=" + file:                                 "the URL holds a password too",
		"probe://alice@h/?password_file=" + file + "&password_env=SLUICE_TEST_PASSWORD": "give the password one way",
		"probe://alice@h/?password_file=/nonexistent/pw":                                "parameter password_file: cannot read the password file: open /nonexistent/pw: no such file or directory",
		"probe://alice@h/?password_file=" + empty:                                       "is empty",
		"probe://alice@h/?password_env=SLUICE_TEST_UNSET_VARIABLE":                      `the environment variable "SLUICE_TEST_UNSET_VARIABLE" (holding the password) is not set`,
		"probe://alice@h/?password_env=SLUICE_TEST_EMPTY":                               "is empty",
	} {
		_, err := openProbe(t, raw)
		if err == nil || !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s) = %v\nwant an ErrInvalid saying %q", raw, err, want)
		}
	}
	_, err := openProbe(t, "probe://h/?password_file="+file, adapters.WithCredentials("bob", "x"))
	if err == nil || !strings.Contains(err.Error(), "both here and with WithCredentials") {
		t.Errorf("password_file with WithCredentials = %v", err)
	}
}

func TestSecretsNeverAppearInErrorsOrLogs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("t0ken-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("pw-from-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_TOKEN", "t0ken-from-env")
	for raw, secrets := range map[string][]string{
		"probe://alice:inl1ne-pw@h/?token=inl1ne-t0ken&fail=true":                               {"inl1ne-pw", "inl1ne-t0ken"},
		"probe://alice@h/?password_file=" + pwFile + "&token_file=" + file + "&fail=true":       {"pw-from-file", "t0ken-from-file"},
		"probe://alice@h/?password_env=SLUICE_TEST_TOKEN&token_env=SLUICE_TEST_TOKEN&fail=true": {"t0ken-from-env"},
	} {
		logs, err := openProbe(t, raw)
		if err == nil || !errors.Is(err, adapters.ErrAuth) {
			t.Fatalf("Open(%s) = %v, want the opener's ErrAuth", raw, err)
		}
		if !probe.has || probe.token == "" {
			t.Errorf("Open(%s): the opener got no token", raw)
		}
		if !strings.Contains(err.Error(), `bad password "xxxxx"`) {
			t.Errorf("error not scrubbed the expected way: %v", err)
		}
		if !strings.Contains(logs.String(), "connecting") {
			t.Fatalf("the opener's log line is missing:\n%s", logs)
		}
		tlstest.NoSecrets(t, err.Error(), logs, secrets...)
	}
	_, err := openProbe(t, "probe://h/?token=a&token_file="+file)
	if err == nil || !strings.Contains(err.Error(), "parameter token, token_file: give the secret one way") {
		t.Errorf("two token sources = %v", err)
	}
	_, err = openProbe(t, "probe://h/?token_env=SLUICE_TEST_UNSET_VARIABLE")
	if err == nil || !strings.Contains(err.Error(), `"SLUICE_TEST_UNSET_VARIABLE" (holding the token) is not set`) {
		t.Errorf("unset token_env = %v", err)
	}
}

// leakyAdapter quotes its password in every error, as a careless broker
// client might.
type leakyAdapter struct {
	fakeAdapter
	pw string
}

func (l leakyAdapter) Send(context.Context, ...ports.Message) error {
	return fmt.Errorf("%w: publish as svc:%s refused", ports.ErrUnconfirmed, l.pw)
}

func (l leakyAdapter) Subscribe(context.Context, ports.SubscriptionSpec) (ports.Subscription, error) {
	return nil, fmt.Errorf("%w: subscribe as svc:%s refused", ports.ErrUnsupported, l.pw)
}

func init() {
	adapters.Register("leakysend", adapters.OpenerFunc(func(_ context.Context, _ *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
		return leakyAdapter{pw: cfg.Password}, nil
	}))
}

// The errors of Send and Subscribe on an adapter from Open are scrubbed
// too, and still classify.
func TestSendAndSubscribeErrorsAreScrubbed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("pw-for-send-test"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := adapters.Open(context.Background(), "leakysend://svc@h/?password_file="+file, adapters.NotExclusive())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAdapter(t, a)
	err = a.Send(context.Background(), ports.Message{Topic: "t"})
	if !errors.Is(err, ports.ErrUnconfirmed) || strings.Contains(err.Error(), "pw-for-send-test") || !strings.Contains(err.Error(), "svc:xxxxx") {
		t.Errorf("Send error = %v, want ErrUnconfirmed with the password scrubbed", err)
	}
	_, err = a.Subscribe(context.Background(), ports.SubscriptionSpec{Topic: "t", Group: "g"})
	if !errors.Is(err, ports.ErrUnsupported) || strings.Contains(err.Error(), "pw-for-send-test") {
		t.Errorf("Subscribe error = %v, want ErrUnsupported with the password scrubbed", err)
	}
}
