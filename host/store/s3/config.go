package s3

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// DefaultMaxObjectSize is the largest body a Bucket reads or writes when
// [Config.MaxObjectSize] is zero: 4 GiB, since a snapshot segment's size is
// recorded in 32 bits and a room's memory is at most 4 GiB.
const DefaultMaxObjectSize int64 = 4 << 30

// DefaultRegion is the region of a Bucket whose region is set neither in
// its Config nor by the AWS environment or shared config. Most S3 servers
// other than AWS accept any region, and sign with this one by default.
const DefaultRegion = "us-east-1"

// Config says which bucket a [Bucket] reaches and how. The zero value of
// every field but Bucket means the default its comment gives.
type Config struct {
	// Bucket is the S3 bucket's name. Required.
	Bucket string

	// Prefix, if not empty, is the key under which every object of the
	// store lives: key k is the object Prefix/k. It follows the key rules
	// of package store (segments of [A-Za-z0-9._~%-] joined by '/'); a
	// trailing '/' is ignored.
	Prefix string

	// Endpoint is the S3 server's base URL, such as
	// "http://127.0.0.1:7070". Empty means the SDK's: AWS_ENDPOINT_URL_S3
	// or AWS_ENDPOINT_URL, the shared config's endpoint_url, else AWS.
	Endpoint string

	// Region is the bucket's region. Empty: AWS_REGION or the shared
	// config's region, and us-east-1 where neither sets one (New's
	// fallback, the constant above).
	Region string

	// PathStyle addresses the bucket in the URL's path
	// (http://host/bucket/key) rather than its host name
	// (http://bucket.host/key). An endpoint whose host is an IP address or
	// localhost implies it, since no bucket name can be put in front of
	// those; set it for other servers without virtual-host names.
	PathStyle bool

	// AccessKeyID and SecretAccessKey, if set (both or neither), are the
	// credentials, with SessionToken for temporary ones. Unset means the
	// SDK's standard chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
	// the shared config and credentials files, web identity, ECS or EC2
	// instance roles.
	AccessKeyID, SecretAccessKey, SessionToken string

	// Profile names the shared config profile. Empty: AWS_PROFILE, or the
	// SDK's standard profile without it.
	Profile string

	// MaxObjectSize is the largest body Get reads and Put sends, in bytes.
	// Zero means [DefaultMaxObjectSize].
	MaxObjectSize int64

	// Observe, if not nil, is called after each request sent to S3, from
	// the goroutine that sent it; it must be safe for concurrent use and
	// quick.
	Observe func(Request)
}

// withDefaults returns c with its zero fields set to their defaults. The
// region and profile left empty are the SDK's to find, in New.
func (c Config) withDefaults() Config {
	if c.MaxObjectSize == 0 {
		c.MaxObjectSize = DefaultMaxObjectSize
	}
	return c
}

// ParseURL reads a store address of the form "s3://BUCKET" or
// "s3://BUCKET/PREFIX" into a Config with Bucket and Prefix set, for the
// caller to fill in the rest.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("s3: store URL: %w", err)
	}
	switch {
	case u.Scheme != "s3":
		return Config{}, fmt.Errorf("s3: store URL %q: want s3://BUCKET/PREFIX", raw)
	case u.Host == "" || u.Opaque != "":
		return Config{}, fmt.Errorf("s3: store URL %q: no bucket (want s3://BUCKET/PREFIX)", raw)
	case u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "":
		return Config{}, fmt.Errorf("s3: store URL %q: only s3://BUCKET/PREFIX, without credentials, port, query or fragment", raw)
	}
	c := Config{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}
	if err := c.check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// prefix returns the prefix of every object name: "" or Prefix + "/".
func (c *Config) prefix() string {
	p := strings.TrimSuffix(c.Prefix, "/")
	if p == "" {
		return ""
	}
	return p + "/"
}

// check validates c.
func (c *Config) check() error {
	if c.Bucket == "" {
		return errors.New("s3: no bucket")
	}
	if strings.ContainsAny(c.Bucket, "/ \t\r\n") {
		return fmt.Errorf("s3: bucket name %q", c.Bucket)
	}
	if p := strings.TrimSuffix(c.Prefix, "/"); p != "" {
		if err := store.ValidKey(p); err != nil {
			return fmt.Errorf("s3: prefix: %w", err)
		}
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return errors.New("s3: an access key ID needs its secret, and a secret its key ID")
	}
	if c.SessionToken != "" && c.AccessKeyID == "" {
		return errors.New("s3: a session token needs an access key ID and secret")
	}
	if c.MaxObjectSize < 0 {
		return fmt.Errorf("s3: negative MaxObjectSize %d", c.MaxObjectSize)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil {
			return fmt.Errorf("s3: endpoint: %w", err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("s3: endpoint %q: want http://HOST[:PORT] or https://HOST[:PORT]", c.Endpoint)
		}
	}
	return nil
}

// impliesPathStyle reports whether endpoint's host is one no bucket name
// can be put in front of: an IP address or localhost.
func impliesPathStyle(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := u.Hostname()
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil
}
