package outbox

import (
	"reflect"
	"testing"

	"github.com/pcp/route-processing/pkg/record"
)

func TestOrderHeadersPutsTheContractsFirstThenTheRestByName(t *testing.T) {
	got := OrderHeaders(map[string]string{
		"zeta": "z", "traceparent": "tp", "eventId": "e", "type": "t", "alpha": "a", "correlationId": "c",
	})
	want := []record.Header{
		{Key: "type", Value: []byte("t")}, {Key: "eventId", Value: []byte("e")},
		{Key: "correlationId", Value: []byte("c")}, {Key: "traceparent", Value: []byte("tp")},
		{Key: "alpha", Value: []byte("a")}, {Key: "zeta", Value: []byte("z")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("OrderHeaders = %v\nwant %v", got, want)
	}
	if OrderHeaders(nil) != nil {
		t.Fatal("OrderHeaders(nil) is not nil")
	}
}

func TestHeaderMapRoundTripsThroughOrderHeaders(t *testing.T) {
	m := map[string]string{"type": "t", "eventId": "e", "x-extra": "1"}
	if got := HeaderMap(OrderHeaders(m)); !reflect.DeepEqual(got, m) {
		t.Fatalf("HeaderMap(OrderHeaders(m)) = %v, want %v", got, m)
	}
}
