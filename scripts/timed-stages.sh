#!/usr/bin/env bash
# Run make stages in order, each timed, stopping at the first failure; optionally side
# lanes of stages, each running in the background once a given stage of the main lane
# has passed (stages that use test hosts of their own, so they share the machine's
# cores with the main lane instead of adding their time to it).
#
#   scripts/timed-stages.sh NAME TIMES_FILE "MAIN STAGES" ["SIDE STAGES" AFTER_STAGE]...
#
# Every stage's time is printed as it ends and kept in TIMES_FILE, with when it ended (seconds into
# the run: the last stage of each lane says where that lane ended), how busy the
# machine's CPUs were meanwhile (all lanes together, from /proc/stat: a stage beside
# a busy side lane is slower for it) and the CPU time its own processes used (make and
# every process it waited for: pytest, ansible-playbook, the controller-side engines;
# not the test-host containers, which run under podman, so the closing lines add the
# machine's and the containers' CPU time over the whole run). Side lane N's output goes to TIMES_FILE's
# directory (side-lane-N.log), its stage times to TIMES_FILE, and its tail is printed
# when it fails. The exit status is non-zero when any stage of any lane failed; a failed
# main lane stops the side lanes.
set -uo pipefail

name=$1 times=$2 main_stages=$3
shift 3
if (( $# % 2 )); then
    echo "timed-stages: side lanes come as pairs \"STAGES\" AFTER_STAGE, got an odd count: $*" >&2
    exit 2
fi
side_stages=() side_after=()
while (( $# )); do
    [[ " $main_stages " == *" $2 "* ]] || { echo "timed-stages: side lane ($1) starts after '$2', which is not a main-lane stage ($main_stages)" >&2; exit 2; }
    [[ -n "${1// /}" ]] && side_stages+=("$1") side_after+=("$2")  # an empty lane is no lane
    shift 2
done
make_cmd=${MAKE:-make}
dir=$(dirname "$times")
side_pids=()
mkdir -p "$dir"
: > "$times"
all=$(date +%s)

cpu_ticks() {  # "BUSY TOTAL" jiffies of all CPUs so far (idle and iowait are not busy)
    local _cpu user nice system idle iowait irq softirq steal _rest
    read -r _cpu user nice system idle iowait irq softirq steal _rest < /proc/stat
    echo "$((user + nice + system + irq + softirq + steal)) $((user + nice + system + idle + iowait + irq + softirq + steal))"
}

own_cpu() {  # own_cpu FILE: the user + system seconds of the children line `times` wrote to FILE
    local _u _s cu cs
    { read -r _u _s; read -r cu cs; } < "$1" || { echo "?"; return; }
    # "1m2.345s 0m0.678s" -> seconds
    awk -v u="$cu" -v s="$cs" 'function sec(x, p) { split(x, p, /[ms]/); return p[1] * 60 + p[2] }
        BEGIN { printf "%.0f", sec(u) + sec(s) }'
}

run_stage() {  # run_stage LANE STAGE: make STAGE, timed, its line appended to $times
    local lane=$1 stage=$2 t rc b0 t0 b1 t1 busy tf now at
    t=$(date +%s)
    tf=$(mktemp)
    read -r b0 t0 < <(cpu_ticks)
    ( $make_cmd --no-print-directory "$stage"; rc=$?; times > "$tf"; exit "$rc" )
    rc=$?
    read -r b1 t1 < <(cpu_ticks)
    busy="CPUs $(( (t1 - t0) > 0 ? 100 * (b1 - b0) / (t1 - t0) : 0 ))% busy, its own processes $(own_cpu "$tf") CPU s"
    rm -f "$tf"
    now=$(date +%s)
    at="; it ended $((now - ${all:-$t})) s into the run"  # where the lanes end: their balance
    if [ "$rc" -ne 0 ]; then
        echo "$name: ${lane}stage $stage FAILED after $((now - t)) s ($busy$at)" | tee -a "$times"
        return "$rc"
    fi
    echo "$name: ${lane}stage $stage took $((now - t)) s ($busy$at)" | tee -a "$times"
}

side_lane() {
    local stage
    for stage in $stages; do
        run_stage "side lane $lane: " "$stage" || return 1
    done
}

start_side() {  # start_side N
    local n=$1 log=$dir/side-lane-$1.log
    echo "$name: side lane $n (${side_stages[n - 1]}) started; its output: $log"
    setsid bash -c "$(declare -f cpu_ticks own_cpu run_stage side_lane); name='$name' times='$times' make_cmd='$make_cmd' \
        all='$all' lane='$n' stages='${side_stages[n - 1]}' side_lane" > "$log" 2>&1 &
    side_pids[n - 1]=$!
}

stop_side() {
    local i
    for i in "${!side_pids[@]}"; do
        echo "$name: stopping side lane $((i + 1)) (pid ${side_pids[i]})"
        kill -TERM -- "-${side_pids[i]}" 2>/dev/null
        wait "${side_pids[i]}" 2>/dev/null
    done
    side_pids=()
}

# The containers' CPU accounting: podman's cgroupfs manager on cgroup v1 (this machine's) puts
# every container under one parent of the cpuacct hierarchy. Elsewhere the lines that need it
# are left out. (TIMED_STAGES_CGROUP and TIMED_STAGES_SAMPLE_S stand in for the path and the
# 5 s sampling interval in tests/layout/test_timed_stages.py.)
containers_cgroup=${TIMED_STAGES_CGROUP:-/sys/fs/cgroup/cpuacct/libpod_parent}
sample_s=${TIMED_STAGES_SAMPLE_S:-5}

containers_cpu() {  # CPU seconds all podman containers have used so far, or "?"
    local usage
    read -r usage 2>/dev/null < "$containers_cgroup/cpuacct.usage" || { echo "?"; return; }
    echo $((usage / 1000000000))
}

# Every $sample_s s, the CPU time each container has used since the run started (its
# cgroup's cpuacct.usage less what it was at the start: the cgroup of a container removed
# before the run stays behind with its old count, and one running already has used some),
# kept as "ID NAME SECONDS" lines (a container is named once, when first seen): the last
# line of an ID is its CPU time when last seen, the count before kept where the count went
# down (a container stopped and started again: its cgroup made anew, counting from 0); a
# container stopped or removed within one interval of its last sample loses that much.
# finish adds up the IDs of one name (a host made again).
container_sampler() {  # container_sampler OUT
    local out=$1 d id usage ref
    declare -A names=() base=() prev=() carry=()
    [[ -d $containers_cgroup ]] || return 0
    for d in "$containers_cgroup"/libpod-*/; do
        id=${d%/}; id=${id##*/libpod-}
        read -r usage 2>/dev/null < "$d/cpuacct.usage" && base[$id]=$usage
    done
    while sleep "$sample_s"; do
        for d in "$containers_cgroup"/libpod-*/; do
            id=${d%/}; id=${id##*/libpod-}
            [[ -r $d/cpuacct.usage ]] || continue
            [[ -n ${names[$id]:-} ]] || names[$id]=$(podman inspect --format '{{.Name}}' "$id" 2>/dev/null || echo "${id:0:12}")
            read -r usage < "$d/cpuacct.usage" || continue
            ref=${prev[$id]:-${base[$id]:-0}}
            if (( usage < ref )); then  # stopped and started again: a new cgroup, counting from 0
                carry[$id]=$(( ${carry[$id]:-0} + ref - ${base[$id]:-0} )) base[$id]=0
            fi
            prev[$id]=$usage
            echo "$id ${names[$id]} $(( (${carry[$id]:-0} + usage - ${base[$id]:-0}) / 1000000000 ))"
        done >> "$out"
    done
}

finish() {  # finish RC: print the table, exit RC
    local b1 t1 c1 ticks
    read -r b1 t1 < <(cpu_ticks)
    c1=$(containers_cpu)
    ticks=$(getconf CLK_TCK)
    echo "$name: all stages took $(( $(date +%s) - all )) s" >> "$times"
    echo "$name: the machine's $(nproc) CPUs were busy $(( (b1 - all_busy) / ticks )) CPU s in all ($(( (t1 - all_total) > 0 ? 100 * (b1 - all_busy) / (t1 - all_total) : 0 ))%)$( \
        [[ $c1 != "?" && $all_containers != "?" ]] && echo ", $((c1 - all_containers)) CPU s of them in test-host containers")" >> "$times"
    if [[ -n ${sampler_pid:-} ]]; then
        kill "$sampler_pid" 2>/dev/null
        # each container's CPU time over the run when last seen, summed per name, largest first
        [[ -s $samples ]] && awk '{ last[$1] = $3; name[$1] = $2 } END { for (i in last) sum[name[i]] += last[i]
                                   for (n in sum) print sum[n], n }' "$samples" | sort -rn \
            | awk -v name="$name" '$1 > 0 { printf "%s: test host %s used %d CPU s\n", name, $2, $1 }' >> "$times"
        rm -f "$samples"
    fi
    echo "---- $name: stage times ----"
    cat "$times"
    exit "$1"
}

read -r all_busy all_total < <(cpu_ticks)
all_containers=$(containers_cpu)
samples=$(mktemp)
container_sampler "$samples" &
sampler_pid=$!

trap 'stop_side; kill "${sampler_pid:-}" 2>/dev/null; exit 130' INT TERM

for stage in $main_stages; do
    if ! run_stage "" "$stage"; then
        stop_side
        finish 1
    fi
    for i in "${!side_after[@]}"; do
        [ "$stage" = "${side_after[i]}" ] && start_side $((i + 1))
    done
done

failed=0
for i in "${!side_pids[@]}"; do
    n=$((i + 1)) log=$dir/side-lane-$((i + 1)).log
    echo "$name: main lane done; waiting for side lane $n"
    if ! wait "${side_pids[i]}"; then
        echo "---- $name: side lane $n failed; the end of $log ----"
        tail -n 300 "$log"
        failed=1
    else
        echo "$name: side lane $n passed (its output: $log)"
    fi
done
finish "$failed"
