package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// ErrTooLarge means a body is longer than [Config.MaxObjectSize]: a Put
// that was not sent, or a Get that did not read the body.
var ErrTooLarge = errors.New("s3: object larger than MaxObjectSize")

// Bucket is a [store.Bucket] on an S3 bucket. It is safe for concurrent
// use. Make one with [New].
type Bucket struct {
	client  *s3.Client
	bucket  string
	prefix  string // "" or ending in '/'
	maxSize int64
	observe func(Request)
	name    string

	// etagsNotMD5 is set once the server has shown that its ETags are
	// not the MD5s of their bodies.
	etagsNotMD5 atomic.Bool
}

var _ store.Bucket = (*Bucket)(nil)

// New checks c and returns a Bucket that reaches c.Bucket as c says. It
// loads the AWS environment and shared config (for the region, the
// endpoint and the credentials c leaves unset) but sends no request:
// whether the bucket exists and the credentials work shows at the first
// call.
func New(ctx context.Context, c Config) (*Bucket, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	var opts []func(*config.LoadOptions) error
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(c.Profile))
	}
	if c.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)))
	}
	awsConfig, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3: AWS config: %w", err)
	}
	if awsConfig.Region == "" {
		awsConfig.Region = DefaultRegion
	}
	client := s3.NewFromConfig(awsConfig, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		// BaseEndpoint holds, by now, the endpoint of the environment
		// or shared config too.
		if c.PathStyle || (o.BaseEndpoint != nil && impliesPathStyle(*o.BaseEndpoint)) {
			o.UsePathStyle = true
		}
		// Servers that send no checksum would make the SDK log a
		// warning on every Get.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	b := &Bucket{
		client:  client,
		bucket:  c.Bucket,
		prefix:  c.prefix(),
		maxSize: c.withDefaults().MaxObjectSize,
		observe: c.Observe,
		name:    "s3://" + c.Bucket + "/" + c.prefix(),
	}
	return b, nil
}

// String returns the Bucket's address, "s3://BUCKET/PREFIX/", for messages.
func (b *Bucket) String() string { return b.name }

// noRetries is the option of every write: one attempt only (see the
// package documentation).
func noRetries(o *s3.Options) { o.Retryer = aws.NopRetryer{} }

// object returns the object name of key.
func (b *Bucket) object(key string) *string { return aws.String(b.prefix + key) }

// report tells Config.Observe about a request.
func (b *Bucket) report(op string, start time.Time, outcome Outcome, err error) {
	if b.observe != nil {
		b.observe(Request{Op: op, Outcome: outcome, Duration: time.Since(start), Err: err})
	}
}

// failed wraps a request's error: with the sentinel of its outcome, if it
// has one, and always with the SDK's error, so that both show to
// errors.Is (context.Canceled among them).
func failed(op, key string, outcome Outcome, err error) error {
	var sentinel error
	switch outcome {
	case OutcomeNotFound:
		sentinel = store.ErrNotFound
	case OutcomePrecondition:
		sentinel = store.ErrPrecondition
	case OutcomeConflict:
		sentinel = store.ErrConflict
	case OutcomeUnknown:
		sentinel = store.ErrUnknownOutcome
	default:
		return fmt.Errorf("s3: %s %q: %w", op, key, err)
	}
	return fmt.Errorf("s3: %s %q: %w: %w", op, key, sentinel, err)
}

// errMissingIfMatch is the answer to an If-Match against a missing key.
var errMissingIfMatch = fmt.Errorf("%w (%w)", store.ErrPrecondition, store.ErrNotFound)

// refused wraps the error of a call refused before any request.
func refused(op, key string, err error) error {
	return fmt.Errorf("s3: %s %q: %w", op, key, err)
}

// quoted returns etag in the quoted form every ETag of a Bucket has.
func quoted(etag string) string {
	if etag == "" || strings.HasPrefix(etag, `"`) {
		return etag
	}
	return `"` + etag + `"`
}

// wellFormed reports whether etag has the form of the ETags a Bucket
// returns: one quoted string without quotes inside.
func wellFormed(etag string) bool {
	return len(etag) >= 2 && etag[0] == '"' && etag[len(etag)-1] == '"' &&
		!strings.Contains(etag[1:len(etag)-1], `"`)
}

