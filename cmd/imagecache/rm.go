package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/progress"
)

func newRmCommand() *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "rm REF",
		Short: "Purge an image from a running cache now",
		Long: `Purge an image from a running imagecache, whatever its last use: REF with a tag drops that tag and,
unless another tag still points at the same image, the image; REF with @sha256:... drops the image and
every tag pointing at it. Layers another cached image uses stay. The next pull fetches it from the
upstream again.

A pinned image (pins: in the config, or an ImageCache resource) is refused with the pin's owner named,
and nothing is removed: unpin it first.`,
		Example: `  imagecache rm docker.io/library/nginx:1.27
  imagecache rm registry.example.com/team/app@sha256:4c1e...
  imagecache rm -o json nginx:1.27`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client(cmd)
			if err != nil {
				return err
			}
			if err := checkRef(cmd, args[0]); err != nil {
				return err
			}
			var p eviction.Purged
			if err := c.call(cmd.Context(), "DELETE", "/api/v1/images?ref="+url.QueryEscape(args[0]), nil, &p); err != nil {
				return err // the server's message names the reference
			}
			return render(cmd.OutOrStdout(), o.output, p, func(w io.Writer) error {
				if len(p.StillTagged) > 0 {
					fmt.Fprintf(w, "removed tag %s; its image %s stays, still tagged as %s\n", p.Ref, shortDigest(p.Digest), strings.Join(p.StillTagged, ", "))
					return nil
				}
				fmt.Fprintf(w, "removed %s (%s): %d objects, %s freed\n", p.Ref, shortDigest(p.Digest), len(p.Objects), progress.Bytes(p.Bytes))
				return nil
			})
		},
	}
	o.flags(cmd)
	return withUsageErrors(cmd)
}
