package e2e

import "testing"

func TestFillCacheConfig(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"upstreams: []\n", "upstreams: []\nstorage:\n  path: \"/s\"\nlisten: \"127.0.0.1:1\"\n"},
		{"storage:\n    maxSize: 1Mi\nupstreams: []\n", "storage:\n    path: \"/s\"\n    maxSize: 1Mi\nupstreams: []\nlisten: \"127.0.0.1:1\"\n"},
		{"", "storage:\n  path: \"/s\"\nlisten: \"127.0.0.1:1\"\n"},
	} {
		got, err := fillCacheConfig(tc.in, "127.0.0.1:1", "/s")
		if err != nil || string(got) != tc.want {
			t.Errorf("fillCacheConfig(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := fillCacheConfig("listen: x\n", "127.0.0.1:1", "/s"); err == nil {
		t.Error("a test config with listen was accepted")
	}
}
