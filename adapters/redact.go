package adapters

import (
	"net/url"
	"sort"
	"strings"
)

// secretWords mark query parameters whose values Redact masks.
var secretWords = []string{"pass", "secret", "token", "key", "auth", "credential", "sasl", "cert"}

// Redact returns u as text fit for logs and errors: the password (and the
// user name where it holds the password, as in guest:guest@), and the
// values of parameters named like secrets (password, token, secret, key,
// auth, credential, sasl, cert) are replaced by "xxxxx". The values of
// parameters ending in _file or _env (password_file, token_env, key_file)
// are paths and variable names, shown as they are.
func Redact(u *url.URL) string {
	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteString("://")
	if u.User != nil {
		user := url.PathEscape(u.User.Username())
		pw, has := u.User.Password()
		if has && pw != "" {
			// masked as every error's text is scrubbed, so that one
			// message never shows the same URL two ways
			user = scrubText(user, []string{pw, url.PathEscape(pw)})
		}
		b.WriteString(user)
		if has {
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
	if strings.HasSuffix(n, "_file") || strings.HasSuffix(n, "_env") {
		return false // a path or a variable's name, not the secret itself
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// secrets are the values that must never appear in an error: the
// password, the secrets read from files and the environment, and the
// values of secret-named query parameters.
func secrets(u *url.URL, cfg *Config) []string {
	out := cfg.secrets.all()
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
	clean := scrubText(text, secrets)
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

// shortSecret is the length below which a secret is replaced only where
// it stands as a word of its own: replacing every "a" of a message for a
// one-letter password would make it unreadable.
const shortSecret = 4

// scrubText replaces every secret in text by "xxxxx".
func scrubText(text string, secrets []string) string {
	for _, s := range secrets {
		if s == "" || !strings.Contains(text, s) {
			continue
		}
		if len(s) >= shortSecret {
			text = strings.ReplaceAll(text, s, "xxxxx")
			continue
		}
		text = replaceWord(text, s)
	}
	return text
}

// replaceWord replaces s in text where neither neighbour is a letter or a
// digit.
func replaceWord(text, s string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, s)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		end := i + len(s)
		if (i == 0 || !isWordByte(text[i-1])) && (end == len(text) || !isWordByte(text[end])) {
			b.WriteString(text[:i])
			b.WriteString("xxxxx")
		} else {
			b.WriteString(text[:end])
		}
		text = text[end:]
	}
}

func isWordByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
