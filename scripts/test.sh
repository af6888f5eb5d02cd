#!/usr/bin/env bash
# Runs sluice's whole test suite on a Debian machine with Go.
#
# It installs the Debian packages the broker tests need when they are
# missing (rabbitmq-server, mosquitto, activemq, redis-server, and postgresql
# for the exactly-once inbox), without letting the packages start system
# services (the tests start their own brokers and database servers on
# 127.0.0.1 and stop them by PID), then runs vet and the race-enabled tests (listing every
# skipped test with its reason at the end), then Pulsar's and
# MQTT's connection fault scenarios again without -race. In-process
# brokers (kfake for Kafka, the Pulsar test broker) come from Go modules;
# the embedded MQTT broker is sluice's own (adapters/mqtt/embedded).
#
# With CI=true a broker (or PostgreSQL) that cannot be started fails the
# run instead of skipping its tests.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in rabbitmq-server mosquitto activemq redis-server mosquitto-clients redis-tools kcat postgresql; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if ((${#need[@]})); then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "test.sh: installing ${need[*]}" >&2
	# Keep package scripts from starting system-wide brokers.
	policy=/usr/sbin/policy-rc.d
	had_policy=0
	[ -e "$policy" ] && had_policy=1
	if [ "$had_policy" -eq 0 ]; then
		printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
		$sudo chmod +x "$policy"
	fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
	[ "$had_policy" -eq 1 ] || $sudo rm -f "$policy"
fi

echo "test.sh: go vet ./..." >&2
go vet ./...
echo "test.sh: go test -race -count=1 ./..." >&2
# -json through tck/testreport: the usual line per package and failed
# tests' output, then every skipped test with its reason.
go build -o "${TMPDIR:-/tmp}/sluice-testreport.$$" ./tck/testreport
trap 'rm -f "${TMPDIR:-/tmp}/sluice-testreport.$$"' EXIT
# A red run goes on to the runs below, so that one failure does not hide
# another; the script exits non-zero if any of them failed.
rc=0
go test -race -count=1 -timeout 60m -json ./... "$@" | "${TMPDIR:-/tmp}/sluice-testreport.$$" || rc=1
# pulsar-client-go v0.19.0 and paho.golang v0.23.0 race with themselves
# when a producer reconnects while it sends (see ClientRace in
# adapters/pulsar/reliability_test.go and adapters/mqtt/ledger_faults_test.go),
# so under -race the fault kit skips their broker-restart (and Pulsar's
# send-unconfirmed, whose send timeouts reconnect the producer) and keeps the
# producer off the faulted proxy. This short second run, without -race,
# restarts the brokers and cuts the producers' connections too, on every run.
echo "test.sh: Pulsar's and MQTT's connection fault scenarios without -race" >&2
go test -count=1 -timeout 10m "$@" -run 'TestReliability/(broker-restart|conn-reset|blackhole|stall|send-unconfirmed|rpc-restart|rpc-reset)$' ./adapters/pulsar/ || rc=1
go test -count=1 -timeout 10m "$@" -run 'TestLedgerFaults/(mosquitto|embedded)/(broker-restart|conn-reset|blackhole|stall|rpc-restart|rpc-reset)$' ./adapters/mqtt/ || rc=1
# Allocation bounds of code that reuses buffers through a sync.Pool, which
# drops a quarter of what is put back under -race: checked without it.
echo "test.sh: allocation bounds without -race" >&2
go test -count=1 -timeout 5m "$@" -run 'TestNewMessageEncodesAndStamps$' ./flow/ || rc=1
exit $rc
