package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is a child process whose output goes to a log file that survives restarts (appended), so a test can
// read the whole story of an upstream or cache that was stopped and started again.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error
}

func (p *proc) start(t testing.TB) {
	t.Helper()
	if p.running() {
		t.Fatalf("%s: start while running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "---- %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own, so a signal to it never reaches the test binary and Ctrl-C on go test
	// does not race our cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("%s: start: %v", p.name, err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(exited)
	}(p.exited)
}

func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits up to grace, then SIGKILL. It is a no-op for a process that is not running.
func (p *proc) stop(t testing.TB, grace time.Duration) {
	t.Helper()
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return
	case <-time.After(grace):
		t.Logf("%s did not exit %v after SIGTERM; killing it", p.name, grace)
	}
	p.kill(t)
}

func (p *proc) kill(t testing.TB) {
	t.Helper()
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("%s: still not reaped 10s after SIGKILL", p.name)
	}
}

// logTail returns the last n bytes of the process log.
func (p *proc) logTail(n int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// waitHTTP200 polls url until it answers 200, failing early if the process exits.
func (p *proc) waitHTTP200(t testing.TB, c *http.Client, url string, timeout time.Duration) {
	t.Helper()
	var last error
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !p.running() {
			t.Fatalf("%s exited while starting (%v); log:\n%s", p.name, p.waitErr, p.logTail(4096))
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: %s not 200 within %v (last: %v); log:\n%s", p.name, url, timeout, last, p.logTail(4096))
}

// freeAddr returns 127.0.0.1:PORT with a port that was free a moment ago. Processes under test get a fixed
// port (rather than :0) because they are restarted on the same address.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls cond until it returns nil or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
