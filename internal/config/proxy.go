package config

import (
	"strings"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// Proxy is the optional intercepting HTTPS proxy for clients that only have
// proxy settings.
type Proxy struct {
	Listen string
	CA     ProxyCA
	// Passthrough tunnels CONNECTs to hosts that are not upstreams instead
	// of refusing them with 403.
	Passthrough bool
	// Auth, when its Username is set, makes the proxy ask clients for Basic
	// proxy credentials (Proxy-Authorization).
	Auth ProxyAuth
}

// ProxyCA is the CA the proxy signs intercepted hosts' certificates with.
// Empty paths leave the choice of location to the proxy.
type ProxyCA struct {
	CertFile, KeyFile string
}

// ProxyAuth are the credentials clients must send to the proxy. The password
// comes from the config or from PasswordFile (a mounted Secret), never both.
type ProxyAuth struct {
	Username, Password, PasswordFile string
}

// proxy returns nil when the proxy is off: DESIGN.md says it is off when
// listen is absent, and nil makes that impossible to get wrong downstream.
func (d *decoder) proxy(n *yaml.Node, path string) *Proxy {
	var p Proxy
	m := d.mapping(n, path, "listen", "ca", "passthrough", "auth")
	if v, ok := m["listen"]; ok {
		p.Listen = d.address(v, field(path, "listen"))
	}
	if v, ok := m["ca"]; ok {
		caPath := field(path, "ca")
		ca := d.mapping(v, caPath, "certFile", "keyFile")
		if f, ok := ca["certFile"]; ok {
			p.CA.CertFile = d.str(f, field(caPath, "certFile"))
		}
		if f, ok := ca["keyFile"]; ok {
			p.CA.KeyFile = d.str(f, field(caPath, "keyFile"))
		}
		// One without the other cannot sign anything.
		switch {
		case p.CA.CertFile != "" && p.CA.KeyFile == "":
			d.failf(v, field(caPath, "keyFile"), "required with certFile")
		case p.CA.KeyFile != "" && p.CA.CertFile == "":
			d.failf(v, field(caPath, "certFile"), "required with keyFile")
		}
	}
	if v, ok := m["passthrough"]; ok {
		p.Passthrough = d.boolean(v, field(path, "passthrough"))
	}
	if v, ok := m["auth"]; ok {
		p.Auth = d.proxyAuth(v, field(path, "auth"))
	}
	if p.Listen == "" {
		return nil
	}
	return &p
}

func (d *decoder) proxyAuth(n *yaml.Node, path string) ProxyAuth {
	var a ProxyAuth
	m := d.mapping(n, path, "username", "password", "passwordFile")
	if v, ok := m["username"]; ok {
		a.Username = d.str(v, field(path, "username"))
	}
	if v, ok := m["password"]; ok {
		a.Password = d.str(v, field(path, "password"))
	}
	if v, ok := m["passwordFile"]; ok {
		a.PasswordFile = d.readableFile(v, field(path, "passwordFile"))
	}
	n = resolve(n)
	switch {
	case a.Username == "":
		d.failf(n, field(path, "username"), "required: the proxy asks clients for this user (remove auth to run the proxy without authentication)")
	case strings.Contains(a.Username, ":"):
		d.failf(n, field(path, "username"), "%q holds a colon, which Basic authentication cannot carry; choose a user name without one", a.Username)
	case a.Password == "" && a.PasswordFile == "":
		d.failf(n, field(path, "password"), "required with username (or passwordFile, e.g. a mounted Secret)")
	case a.Password != "" && a.PasswordFile != "":
		d.failf(n, field(path, "passwordFile"), "cannot be used together with password; choose one")
	}
	return a
}
