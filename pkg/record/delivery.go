package record

import "time"

// ReportMargin is the most a producer waits for a batch's delivery reports
// beyond its delivery timeout (message.timeout.ms, which librdkafka
// enforces only approximately). A caller that must be done within a bound
// (the relay's lease) budgets it; the producer may wait less (kafkax: half
// a short delivery timeout).
const ReportMargin = 5 * time.Second
