package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// answered builds the error the SDK returns for a server's answer: an
// operation error around a response error around the API error.
func answered(status int, code string) error {
	var apiErr error = errors.New("no body")
	if code != "" {
		apiErr = &smithy.GenericAPIError{Code: code, Message: "from the test"}
	}
	return &smithy.OperationError{ServiceID: "S3", OperationName: "Op", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err:      apiErr,
	}}
}

// unanswered builds the error of a request that got no answer.
func unanswered(err error) error {
	return &smithy.OperationError{ServiceID: "S3", OperationName: "Op", Err: fmt.Errorf("send request: %w", err)}
}

func TestClassify(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name        string
		err         error
		read, write Outcome
	}{
		{"412", answered(412, "PreconditionFailed"), OutcomePrecondition, OutcomePrecondition},
		{"412 without a body", answered(412, ""), OutcomePrecondition, OutcomePrecondition},
		{"409 conditional conflict", answered(409, "ConditionalRequestConflict"), OutcomeConflict, OutcomeConflict},
		{"409 of a posix server", answered(409, "ObjectParentIsFile"), OutcomeError, OutcomeError},
		{"404 NoSuchKey", answered(404, "NoSuchKey"), OutcomeNotFound, OutcomeNotFound},
		{"404 of a HEAD", answered(404, "NotFound"), OutcomeNotFound, OutcomeNotFound},
		{"404 without a body", answered(404, ""), OutcomeNotFound, OutcomeNotFound},
		{"404 NoSuchBucket", answered(404, "NoSuchBucket"), OutcomeError, OutcomeError},
		{"403", answered(403, "AccessDenied"), OutcomeError, OutcomeError},
		{"400", answered(400, "KeyTooLongError"), OutcomeError, OutcomeError},
		{"500", answered(500, "InternalError"), OutcomeError, OutcomeUnknown},
		{"503", answered(503, "SlowDown"), OutcomeError, OutcomeUnknown},
		{"connection refused", unanswered(dial), OutcomeError, OutcomeError},
		{"connection reset", unanswered(reset), OutcomeError, OutcomeUnknown},
		{"truncated answer", unanswered(io.ErrUnexpectedEOF), OutcomeError, OutcomeUnknown},
		{"timeout", unanswered(context.DeadlineExceeded), OutcomeError, OutcomeUnknown},
		{"cancelled", unanswered(context.Canceled), OutcomeError, OutcomeUnknown},
	} {
		if got := classify(tc.err, false); got != tc.read {
			t.Errorf("%s: read: %s, want %s", tc.name, got, tc.read)
		}
		if got := classify(tc.err, true); got != tc.write {
			t.Errorf("%s: write: %s, want %s", tc.name, got, tc.write)
		}
	}
}

func TestETagForms(t *testing.T) {
	for in, want := range map[string]string{"": "", `"abc"`: `"abc"`, "abc": `"abc"`} {
		if got := quoted(in); got != want {
			t.Errorf("quoted(%q) = %q, want %q", in, got, want)
		}
	}
	for etag, want := range map[string]bool{
		`"9b2cf535f27731c974343645a3985328"`: true,
		`"9b2c-2"`:                           true,
		`""`:                                 true,
		`9b2c`:                               false,
		`*`:                                  false,
		`"`:                                  false,
		`""9b2c""`:                           false,
		`W/"9b2c"`:                           false,
		``:                                   false,
	} {
		if got := wellFormed(etag); got != want {
			t.Errorf("wellFormed(%q) = %v, want %v", etag, got, want)
		}
	}
}
