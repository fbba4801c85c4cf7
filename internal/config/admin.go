package config

import (
	"os"
	"strings"
	"unicode"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// Admin protects the admin API (/api/v1). With a token, every request must carry it as a bearer token; without
// one the API answers only when the server listens on a loopback address.
type Admin struct {
	// Token is the bearer token: admin.token, or the content of admin.tokenFile (read once, at load).
	Token string
	// TokenFile is where Token was read from, if it was.
	TokenFile string
}

func (d *decoder) admin(n *yaml.Node, path string) Admin {
	m := d.mapping(n, path, "token", "tokenFile")
	var a Admin
	if v, ok := m["token"]; ok {
		a.Token = d.str(v, field(path, "token"))
		d.checkToken(v, field(path, "token"), a.Token)
	}
	if v, ok := m["tokenFile"]; ok {
		p := field(path, "tokenFile")
		if a.Token != "" {
			d.failf(v, p, "cannot be used together with token; choose one")
			return a
		}
		a.TokenFile = d.readableFile(v, p)
		if a.TokenFile == "" {
			return a
		}
		raw, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return a // readableFile has said why
		}
		a.Token = strings.TrimSpace(string(raw))
		if a.Token == "" {
			d.failf(v, p, "%s is empty; write the token into it (e.g. openssl rand -hex 32 > %s)", a.TokenFile, a.TokenFile)
			return a
		}
		d.checkToken(v, p, a.Token)
	}
	return a
}

// checkToken refuses what cannot travel in an Authorization header.
func (d *decoder) checkToken(n *yaml.Node, path, token string) {
	if strings.ContainsFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r > unicode.MaxASCII }) {
		d.failf(n, path, "the token must be printable ASCII without spaces (it is sent as Authorization: Bearer <token>); generate one with e.g. openssl rand -hex 32")
	}
}
