package adapters

import (
	"net/url"
	"sort"
	"strings"
)

// secretWords mark query parameters whose values Redact masks.
var secretWords = []string{"pass", "secret", "token", "key", "auth", "credential", "sasl", "cert"}

// Redact returns u as text fit for logs and errors: the password and the
// values of parameters named like secrets (password, token, secret, key,
// auth, credential, sasl, cert) are replaced by "xxxxx".
func Redact(u *url.URL) string {
	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteString("://")
	if u.User != nil {
		b.WriteString(url.PathEscape(u.User.Username()))
		if _, has := u.User.Password(); has {
			b.WriteString(":xxxxx")
		}
		b.WriteByte('@')
	}
	b.WriteString(u.Host)
	b.WriteString(u.EscapedPath())
	if u.RawQuery != "" {
		b.WriteByte('?')
		if q, err := url.ParseQuery(u.RawQuery); err != nil {
			b.WriteString("(malformed query not shown)")
		} else {
			b.WriteString(redactQuery(q))
		}
	}
	return b.String()
}

func redactQuery(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		secret := isSecret(k)
		for _, v := range q[k] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(k))
			b.WriteByte('=')
			if secret {
				b.WriteString("xxxxx")
			} else {
				b.WriteString(url.QueryEscape(v))
			}
		}
	}
	return b.String()
}

func isSecret(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// secrets are the values that must never appear in an error: the
// password and the values of secret-named query parameters.
func secrets(u *url.URL, cfg *Config) []string {
	var out []string
	if cfg.Password != "" {
		out = append(out, cfg.Password)
	}
	if q, err := url.ParseQuery(u.RawQuery); err == nil {
		for k, vs := range q {
			if isSecret(k) {
				for _, v := range vs {
					if v != "" {
						out = append(out, v)
					}
				}
			}
		}
	}
	return out
}

// scrub returns err with every secret in its text replaced by "xxxxx"
// (errors.Is and errors.As still see err), or err itself when its text
// holds none: a broker client's error may quote what it was given.
func scrub(err error, secrets []string) error {
	text := err.Error()
	clean := text
	for _, s := range secrets {
		clean = strings.ReplaceAll(clean, s, "xxxxx")
	}
	if clean == text {
		return err
	}
	return &scrubbedError{err: err, text: clean}
}

type scrubbedError struct {
	err  error
	text string
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.err }
