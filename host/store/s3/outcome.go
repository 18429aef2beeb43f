package s3

import (
	"errors"
	"net"
	"time"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Outcome classifies how a request to S3 ended. Its values are short
// lower-case words, fit for a metric label.
type Outcome string

// The outcomes of a request.
const (
	// OutcomeOK: the server did what was asked.
	OutcomeOK Outcome = "ok"
	// OutcomeNotFound: no such key (a Get or HEAD of a missing key, an
	// If-Match on one).
	OutcomeNotFound Outcome = "not_found"
	// OutcomePrecondition: a condition did not hold (412).
	OutcomePrecondition Outcome = "precondition"
	// OutcomeConflict: a concurrent conditional write got in the way
	// (409 ConditionalRequestConflict).
	OutcomeConflict Outcome = "conflict"
	// OutcomeUnknown: a write that may or may not have been applied (a 5xx,
	// a timeout, a lost connection, a context cancelled in flight).
	OutcomeUnknown Outcome = "unknown"
	// OutcomeError: any other failure; for a write, one that did not
	// change the bucket (403, 400, a connection refused).
	OutcomeError Outcome = "error"
)

// Request describes one request sent to S3, for [Config.Observe].
type Request struct {
	// Op is the S3 operation: "GetObject", "PutObject", "HeadObject",
	// "DeleteObject" or "ListObjectsV2" (one per page).
	Op string
	// Outcome says how it ended.
	Outcome Outcome
	// Duration runs from the call into the SDK until its answer was read
	// (a Get's body included), the SDK's retries of a read included.
	Duration time.Duration
	// Err is the SDK's error, nil when Outcome is OutcomeOK.
	Err error
}

// The S3 operations a Bucket sends, as named in a Request.
const (
	opGet    = "GetObject"
	opHead   = "HeadObject"
	opPut    = "PutObject"
	opDelete = "DeleteObject"
	opList   = "ListObjectsV2"
)

// answer is what an error of the SDK says the server answered: its HTTP
// status (0 if no answer was read) and its S3 error code ("" if none).
type answer struct {
	status int
	code   string
}

// answerOf extracts the server's answer from an SDK error.
func answerOf(err error) answer {
	var a answer
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		a.status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		a.code = ae.ErrorCode()
	}
	return a
}

// notSent reports whether err shows that the request never left this
// process: the connection to the server could not be opened.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// classify decides the outcome of a request that failed with err. A
// write is a Put or a Delete: without an answer, or with a 5xx, it may
// have been applied. What a missing key means is the caller's to say.
func classify(err error, write bool) Outcome {
	a := answerOf(err)
	switch {
	case a.status == 412 || a.code == "PreconditionFailed":
		return OutcomePrecondition
	case a.code == "ConditionalRequestConflict":
		return OutcomeConflict
	case a.code == "NoSuchKey", a.status == 404 && (a.code == "" || a.code == "NotFound"):
		// A HEAD's 404 has no body, hence no code, or the SDK's
		// "NotFound". NoSuchBucket, a 404 too, is an error.
		return OutcomeNotFound
	case a.status >= 500 && write:
		return OutcomeUnknown
	case a.status != 0, !write, notSent(err):
		return OutcomeError
	}
	// A write without an answer: a timeout, a reset connection, a context
	// cancelled or expired in flight.
	return OutcomeUnknown
}
