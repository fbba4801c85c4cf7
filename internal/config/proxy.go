package config

import (
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
}

// ProxyCA is the CA the proxy signs intercepted hosts' certificates with.
// Empty paths leave the choice of location to the proxy.
type ProxyCA struct {
	CertFile, KeyFile string
}

// proxy returns nil when the proxy is off: DESIGN.md says it is off when
// listen is absent, and nil makes that impossible to get wrong downstream.
func (d *decoder) proxy(n *yaml.Node, path string) *Proxy {
	var p Proxy
	m := d.mapping(n, path, "listen", "ca", "passthrough")
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
	if p.Listen == "" {
		return nil
	}
	return &p
}
