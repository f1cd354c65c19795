// Package promtest holds the integration test of the chart's monitoring
// against a real Prometheus (Debian's /usr/bin/prometheus): both binaries run
// against a PostgreSQL cluster of the test's own and the shared test broker,
// Prometheus scrapes them with the chart's ServiceMonitor settings as a
// static config and evaluates the chart's rendered PrometheusRule; the test
// stops PostgreSQL and waits for the database-outage alerts (expression true,
// then firing with `for` shortened to 2s, then false once PostgreSQL is back),
// checks that every rule evaluates without error and that every metric a rule
// or a dashboard query names is exported, and runs every query of the shipped
// Grafana dashboard over the run (each must return a series with a number).
//
// The relay's vacuum gauges (route_passport_db_oldest_xact_age_seconds,
// route_passport_outbox_{live,dead}_tuples, route_passport_outbox_table_bytes)
// are among them: the test requires each one that a rule or panel names.
//
// TestDashboardReadyPodsPromtool runs the "ready pods" panels' queries with
// `promtool test rules` (Debian package prometheus) over synthetic series:
// a readiness gauge has one series per dependency, and the panels count pods.
//
// The rendered rules and scrape settings come from
// `scripts/chart-check.sh --monitoring-out DIR` (helm + charts/test/cmd/promextract):
// $PCP_MONITORING_DIR when set (scripts/test.sh sets it), else the test runs
// the script itself (the first run builds the pinned helm, a few minutes).
package promtest
