#!/bin/sh
# Stand-ins of an NVSwitch host's fabric software for the systemd test host (no
# NVSwitch there), installed by testhost/up.sh with TESTHOST_FABRIC=1, run as root
# inside the container:
#   /usr/bin/nv-fabricmanager   answers --version as R580's does ("Fabric Manager
#                               version is : X", X the stand-in driver's version from
#                               /etc/fake-nvidia/state.json); run as the service it
#                               starts the nvlsm stand-in, as R580's fabric manager
#                               starts NVLSM on Blackwell NVSwitch systems
#   nvidia-fabricmanager.service  enabled and started
#   nvlsm                       a package (dpkg) of a process named nvlsm
# The per-GPU fabric registration is the stand-in nvidia-smi's (-q: Fabric State and
# Status, from the state file). Nothing here is NVIDIA software; never a measurement.
set -eu

cat > /usr/bin/nv-fabricmanager <<'FM'
#!/bin/sh
# STAND-IN fabric manager (test host; no NVSwitch, no NVIDIA software)
case "${1:-}" in
    --version|-v)
        python3 -c 'import json; print("Fabric Manager version is : " + json.load(open("/etc/fake-nvidia/state.json"))["driver_version"])'
        exit 0 ;;
esac
[ -x /opt/nvidia/nvlsm/sbin/nvlsm ] && /opt/nvidia/nvlsm/sbin/nvlsm &
while :; do sleep 3600; done
FM
chmod 0755 /usr/bin/nv-fabricmanager

if ! dpkg-query -W -f='${db:Status-Status}' nvlsm 2>/dev/null | grep -qx installed; then
    build=$(mktemp -d)
    mkdir -p "$build/DEBIAN" "$build/opt/nvidia/nvlsm/sbin"
    printf 'Package: nvlsm\nVersion: 2025.06.6-1\nArchitecture: amd64\nMaintainer: test host <root@localhost>\nDescription: STAND-IN nvlsm (test host; no NVIDIA software)\n' \
        > "$build/DEBIAN/control"
    printf '#!/bin/sh\n# STAND-IN nvlsm\nwhile :; do sleep 3600; done\n' > "$build/opt/nvidia/nvlsm/sbin/nvlsm"
    chmod 0755 "$build/opt/nvidia/nvlsm/sbin/nvlsm"
    dpkg-deb --root-owner-group --build "$build" /tmp/nvlsm-stand-in.deb >/dev/null
    dpkg -i /tmp/nvlsm-stand-in.deb >/dev/null
    rm -rf "$build" /tmp/nvlsm-stand-in.deb
fi

printf '[Unit]\nDescription=STAND-IN NVIDIA fabric manager (test host)\n\n[Service]\nExecStart=/usr/bin/nv-fabricmanager\n\n[Install]\nWantedBy=multi-user.target\n' \
    > /etc/systemd/system/nvidia-fabricmanager.service
systemctl daemon-reload
systemctl enable --now nvidia-fabricmanager.service >/dev/null 2>&1
