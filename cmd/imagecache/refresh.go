package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/admin"
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/progress"
)

func newRefreshCommand() *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "refresh REF|SET",
		Short: "Check a tag with its upstream now, or refresh a file set now",
		Long: `Check a tag with its upstream now, whatever its pull policy and revalidateAfter say: one HEAD, and a
GET of the new manifest only when the tag moved (its layers come with the next pull, or with
imagecache pull). If the check fails, nothing changes and the cache keeps serving what it has.

An argument that names one of the server's file sets refreshes that set instead (a conditional
request; a new version is downloaded, verified and published).`,
		Example: `  imagecache refresh docker.io/library/nginx:latest
  imagecache refresh ipa
  imagecache refresh -o json registry.example.com/team/app:main`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client(cmd)
			if err != nil {
				return err
			}
			isSet, err := c.isSet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if isSet {
				return refreshSet(cmd, c, o.output, args[0])
			}
			if err := checkRef(cmd, args[0]); err != nil {
				return err
			}
			var res admin.RefreshResult
			if err := c.call(cmd.Context(), "POST", "/api/v1/refresh", admin.RefreshRequest{Ref: args[0]}, &res); err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), o.output, res, func(w io.Writer) error {
				switch {
				case res.Previous == "":
					fmt.Fprintf(w, "%s was not cached: fetched its manifest %s\n", res.Ref, res.Digest)
				case res.Changed:
					fmt.Fprintf(w, "%s moved: %s -> %s (imagecache pull %s fetches its layers now)\n", res.Ref, shortDigest(res.Previous), res.Digest, res.Ref)
				default:
					fmt.Fprintf(w, "%s is current: %s\n", res.Ref, res.Digest)
				}
				return nil
			})
		},
	}
	o.flags(cmd)
	return withUsageErrors(cmd)
}

// isSet says whether name is one of the server's file sets (an image reference with a registry, tag or
// digest cannot be one).
func (c *apiClient) isSet(ctx context.Context, name string) (bool, error) {
	if strings.ContainsAny(name, "/:@") {
		return false, nil
	}
	var st files.Status
	err := c.call(ctx, "GET", "/api/v1/sets/"+url.PathEscape(name), nil, &st)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

func refreshSet(cmd *cobra.Command, c *apiClient, output, name string) error {
	var res admin.SetRefreshResult
	err := c.call(cmd.Context(), "POST", "/api/v1/refresh", admin.RefreshRequest{Set: name}, &res)
	if err != nil {
		return err
	}
	return render(cmd.OutOrStdout(), output, res, func(w io.Writer) error {
		st := res.Status
		fmt.Fprintf(w, "file set %s: %s, version %d", st.Set, st.State, st.Version)
		if st.Message != "" {
			fmt.Fprintf(w, " (%s)", st.Message)
		}
		fmt.Fprintln(w)
		for _, f := range st.Files {
			fmt.Fprintf(w, "  %s  %s  %s\n", f.Name, shortDigest(f.Digest), progress.Bytes(f.Size))
		}
		return nil
	})
}
