package s3test_test

import (
	"context"
	"net"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/wasmkeep/wasmkeep/internal/s3test"
)

func client(s *s3test.Server, secret string) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       s3test.Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKeyID, secret, ""),
		Retryer:      aws.NopRetryer{},
	})
}

// TestStart checks what a test gets: a server that answers its own
// credentials only, an empty bucket, fresh buckets on demand, and a server
// that is gone once the test that started it has ended.
func TestStart(t *testing.T) {
	var endpoint string
	t.Run("server", func(t *testing.T) {
		s := s3test.Start(t)
		endpoint = s.Endpoint
		c := client(s, s.SecretAccessKey)
		ctx := t.Context()
		if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
			t.Fatalf("the bucket Start made: %v", err)
		}
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket)})
		if err != nil || len(out.Contents) != 0 {
			t.Fatalf("the bucket is not empty: %v, %v", out, err)
		}
		a, b := s.NewBucket(t), s.NewBucket(t)
		if a == b || a == s.Bucket {
			t.Fatalf("NewBucket gave %q and %q (Start made %q)", a, b, s.Bucket)
		}
		for _, name := range []string{a, b} {
			if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)}); err != nil {
				t.Fatalf("bucket %s: %v", name, err)
			}
		}
		if _, err := client(s, "wrong").HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.Bucket)}); err == nil {
			t.Fatal("the server accepted a wrong secret")
		}
	})
	if endpoint == "" {
		t.Skip("no server was started")
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", u.Host)
	if err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after the test that started it ended", u.Host)
	}
}
