#!/usr/bin/env bash
# Run make stages in order, each timed, stopping at the first failure; optionally a
# side lane of stages that runs in the background once a given stage of the main
# lane has passed (stages that use their own test hosts and mostly wait on them,
# so they share the 2 cores with the main lane instead of adding their time to it).
#
#   scripts/timed-stages.sh NAME TIMES_FILE "MAIN STAGES" ["SIDE STAGES" AFTER_STAGE]
#
# Every stage's time is printed as it ends and kept in TIMES_FILE; the side lane's
# output goes to TIMES_FILE's directory (side-lane.log), its stage times to
# TIMES_FILE, and its tail is printed when it fails. The exit status is non-zero
# when any stage of either lane failed; a failed main lane stops the side lane.
set -uo pipefail

name=$1 times=$2 main_stages=$3 side_stages=${4:-} side_after=${5:-}
make_cmd=${MAKE:-make}
dir=$(dirname "$times")
side_log=$dir/side-lane.log
side_pid=""
mkdir -p "$dir"
: > "$times"
all=$(date +%s)

run_stage() {  # run_stage LANE STAGE: make STAGE, timed, its line appended to $times
    local lane=$1 stage=$2 t rc
    t=$(date +%s)
    $make_cmd --no-print-directory "$stage"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "$name: ${lane}stage $stage FAILED after $(( $(date +%s) - t )) s" | tee -a "$times"
        return "$rc"
    fi
    echo "$name: ${lane}stage $stage took $(( $(date +%s) - t )) s" | tee -a "$times"
}

side_lane() {
    local stage
    for stage in $side_stages; do
        run_stage "side lane: " "$stage" || return 1
    done
}

start_side() {
    echo "$name: side lane ($side_stages) started; its output: $side_log"
    setsid bash -c "$(declare -f run_stage side_lane); name='$name' times='$times' make_cmd='$make_cmd' \
        side_stages='$side_stages' side_lane" > "$side_log" 2>&1 &
    side_pid=$!
}

stop_side() {
    [ -n "$side_pid" ] || return 0
    echo "$name: stopping the side lane (pid $side_pid)"
    kill -TERM -- "-$side_pid" 2>/dev/null
    wait "$side_pid" 2>/dev/null
}

finish() {  # finish RC: print the table, exit RC
    echo "$name: all stages took $(( $(date +%s) - all )) s" >> "$times"
    echo "---- $name: stage times ----"
    cat "$times"
    exit "$1"
}

trap 'stop_side; exit 130' INT TERM

for stage in $main_stages; do
    if ! run_stage "" "$stage"; then
        stop_side
        finish 1
    fi
    if [ -n "$side_stages" ] && [ "$stage" = "$side_after" ]; then
        start_side
    fi
done

if [ -n "$side_pid" ]; then
    echo "$name: main lane done; waiting for the side lane"
    if ! wait "$side_pid"; then
        echo "---- $name: the side lane failed; the end of $side_log ----"
        tail -n 300 "$side_log"
        finish 1
    fi
    echo "$name: side lane passed (its output: $side_log)"
fi
finish 0
