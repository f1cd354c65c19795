// Package promtest holds the integration test of the chart's monitoring
// against a real Prometheus (Debian's /usr/bin/prometheus): both binaries run
// against a PostgreSQL cluster of the test's own and the shared test broker,
// Prometheus scrapes them with the chart's ServiceMonitor settings as a
// static config and evaluates the chart's rendered PrometheusRule; the test
// stops PostgreSQL and waits for the database-outage alerts, and runs every
// query of the shipped Grafana dashboard.
//
// The rendered rules and scrape settings come from
// `scripts/chart-check.sh --monitoring-out DIR` (helm + charts/test/cmd/promextract):
// $PCP_MONITORING_DIR when set (scripts/test.sh sets it), else the test runs
// the script itself (the first run builds the pinned helm, a few minutes).
package promtest
