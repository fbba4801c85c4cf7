package upstream

import (
	"context"
	"fmt"

	"github.com/docker/cli/cli/config/configfile"
	"github.com/google/go-containerregistry/pkg/authn"
)

type authKey struct{}

type requestAuth struct {
	auth authn.Authenticator
	id   string // tells transports with different credentials apart
}

// WithAuth makes the requests made with ctx use auth instead of the upstream's configured credentials
// (pull secrets of a custom resource). id must change when the credentials do.
func WithAuth(ctx context.Context, auth authn.Authenticator, id string) context.Context {
	return context.WithValue(ctx, authKey{}, requestAuth{auth: auth, id: id})
}

func authFrom(ctx context.Context) (requestAuth, bool) {
	a, ok := ctx.Value(authKey{}).(requestAuth)
	return a, ok
}

// AuthFromDockerConfig picks the credentials for the upstream (its URL's host, name or aliases) from a
// parsed docker config (a kubernetes.io/dockerconfigjson Secret); ok is false when it has none for it.
func (c *Client) AuthFromDockerConfig(cf *configfile.ConfigFile) (authn.Authenticator, bool, error) {
	for _, host := range c.hosts {
		ac, err := cf.GetAuthConfig(host)
		if err != nil {
			return nil, false, fmt.Errorf("read credentials for %s: %w", host, err)
		}
		if ac.Username != "" || ac.IdentityToken != "" || ac.RegistryToken != "" {
			return authn.FromConfig(authn.AuthConfig{Username: ac.Username, Password: ac.Password,
				IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken}), true, nil
		}
	}
	return nil, false, nil
}
