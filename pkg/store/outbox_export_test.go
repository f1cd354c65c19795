package store

// DeletePublishedSQL is the retention statement, for plan tests.
const DeletePublishedSQL = deletePublishedSQL
