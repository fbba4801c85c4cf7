package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"imagecache.io/imagecache/internal/reference"
)

// Exit codes. Every command exits with exitUsage for a mistake in its command line; a command may give 0 and
// exitFailure finer meanings of its own (verify and fetch say theirs in their --help).
const (
	exitFailure = 1 // the command ran and failed: the server is unreachable, refused, or a ref failed
	exitUsage   = 2 // the command line is wrong: unknown flag, wrong arguments, a reference that does not parse
)

// exitCodesHelp is appended to the Long help of every client command.
const exitCodesHelp = `
Exit status: 0 on success; 1 when the command failed (the server is unreachable or refused, an image
could not be pulled, the reference is not cached or is pinned); 2 when the command line is wrong
(unknown flag, missing argument, an -o value or reference that does not parse). Nothing is changed
when the exit status is 2.`

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef makes a usage error that names the command (unless it is the root) and points to its --help.
func usagef(cmd *cobra.Command, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if cmd.HasParent() {
		msg = strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ") + ": " + msg
	}
	return usageError{fmt.Errorf("%s (see %s --help)", msg, cmd.CommandPath())}
}

// exitCode is what main exits with for err. An unknown command is also a usage error: cobra reports it for the
// root itself (which has no Args to wrap) as a plain error.
func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command ") {
		return exitUsage
	}
	return exitFailure
}

// setUsageErrors makes the flag and argument mistakes of root and of every command under it usage errors,
// once for the whole tree, so that no command can forget it. Flag errors go through the root's FlagErrorFunc,
// which cobra uses for any command that sets none; argument checks are not inherited, so each command's Args
// is wrapped. Call it after every command was added.
func setUsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usagef(c, "%v", err)
	})
	var wrap func(cmd *cobra.Command)
	wrap = func(cmd *cobra.Command) {
		if cmd.HasParent() && cmd.HasSubCommands() && !cmd.Runnable() {
			// cobra answers a group command (ca) that cannot run with its help and exit status 0, before it
			// looks at the arguments, so `ca bogus` would pass for success: running it as help lets the
			// argument check below refuse what is not one of its commands.
			if cmd.Args == nil {
				cmd.Args = cobra.NoArgs
			}
			cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
		if args := cmd.Args; args != nil {
			cmd.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return usagef(c, "%v", err)
				}
				return nil
			}
		}
		for _, sub := range cmd.Commands() {
			wrap(sub)
		}
	}
	wrap(root)
}

// withUsageErrors documents the exit codes in a client command's help. (Its flag and argument mistakes exit
// with status 2 like every command's: setUsageErrors does that for the whole tree.)
func withUsageErrors(cmd *cobra.Command) *cobra.Command {
	cmd.Long += "\n" + exitCodesHelp
	return cmd
}

// clientOptions are the flags every command that talks to a running server has.
type clientOptions struct {
	server, token, output string
}

const defaultServer = "http://127.0.0.1:5000"

func (o *clientOptions) flags(cmd *cobra.Command) {
	server := os.Getenv("IMAGECACHE_SERVER")
	if server == "" {
		server = defaultServer
	}
	cmd.Flags().StringVar(&o.server, "server", server, "the imagecache server's URL (env IMAGECACHE_SERVER)")
	// No default shown: help output must never print a token taken from the environment.
	cmd.Flags().StringVar(&o.token, "token", "", "the server's admin.token, sent as a bearer token (env IMAGECACHE_TOKEN)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
}

// client checks the flags and returns a client for the server.
func (o *clientOptions) client(cmd *cobra.Command) (*apiClient, error) {
	switch o.output {
	case "table", "json", "yaml":
	default:
		return nil, usagef(cmd, "-o %q: want table, json or yaml", o.output)
	}
	u, err := url.Parse(o.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef(cmd, "--server %q: want a URL such as %s", o.server, defaultServer)
	}
	token := o.token
	if token == "" {
		token = os.Getenv("IMAGECACHE_TOKEN")
	}
	return &apiClient{server: strings.TrimSuffix(o.server, "/"), token: token, http: &http.Client{}}, nil
}

// apiClient talks to a running server's admin API.
type apiClient struct {
	server, token string
	http          *http.Client
}

// apiError is an answer other than 2xx; Message is the server's own explanation.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

// do sends a request and returns the response when it is a 2xx; anything else becomes an error that says
// what to do.
func (c *apiClient) do(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, rd)
	if err != nil {
		return nil, fmt.Errorf("--server %q: %w", c.server, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("cannot reach imagecache at %s: %v (is it running? set --server or IMAGECACHE_SERVER)", c.server, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return nil, c.failure(method, path, resp.StatusCode, raw)
}

func (c *apiClient) failure(method, path string, status int, body []byte) error {
	var e struct{ Error string }
	msg := ""
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	} else {
		msg = fmt.Sprintf("%s %s: %d %s: %.200s", method, c.server+path, status, http.StatusText(status), bytes.TrimSpace(body))
	}
	switch status {
	case http.StatusUnauthorized:
		if c.token == "" {
			msg += " — this server needs a token: pass --token or set IMAGECACHE_TOKEN"
		}
	case http.StatusNotFound:
		if e.Error == "" {
			msg += " — is " + c.server + " an imagecache with the admin API (a newer version)?"
		}
	}
	return &apiError{Status: status, Message: msg}
}

// call sends a JSON request (body may be nil) and decodes the JSON answer into out.
func (c *apiClient) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: the answer is not what this imagecache expects: %w", method, c.server+path, err)
	}
	return nil
}

// render prints v as JSON or YAML, or with table for -o table.
func render(w io.Writer, format string, v any, table func(io.Writer) error) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		raw, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(raw)
		return err
	}
	return table(w)
}

// checkRef refuses, before anything is sent, a reference that cannot be an image reference whatever the
// server's upstreams are (which upstream it names is the server's to say).
func checkRef(cmd *cobra.Command, ref string) error {
	name := ref
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		name = ref[:i]
		if _, err := reference.ParseDigest(ref[i+1:]); err != nil {
			return usagef(cmd, "%q is not an image reference: %v", ref, refMessage(err))
		}
	} else if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name = ref[:i]
		if err := reference.ValidateTag(ref[i+1:]); err != nil {
			return usagef(cmd, "%q is not an image reference: %v", ref, refMessage(err))
		}
	}
	if host, rest, ok := strings.Cut(name, "/"); ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		name = rest
	}
	if err := reference.ValidateName(name); err != nil {
		return usagef(cmd, "%q is not an image reference: %v (write e.g. docker.io/library/nginx:1.27 or registry.example.com/team/app@sha256:...)", ref, refMessage(err))
	}
	return nil
}

func refMessage(err error) string {
	var re *reference.Error
	if errors.As(err, &re) {
		return re.Message
	}
	return err.Error()
}

// ago says how long ago t was, for people: "12s ago", "5m ago", "3h ago", "4d ago"; "never" for zero.
func ago(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}
