package phoenix

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTopic(t *testing.T) {
	for _, topic := range []string{
		"room:lobby", "a", "phoenix:x", "Phoenix", "WASMKEEP:x", "wasmkeep", "x:wasmkeep:",
		"ünïcödé 房间 🙂", "with space", strings.Repeat("t", MaxTopic),
		"\u200b\u202e", // format characters are not control characters
	} {
		if err := ValidateTopic(topic); err != nil {
			t.Errorf("ValidateTopic(%q) = %v", topic, err)
		}
	}
	for _, tc := range []struct {
		topic string
		want  error
	}{
		{"", ErrTopicEmpty},
		{strings.Repeat("t", MaxTopic+1), ErrTopicTooLong},
		{strings.Repeat("é", 128), ErrTopicTooLong},
		{"a\x00", ErrTopicEncoding},
		{"a\tb", ErrTopicEncoding},
		{"a\nb", ErrTopicEncoding},
		{"\x1f", ErrTopicEncoding},
		{"a\x7f", ErrTopicEncoding},
		{"a\u0085", ErrTopicEncoding},
		{"a\u009f", ErrTopicEncoding},
		{"a\xff", ErrTopicEncoding},
		{"a\xc3", ErrTopicEncoding},
		{"\xed\xa0\x80", ErrTopicEncoding}, // an encoded surrogate
		{"phoenix", ErrTopicReserved},
		{"wasmkeep:", ErrTopicReserved},
		{"wasmkeep:node", ErrTopicReserved},
	} {
		if err := ValidateTopic(tc.topic); !errors.Is(err, tc.want) {
			t.Errorf("ValidateTopic(%q) = %v, want %v", tc.topic, err, tc.want)
		}
	}
	// A literal U+FFFD is a valid character.
	if err := ValidateTopic("a\ufffd"); err != nil {
		t.Errorf("ValidateTopic(U+FFFD) = %v", err)
	}
}
