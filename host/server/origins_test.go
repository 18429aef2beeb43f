package server

import (
	"net/http/httptest"
	"testing"
)

// TestAllowedOrigins: which upgrades' Origin may open a socket, by list.
func TestAllowedOrigins(t *testing.T) {
	for _, c := range []struct {
		list   []string
		origin string
		want   bool
	}{
		{nil, "", true},
		{nil, "http://127.0.0.1:8080", true},
		{nil, "HTTPS://127.0.0.1:8080", true}, // the node's own host, whatever the scheme (a proxy may end TLS)
		{nil, "http://127.0.0.1:9999", false},
		{nil, "http://evil.example", false},
		{nil, "null", false},
		{[]string{"*"}, "http://evil.example", true},
		{[]string{"*"}, "null", false},
		{[]string{"https://app.example"}, "https://app.example", true},
		{[]string{"https://app.example"}, "https://APP.example", true},
		{[]string{"https://app.example"}, "http://app.example", false},
		{[]string{"https://app.example"}, "https://app.example:8443", false},
		{[]string{"https://app.example:8443"}, "https://app.example:8443", true},
		{[]string{"https://*.app.example"}, "https://a.b.app.example", true},
		{[]string{"https://*.app.example"}, "https://app.example", false},
		{[]string{"https://*.app.example"}, "https://evilapp.example", false},
		{[]string{"http://a.example", "http://b.example"}, "http://b.example", true},
	} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:8080/actor/c/r", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if err := ValidOrigins(c.list); err != nil {
			t.Fatalf("%v: %v", c.list, err)
		}
		if got := newOrigins(c.list).allow(r); got != c.want {
			t.Errorf("%v allows %q: %v, want %v", c.list, c.origin, got, c.want)
		}
	}
	for _, bad := range []string{"app.example", "https://app.example/path", "https://", "https://a.*.example", "https://app.example?x=1", "https://u@app.example"} {
		if err := ValidOrigins([]string{bad}); err == nil {
			t.Errorf("ValidOrigins(%q) took it", bad)
		}
	}
}
