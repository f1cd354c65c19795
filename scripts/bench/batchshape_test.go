package main

import "testing"

func TestBatchShapeNamesTypicalAndLargestSecond(t *testing.T) {
	b := batchShape{seconds: []shapeSecond{
		{txs: 200, passports: 1000}, // 5 each
		{txs: 4, passports: 1200},   // 300 each: the largest
		{txs: 150, passports: 900},  // 6 each: the median
		{txs: 100, passports: 1000}, // 10 each
		{txs: 250, passports: 1000}, // 4 each
	}}
	want := "ingest transactions in a second: typically 150 of 6.0 passports each, at their largest 4 of 300"
	if got := b.String(); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := (&batchShape{}).String(); got != "ingest transactions: none seen" {
		t.Fatalf("no seconds: got %q", got)
	}
}