// Get implements [store.Bucket].
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := store.ValidKey(key); err != nil {
		return nil, "", refused("get", key, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, "", refused("get", key, err)
	}
	var first getAnswer
	for attempt := 1; ; attempt++ {
		a, err := b.getOnce(ctx, key)
		if err != nil {
			return nil, "", err
		}
		if !a.verifiable || b.etagsNotMD5.Load() || a.md5Matches() {
			return a.body, a.etag, nil
		}
		if attempt == 1 {
			first = a
		}
		if attempt == pairAttempts {
			// The same object each time, and never its MD5: this
			// server's ETags are not MD5s. Stop checking.
			if a.etag == first.etag && bytes.Equal(a.body, first.body) {
				b.etagsNotMD5.Store(true)
			}
			return a.body, a.etag, nil
		}
	}
}

// pairAttempts bounds the GETs of a Get whose ETag is not the MD5 of its
// body (see the package documentation).
const pairAttempts = 3

// md5CheckLimit is the largest body whose MD5 a Get compares with its
// ETag. Objects that are replaced (records, manifests) are small; large
// ones (segments, modules) are written once.
const md5CheckLimit = 16 << 20

// getAnswer is one GET's answer.
type getAnswer struct {
	body []byte
	etag string
	// verifiable says that etag should be the MD5 of body: it has the
	// form of one, the body is small enough to hash, and the object is
	// not encrypted with KMS or a customer's key (whose ETags are not
	// MD5s).
	verifiable bool
}

func (a getAnswer) md5Matches() bool {
	sum := md5.Sum(a.body)
	return a.etag[1:len(a.etag)-1] == hex.EncodeToString(sum[:])
}

// md5Form reports whether etag looks like an MD5: 32 lower-case hex
// digits in quotes.
func md5Form(etag string) bool {
	if len(etag) != 34 || etag[0] != '"' || etag[33] != '"' {
		return false
	}
	for _, c := range etag[1:33] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// getOnce sends one GET for key and reads its answer.
func (b *Bucket) getOnce(ctx context.Context, key string) (getAnswer, error) {
	start := time.Now()
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.bucket, Key: b.object(key)})
	if err != nil {
		outcome := classify(err, false)
		b.report(opGet, start, outcome, err)
		return getAnswer{}, failed("get", key, outcome, err)
	}
	defer out.Body.Close()
	body, err := b.readBody(out.Body, aws.ToInt64(out.ContentLength))
	etag := quoted(aws.ToString(out.ETag))
	if err == nil && etag == "" {
		err = errors.New("the server sent no ETag")
	}
	if err != nil {
		b.report(opGet, start, OutcomeError, err)
		return getAnswer{}, refused("get", key, err)
	}
	b.report(opGet, start, OutcomeOK, nil)
	sse := out.ServerSideEncryption
	return getAnswer{
		body: body,
		etag: etag,
		verifiable: md5Form(etag) && len(body) <= md5CheckLimit && out.SSECustomerAlgorithm == nil &&
			sse != types.ServerSideEncryptionAwsKms && sse != types.ServerSideEncryptionAwsKmsDsse,
	}, nil
}

// readBody reads a body of length size (-1 or 0 if the server did not
// say), up to the Bucket's maximum.
func (b *Bucket) readBody(r io.Reader, size int64) ([]byte, error) {
	if size > b.maxSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, size, b.maxSize)
	}
	var buf bytes.Buffer
	if size > 0 {
		buf.Grow(int(size))
	}
	n, err := buf.ReadFrom(io.LimitReader(r, b.maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	if n > b.maxSize {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, b.maxSize)
	}
	return buf.Bytes(), nil
}

