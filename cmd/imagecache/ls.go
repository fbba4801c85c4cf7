package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/admin"
	"imagecache.io/imagecache/internal/progress"
)

func newLsCommand() *cobra.Command {
	var o clientOptions
	var wide bool
	cmd := &cobra.Command{
		Use:   "ls [NAME]",
		Short: "List the images a running cache holds",
		Long: `List the images a running imagecache holds, most recently used first: name (upstream/repository),
tags, digest, size (every layer of the image, shared or not), last use, and whether a pin keeps it.
--wide adds the full digest, the state (cached: pullable with the upstream down; partial: some layers
are not stored yet) and the bytes only this image uses (what rm would free). With NAME, only the images
of that repository (e.g. docker.io/library/nginx, or nginx for the default upstream).`,
		Example: `  imagecache ls
  imagecache ls --wide docker.io/library/nginx
  imagecache ls -o json | jq -r '.[] | select(.state == "partial") | .name'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client(cmd)
			if err != nil {
				return err
			}
			path := "/api/v1/images"
			if len(args) == 1 {
				if err := checkRef(cmd, args[0]); err != nil {
					return err
				}
				path += "?name=" + url.QueryEscape(args[0])
			}
			var ans struct{ Images []admin.Image }
			if err := c.call(cmd.Context(), "GET", path, nil, &ans); err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), o.output, ans.Images, func(w io.Writer) error {
				return imagesTable(w, ans.Images, wide, time.Now())
			})
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVar(&wide, "wide", false, "add the full digest, state and the bytes only this image uses")
	return withUsageErrors(cmd)
}

func imagesTable(w io.Writer, images []admin.Image, wide bool, now time.Time) error {
	if len(images) == 0 {
		fmt.Fprintln(w, "no images cached")
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := "NAME\tTAGS\tDIGEST\tSIZE\tLAST USE\tPINNED"
	if wide {
		head = "NAME\tTAGS\tDIGEST\tSIZE\tUNIQUE\tLAST USE\tUSES\tPINNED\tSTATE"
	}
	fmt.Fprintln(tw, head)
	for _, img := range images {
		name, tags, pinned := img.Name, strings.Join(img.Tags, ","), "no"
		if name == "" {
			name = "<unknown>"
		}
		if tags == "" {
			tags = "<none>"
		}
		if img.Pinned {
			pinned = "yes"
		}
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", name, tags, img.Digest, progress.Bytes(img.Size), progress.Bytes(img.UniqueSize),
				ago(img.LastUse, now), img.Uses, pinned, img.State)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, tags, shortDigest(img.Digest), progress.Bytes(img.Size), ago(img.LastUse, now), pinned)
	}
	return tw.Flush()
}
