package record

import (
	"errors"
	"fmt"
	"strings"
)

// MaxTopicLen is the longest topic name Kafka accepts.
const MaxTopicLen = 249

// CheckTopicName says why Kafka would refuse name as a topic name: it must
// be 1–249 of ASCII letters, digits, '.', '_' and '-', and neither "." nor
// "..". A name checked here fails at start, not at the first produce or
// subscribe.
func CheckTopicName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > MaxTopicLen:
		return fmt.Errorf("is %d characters long; Kafka allows %d", len(name), MaxTopicLen)
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a valid topic name", name)
	case strings.IndexFunc(name, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')
	}) >= 0:
		return fmt.Errorf("%q has a character Kafka does not allow in a topic name (letters, digits, '.', '_', '-')", name)
	}
	return nil
}
