package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// screenListener checks the request line of each new proxy connection before net/http parses it.
//
// net/http answers a line it cannot parse ("CONNECT", "CONNECT a b c", "CONNECT %zz HTTP/1.1") with a
// bare "400 Bad Request" and logs nothing, so a client misconfigured that way would never learn why. The
// screen answers such a line itself, with what was wrong and what to send, logs it, and then ends the
// connection the way net/http ends one that closes before its first request: quietly.
//
// Only the first request of a connection is screened: proxy clients open a connection per CONNECT, and a
// later malformed line on a kept-alive plain-http connection still gets net/http's 400.
type screenListener struct {
	net.Listener
	log *slog.Logger
}

func (l *screenListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &screenedConn{Conn: c, log: l.log}, nil
}

type screenedConn struct {
	net.Conn
	log  *slog.Logger
	once sync.Once
	r    *bufio.Reader
	err  error // set when the first line was refused
}

// maxScreenedLine is as much of the request line as the screen looks at; a longer line is left to
// net/http, which answers 431 or 414.
const maxScreenedLine = 4096

func (c *screenedConn) Read(b []byte) (int, error) {
	c.once.Do(c.screen)
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(b)
}

func (c *screenedConn) screen() {
	c.r = bufio.NewReaderSize(c.Conn, maxScreenedLine)
	// Look at what is buffered; only without a whole line, ask for one more byte than that: each wait is
	// for one read from the client, never for bytes a client that has sent its request will not send.
	var line []byte
	for {
		b, _ := c.r.Peek(c.r.Buffered())
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line = b[:i+1]
			break
		}
		if len(b) >= maxScreenedLine {
			return // a longer line: net/http answers it
		}
		if _, err := c.r.Peek(len(b) + 1); err != nil {
			return // the client went away or timed out: net/http's own handling is right
		}
	}
	reason := requestLineProblem(strings.TrimRight(string(line), "\r\n"))
	if reason == "" {
		return
	}
	c.log.Warn("proxy: refused", "status", http.StatusBadRequest, "line", strings.TrimRight(string(line), "\r\n"),
		"remote", c.RemoteAddr().String(), "reason", reason)
	body := "imagecache proxy: " + reason + "\n"
	fmt.Fprintf(c.Conn, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	c.err = io.EOF
}

// requestLineProblem says what is wrong with an HTTP/1 request line that net/http would refuse without a
// reason, or "" for a line it can parse (the handler then judges what it asks for).
func requestLineProblem(line string) string {
	const want = `want "CONNECT host:port HTTP/1.1", or a request with an absolute http:// URL`
	parts := strings.Split(line, " ")
	if len(parts) != 3 {
		return fmt.Sprintf("malformed request line %q: it has %d space-separated parts, not 3; %s", line, len(parts), want)
	}
	method, target, proto := parts[0], parts[1], parts[2]
	if _, _, ok := http.ParseHTTPVersion(proto); !ok {
		return fmt.Sprintf("malformed request line %q: %q is not an HTTP version; %s", line, proto, want)
	}
	if method == "" || strings.ContainsFunc(method, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r) }) {
		return fmt.Sprintf("malformed request line %q: %q is not a method; %s", line, method, want)
	}
	if method == http.MethodConnect {
		if strings.HasPrefix(target, "/") {
			return "" // the handler explains the path form
		}
		if _, _, err := parseAuthority(target); err != nil {
			return fmt.Sprintf("malformed CONNECT %q: %v; want CONNECT host:port", target, err)
		}
		return ""
	}
	if _, err := url.ParseRequestURI(target); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Sprintf("malformed request target %q: %v; %s", target, err, want)
	}
	return ""
}
