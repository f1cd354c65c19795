package record

// PartitionRange is the span [Start, End) of one partition's offsets: what
// a group-less reader (kafkax.Reader, for dlq-replay) is asked to read.
type PartitionRange struct {
	Partition int32
	// Start is the first offset to read.
	Start int64
	// End is one past the last offset to read, usually the high watermark
	// captured before reading, so that a read ends even while producers
	// keep appending.
	End int64
}