// Put implements [store.Bucket].
func (b *Bucket) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	if err := store.ValidKey(key); err != nil {
		return "", refused("put", key, err)
	}
	if err := cond.Validate(); err != nil {
		return "", refused("put", key, err)
	}
	if err := ctx.Err(); err != nil {
		return "", refused("put", key, err)
	}
	if int64(len(body)) > b.maxSize {
		return "", refused("put", key, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(body), b.maxSize))
	}
	if cond.IfMatch != "" && !wellFormed(cond.IfMatch) {
		return "", refused("put", key, fmt.Errorf("%w: If-Match %q is no ETag of this bucket", store.ErrPrecondition, cond.IfMatch))
	}
	in := &s3.PutObjectInput{
		Bucket:        &b.bucket,
		Key:           b.object(key),
		ContentLength: aws.Int64(int64(len(body))),
	}
	if cond.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	if cond.IfMatch != "" {
		in.IfMatch = aws.String(cond.IfMatch)
	}
	var (
		out   *s3.PutObjectOutput
		err   error
		start time.Time
	)
	for attempt := 1; ; attempt++ {
		r := newGuardedReader(body)
		in.Body = r
		start = time.Now()
		out, err = b.client.PutObject(ctx, in, noRetries)
		r.close()
		if err == nil || attempt == raceAttempts || !lostDirectoryRace(err) {
			break
		}
		b.report(opPut, start, OutcomeError, err)
	}
	if err != nil {
		outcome := classify(err, true)
		b.report(opPut, start, outcome, err)
		if outcome == OutcomeNotFound && cond.IfMatch != "" {
			return "", fmt.Errorf("s3: put %q: %w: %w", key, errMissingIfMatch, err)
		}
		return "", failed("put", key, outcome, err)
	}
	etag := quoted(aws.ToString(out.ETag))
	if etag == "" {
		err := fmt.Errorf("%w: the server accepted the write but sent no ETag", store.ErrUnknownOutcome)
		b.report(opPut, start, OutcomeUnknown, err)
		return "", refused("put", key, err)
	}
	b.report(opPut, start, OutcomeOK, nil)
	return etag, nil
}

// raceAttempts bounds the attempts of a Put that [lostDirectoryRace]s.
const raceAttempts = 3

// lostDirectoryRace reports whether err is versitygw's answer to a PUT
// whose parent directory a concurrent DELETE removed, the directory
// emptied by the DELETE, between the PUT's mkdir and its link:
// 409 ExistingObjectIsDirectory. The PUT did not land, so sending it
// again is safe, conditional or not; a key that really is a directory
// gets the same answer each time.
func lostDirectoryRace(err error) bool {
	return answerOf(err).code == "ExistingObjectIsDirectory"
}

// Delete implements [store.Bucket].
func (b *Bucket) Delete(ctx context.Context, key string, ifMatch string) error {
	if err := store.ValidKey(key); err != nil {
		return refused("delete", key, err)
	}
	if err := ctx.Err(); err != nil {
		return refused("delete", key, err)
	}
	in := &s3.DeleteObjectInput{Bucket: &b.bucket, Key: b.object(key)}
	if ifMatch != "" {
		if !wellFormed(ifMatch) {
			return refused("delete", key, fmt.Errorf("%w: If-Match %q is no ETag of this bucket", store.ErrPrecondition, ifMatch))
		}
		if err := b.headIfMatch(ctx, key, ifMatch); err != nil {
			return err
		}
		in.IfMatch = aws.String(ifMatch)
	}
	start := time.Now()
	_, err := b.client.DeleteObject(ctx, in, noRetries)
	if err == nil {
		b.report(opDelete, start, OutcomeOK, nil)
		return nil
	}
	outcome := classify(err, true)
	b.report(opDelete, start, outcome, err)
	switch {
	case outcome == OutcomeNotFound && ifMatch != "":
		return fmt.Errorf("s3: delete %q: %w: %w", key, errMissingIfMatch, err)
	case outcome == OutcomeNotFound:
		return nil // nothing left to delete
	}
	return failed("delete", key, outcome, err)
}

// headIfMatch checks, before a conditional delete, that key exists with
// ETag ifMatch, and returns the Delete's error if not.
func (b *Bucket) headIfMatch(ctx context.Context, key, ifMatch string) error {
	start := time.Now()
	_, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: b.object(key), IfMatch: aws.String(ifMatch)})
	if err == nil {
		b.report(opHead, start, OutcomeOK, nil)
		return nil
	}
	outcome := classify(err, false)
	b.report(opHead, start, outcome, err)
	if outcome == OutcomeNotFound {
		return fmt.Errorf("s3: delete %q: %w: %w", key, errMissingIfMatch, err)
	}
	return failed("delete", key, outcome, err)
}

