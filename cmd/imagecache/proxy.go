package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/proxy"
)

// startProxy starts the intercepting proxy when the config has one; registry is the handler for /v2
// requests (the same one the main listener serves, access log included). stop ends it.
func startProxy(cfg *config.Config, registry http.Handler, mainAddr string, log *slog.Logger) (stop func(), err error) {
	if cfg.Proxy == nil {
		return func() {}, nil
	}
	pc := cfg.Proxy
	certFile, keyFile := caFiles(cfg)
	ca, warning, err := loadProxyCA(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if warning != "" {
		log.Warn("proxy: " + warning)
	}
	password := pc.Auth.Password
	if pc.Auth.PasswordFile != "" {
		b, err := os.ReadFile(pc.Auth.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("proxy.auth.passwordFile: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	var ups []proxy.Upstream
	for _, u := range cfg.Upstreams {
		ups = append(ups, proxy.Upstream{Name: u.Name, Aliases: u.Aliases, URL: u.URL})
	}
	ln, err := net.Listen("tcp", pc.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy: listen on %s: %w (choose another address with proxy.listen in the config)", pc.Listen, err)
	}
	p, err := proxy.New(proxy.Options{CA: ca, Upstreams: ups, Registry: registry, Passthrough: pc.Passthrough,
		OwnPorts: ownPorts(mainAddr, ln.Addr().String()), Username: pc.Auth.Username, Password: password, Log: log})
	if err != nil {
		ln.Close()
		return nil, err
	}
	log.Info("intercepting proxy listening", "listen", ln.Addr().String(), "ca", certFile, "passthrough", pc.Passthrough,
		"auth", pc.Auth.Username != "", "clients", fmt.Sprintf("HTTPS_PROXY=http://%s and trust the CA from `imagecache ca print`", ln.Addr()))
	go func() {
		if err := p.Serve(ln); err != nil {
			log.Error("proxy stopped", "error", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			log.Warn("proxy shutdown did not finish cleanly", "error", err)
		}
	}, nil
}

// ownPorts are the ports of imagecache's listeners, which passthrough never reaches on a local address.
func ownPorts(addrs ...string) []string {
	var ports []string
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err == nil {
			ports = append(ports, port)
		}
	}
	return ports
}
