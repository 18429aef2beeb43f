package phoenix

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ReservedPrefix starts the topics the host keeps for itself: a client
// cannot join them, so the host may later use them (node or room control
// channels, say) without colliding with an application's names.
const ReservedPrefix = "wasmkeep:"

// Errors of ValidateTopic. Compare with errors.Is.
var (
	// ErrTopicEmpty: the topic is the empty string.
	ErrTopicEmpty = errors.New("phoenix: empty topic")
	// ErrTopicTooLong: the topic is over MaxTopic bytes.
	ErrTopicTooLong = errors.New("phoenix: topic too long")
	// ErrTopicEncoding: the topic is not valid UTF-8 or holds a control
	// character (C0, DEL or C1).
	ErrTopicEncoding = errors.New("phoenix: topic is not printable UTF-8")
	// ErrTopicReserved: the topic is "phoenix" or starts with
	// ReservedPrefix.
	ErrTopicReserved = errors.New("phoenix: topic is reserved")
)

// ValidateTopic reports whether a client may join topic: it must be
// non-empty, at most MaxTopic bytes of valid UTF-8 without control
// characters, and neither TopicPhoenix (the heartbeat topic) nor start with
// ReservedPrefix. Topics are compared byte for byte: case matters and no
// normalisation is applied.
func ValidateTopic(topic string) error {
	if topic == "" {
		return ErrTopicEmpty
	}
	if len(topic) > MaxTopic {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTopicTooLong, len(topic), MaxTopic)
	}
	for i, r := range topic {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(topic[i:]); size == 1 {
				return fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrTopicEncoding, i)
			}
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character %U at byte %d", ErrTopicEncoding, r, i)
		}
	}
	if topic == TopicPhoenix || strings.HasPrefix(topic, ReservedPrefix) {
		return fmt.Errorf("%w: %q", ErrTopicReserved, topic)
	}
	return nil
}
