package s3

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in             string
		bucket, prefix string
		err            string
	}{
		{in: "s3://b", bucket: "b"},
		{in: "s3://b/", bucket: "b"},
		{in: "s3://my-bucket/wasmkeep/prod", bucket: "my-bucket", prefix: "wasmkeep/prod"},
		{in: "s3://my.bucket/p/", bucket: "my.bucket", prefix: "p/"},
		{in: "s3://", err: "no bucket"},
		{in: "s3:b/p", err: "no bucket"},
		{in: "http://b/p", err: "want s3://"},
		{in: "b/p", err: "want s3://"},
		{in: "s3://key:secret@b/p", err: "without credentials"},
		{in: "s3://b:9000/p", err: "without credentials, port"},
		{in: "s3://b/p?region=x", err: "query"},
		{in: "s3://b/p#f", err: "fragment"},
		{in: "s3://b//p", err: "prefix"},
		{in: "s3://b/a b", err: "prefix"},
		{in: "s3://b/a/../c", err: "prefix"},
	} {
		c, err := ParseURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseURL(%q) = %+v, %v; want an error with %q", tc.in, c, err, tc.err)
			}
			continue
		}
		if err != nil || c.Bucket != tc.bucket || c.Prefix != tc.prefix {
			t.Errorf("ParseURL(%q) = bucket %q prefix %q, %v; want %q, %q", tc.in, c.Bucket, c.Prefix, err, tc.bucket, tc.prefix)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		c   Config
		err string // "" for valid
	}{
		{c: Config{Bucket: "b"}},
		{c: Config{Bucket: "b", Prefix: "p/q/", Endpoint: "https://s3.example.com", AccessKeyID: "k", SecretAccessKey: "s", SessionToken: "t", MaxObjectSize: 1}},
		{c: Config{}, err: "no bucket"},
		{c: Config{Bucket: "a/b"}, err: "bucket name"},
		{c: Config{Bucket: "b", Prefix: "/p"}, err: "prefix"},
		{c: Config{Bucket: "b", AccessKeyID: "k"}, err: "secret"},
		{c: Config{Bucket: "b", SecretAccessKey: "s"}, err: "secret"},
		{c: Config{Bucket: "b", SessionToken: "t"}, err: "session token"},
		{c: Config{Bucket: "b", MaxObjectSize: -1}, err: "MaxObjectSize"},
		{c: Config{Bucket: "b", Endpoint: "127.0.0.1:7070"}, err: "endpoint"},
		{c: Config{Bucket: "b", Endpoint: "ftp://host"}, err: "endpoint"},
	} {
		err := tc.c.check()
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("check(%+v) = %v, want %q", tc.c, err, tc.err)
		}
	}
}

func TestConfigPrefix(t *testing.T) {
	for in, want := range map[string]string{"": "", "/": "", "p": "p/", "p/": "p/", "p/q": "p/q/"} {
		c := Config{Prefix: in}
		if got := c.prefix(); got != want {
			t.Errorf("prefix of %q = %q, want %q", in, got, want)
		}
	}
}

func TestImpliesPathStyle(t *testing.T) {
	for endpoint, want := range map[string]bool{
		"http://127.0.0.1:7070":                 true,
		"http://[::1]:9000":                     true,
		"https://10.1.2.3":                      true,
		"http://localhost:9000":                 true,
		"http://minio.localhost":                true,
		"https://s3.us-east-1.amazonaws.com":    false,
		"https://acct.r2.cloudflarestorage.com": false,
		"http://minio:9000":                     false,
		"://bad":                                false,
	} {
		if got := impliesPathStyle(endpoint); got != want {
			t.Errorf("impliesPathStyle(%q) = %v, want %v", endpoint, got, want)
		}
	}
}