// List implements [store.Bucket].
func (b *Bucket) List(ctx context.Context, prefix string) ([]string, error) {
	if err := store.ValidPrefix(prefix); err != nil {
		return nil, refused("list", prefix, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, refused("list", prefix, err)
	}
	in := &s3.ListObjectsV2Input{Bucket: &b.bucket}
	if p := b.prefix + prefix; p != "" {
		in.Prefix = aws.String(p)
	}
	keys := make([]string, 0)
	pages := s3.NewListObjectsV2Paginator(b.client, in)
	for pages.HasMorePages() {
		start := time.Now()
		page, err := pages.NextPage(ctx)
		if err != nil {
			outcome := classify(err, false)
			b.report(opList, start, outcome, err)
			return nil, failed("list", prefix, outcome, err)
		}
		b.report(opList, start, OutcomeOK, nil)
		for _, o := range page.Contents {
			key, ok := strings.CutPrefix(aws.ToString(o.Key), b.prefix)
			if ok && store.ValidKey(key) == nil {
				keys = append(keys, key)
			}
		}
	}
	// S3 lists in UTF-8 byte order, which is the store's for its ASCII
	// keys; sorting costs little and holds for every server.
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// ListPage implements [store.Bucket]: one ListObjectsV2 request, with
// StartAfter and MaxKeys.
func (b *Bucket) ListPage(ctx context.Context, prefix, after string, limit int) ([]store.Entry, bool, error) {
	if err := store.ValidPrefix(prefix); err != nil {
		return nil, false, refused("list", prefix, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, refused("list", prefix, err)
	}
	if limit <= 0 || limit > store.MaxListPage {
		limit = store.MaxListPage
	}
	in := &s3.ListObjectsV2Input{Bucket: &b.bucket, MaxKeys: aws.Int32(int32(limit))}
	if p := b.prefix + prefix; p != "" {
		in.Prefix = aws.String(p)
	}
	if after != "" {
		in.StartAfter = aws.String(b.prefix + after)
	}
	start := time.Now()
	page, err := b.client.ListObjectsV2(ctx, in)
	if err != nil {
		outcome := classify(err, false)
		b.report(opList, start, outcome, err)
		return nil, false, failed("list", prefix, outcome, err)
	}
	b.report(opList, start, OutcomeOK, nil)
	entries := make([]store.Entry, 0, len(page.Contents))
	for _, o := range page.Contents {
		key, ok := strings.CutPrefix(aws.ToString(o.Key), b.prefix)
		if ok && store.ValidKey(key) == nil && key > after {
			entries = append(entries, store.Entry{Key: key, ETag: quoted(aws.ToString(o.ETag))})
		}
	}
	slices.SortFunc(entries, func(x, y store.Entry) int { return strings.Compare(x.Key, y.Key) })
	return entries, aws.ToBool(page.IsTruncated), nil
}

// guardedReader reads a Put's body for the SDK until the Put returns.
// An HTTP transport may go on reading a request body after its round trip
// returned (after an early answer or a timeout); a Put must not touch the
// caller's slice once it returned, and copying every body would double
// the memory of large ones.
type guardedReader struct {
	mu     sync.Mutex
	r      *bytes.Reader
	closed bool
}

func newGuardedReader(body []byte) *guardedReader {
	return &guardedReader{r: bytes.NewReader(body)}
}

var errPutReturned = errors.New("s3: body read after its Put returned")

// Read implements io.Reader.
func (g *guardedReader) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, errPutReturned
	}
	return g.r.Read(p)
}

// Seek implements io.Seeker, which the SDK needs to compute checksums and
// rewind.
func (g *guardedReader) Seek(offset int64, whence int) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, errPutReturned
	}
	return g.r.Seek(offset, whence)
}

// close ends reading.
func (g *guardedReader) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
