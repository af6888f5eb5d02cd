package adapters

import (
	"fmt"
	"os"
	"strings"
)

// Secret sources: a password (or any secret parameter) may come from a file
// or an environment variable named in the URL, so that it appears in no
// URL, shell history or process list.
const (
	paramPasswordFile = "password_file"
	paramPasswordEnv  = "password_env"
)

// passwordFromSource reads the password from password_file or
// password_env, when one is given.
func (c *Config) passwordFromSource(p *Params, o options) error {
	if !p.has(paramPasswordFile) && !p.has(paramPasswordEnv) {
		return nil
	}
	which := paramPasswordFile
	if !p.has(paramPasswordFile) {
		which = paramPasswordEnv
	}
	switch {
	case p.has(paramPasswordFile) && p.has(paramPasswordEnv):
		return &ParamError{Param: paramPasswordFile + ", " + paramPasswordEnv, Reason: "give the password one way: a file or an environment variable, not both"}
	case o.credentials:
		return &ParamError{Param: which, Reason: "the password is given both here and with WithCredentials"}
	case c.Password != "":
		return &ParamError{Param: which, Reason: "the URL holds a password too: remove it from the user info (user@host)"}
	case c.Username == "" && !c.passwordOnly:
		return &ParamError{Param: which, Reason: fmt.Sprintf("a password needs a user name: put it in the URL's user info (%s://user@host/…)", c.Scheme)}
	}
	v, err := p.readSecret("password", which)
	if err != nil {
		return err
	}
	c.Password, c.HasCredentials = v, true
	return nil
}

// Secret returns the secret parameter name (for example "token"), given
// inline as name=…, in a file as name_file=/path, or in an environment
// variable as name_env=VAR: at most one of the three. A file's content is
// taken without its trailing line break. The value is scrubbed from the
// errors Open returns and from the lines logged through Config.Logger;
// it must still never be logged or put in an error by the opener. ok is
// false when none of the three was given; an unreadable file, an unset
// variable or an empty value is recorded as a *ParamError (see Err).
func (p *Params) Secret(name string) (value string, ok bool) {
	var given []string
	for _, n := range []string{name, name + "_file", name + "_env"} {
		if p.has(n) {
			given = append(given, n)
		}
	}
	switch len(given) {
	case 0:
		return "", false
	case 1:
	default:
		for _, n := range given {
			p.take(n)
		}
		p.fail(strings.Join(given, ", "), "give the secret one way: inline, in a file or in an environment variable")
		return "", false
	}
	if given[0] == name {
		v, _ := p.take(name)
		if v == "" {
			p.fail(name, "must not be empty")
			return "", false
		}
		p.secrets.add(v)
		return v, true
	}
	v, err := p.readSecret(name, given[0])
	if err != nil {
		p.errs = append(p.errs, err)
		return "", false
	}
	return v, true
}

// readSecret reads the secret what from the source parameter src
// (<what>_file or <what>_env), records it as a secret, and never quotes
// it in an error.
func (p *Params) readSecret(what, src string) (string, error) {
	ref, _ := p.take(src)
	var v string
	if strings.HasSuffix(src, "_file") {
		b, err := os.ReadFile(ref)
		if err != nil {
			return "", &ParamError{Param: src, Reason: fmt.Sprintf("cannot read the %s file: %v", what, err)}
		}
		v = strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", &ParamError{Param: src, Reason: fmt.Sprintf("the %s file %s is empty", what, ref)}
		}
	} else {
		var set bool
		v, set = os.LookupEnv(ref)
		if !set {
			return "", &ParamError{Param: src, Reason: fmt.Sprintf("the environment variable %q (holding the %s) is not set", ref, what)}
		}
		if v == "" {
			return "", &ParamError{Param: src, Reason: fmt.Sprintf("the environment variable %q (holding the %s) is empty", ref, what)}
		}
	}
	p.secrets.add(v)
	return v, nil
}
