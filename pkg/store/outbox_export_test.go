package store

// The statements, for plan tests.
const (
	DeletePublishedSQL = deletePublishedSQL
	MarkPublishedSQL   = markPublishedSQL
	RetrySQL           = retrySQL
	ReleaseSQL         = releaseSQL
	PostponeSQL        = postponeSQL
)
