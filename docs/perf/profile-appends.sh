#!/bin/bash
# Profiles spool serve under small JSON appends (docs/perf/durable-streams-gap.md, "perf profile").
# usage: docs/perf/profile-appends.sh <tag> <writers> <appends> <perf:0|1>
# B: a release build with symbols and frame pointers (see the document); OUT: under target/perf/.
set -u
TAG=$1; W=$2; N=$3; PERF=$4
B=${B:-target/perf/release}
OUT=${OUT_ROOT:-target/perf/runs}/$TAG; rm -rf $OUT; mkdir -p $OUT
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
RUST_LOG=warn SPOOL_RATE_LIMITS=off $B/spool serve --no-auth --addr 127.0.0.1:$PORT --data-dir $OUT/data > $OUT/server.out 2> $OUT/server.err &
PID=$!
echo "server pid $PID port $PORT" > $OUT/info
for i in $(seq 100); do grep -q http:// $OUT/server.out 2>/dev/null && break; sleep 0.1; done
ORIGIN=http://127.0.0.1:$PORT
node docs/perf/append-load.cjs $ORIGIN warm 1000 $W > $OUT/warm.json
sleep 0.5
echo "tasks before: $(ls /proc/$PID/task | wc -l)" >> $OUT/info
PR=
if [ "$PERF" = 1 ]; then
  perf record ${PERFARGS:--g -F 999} -p $PID -o $OUT/perf.data > $OUT/perf-record.log 2>&1 &
  PR=$!
fi
if [ "$PERF" != 0 ]; then
  perf stat ${STATARGS:--e task-clock,context-switches,cpu-migrations,page-faults} -p $PID -o $OUT/perf-stat.txt &
  PS=$!
  sleep 0.5
fi
uptime > $OUT/uptime-before
for t in /proc/$PID/task/*; do echo "$(basename $t) $(cat $t/comm) $(cut -d" " -f14,15 $t/stat)"; done > $OUT/cpu-before
{ time node docs/perf/append-load.cjs $ORIGIN run $N $W > $OUT/run.json ; } 2> $OUT/client-time
uptime > $OUT/uptime-after
for t in /proc/$PID/task/*; do echo "$(basename $t) $(cat $t/comm) $(cut -d" " -f14,15 $t/stat)"; done > $OUT/cpu-after
echo "tasks after: $(ls /proc/$PID/task | wc -l)" >> $OUT/info
if [ "$PERF" != 0 ]; then
  kill -INT $PR $PS; wait $PR $PS
fi
kill $PID; wait $PID 2>/dev/null
ls -la $OUT/data >> $OUT/info 2>&1
cat $OUT/run.json $OUT/info $OUT/uptime-after
